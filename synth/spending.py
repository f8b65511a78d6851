"""``--cost-limit`` for synthesis: no new attempt starts once the recorded spend reaches the limit.

The recorded spend is what the output folder's journal already cost (a resumed synthesis counts it) plus what
this invocation's model client has spent, in-flight attempts included. Attempts in flight finish and are
journaled; the others are not started (and not journaled), so a rerun with a higher limit runs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import BadInput
from harness.llm import LLMClient
from harness.schema import Usage


class SpendRefused(BadInput):
    """A cost limit that cannot be kept (a model without a price) or that the recorded spend already reached."""


@dataclass
class SynthesisSpend:
    limit_usd: float | None
    recorded_usd: float
    client: LLMClient
    not_started: int = 0

    @property
    def spent_usd(self) -> float:
        return self.recorded_usd + self.client.total_usage().cost_usd

    def reached(self) -> bool:
        return self.limit_usd is not None and self.spent_usd >= self.limit_usd

    def gate(self) -> Callable[[], bool] | None:
        """For a cluster's dispatch: whether a unit may start (None without a limit); the dispatch counts the rest."""
        return None if self.limit_usd is None else lambda: not self.reached()

    def allows_start(self) -> bool:
        """Whether a new attempt may start; counts the ones it keeps from starting."""
        if self.limit_usd is None or self.spent_usd < self.limit_usd:
            return True
        self.not_started += 1
        return False


def recorded_spend(records: Iterable[dict[str, Any]]) -> float:
    return math.fsum(Usage.model_validate(record.get("usage") or {}).cost_usd for record in records)


def synthesis_spend(
    limit_usd: float | None, client: LLMClient, models: Sequence[str | None], recorded_usd: float = 0.0
) -> SynthesisSpend:
    """The spend gate of one synthesis; :class:`SpendRefused` with one line per problem when it cannot be kept."""
    if limit_usd is not None:
        unpriced = [m for m in dict.fromkeys(m for m in models if m) if client.price_of(client.resolve(m)) is None]
        if unpriced:
            raise SpendRefused(
                "\n".join(
                    f"--cost-limit needs a price for every model: {model!r} has none (set input_usd_per_million and "
                    "output_usd_per_million for its alias in models.toml)"
                    for model in unpriced
                )
            )
        if recorded_usd >= limit_usd:
            raise SpendRefused(
                f"--cost-limit ${limit_usd:.4f} is already reached: the output folder's attempts cost "
                f"${recorded_usd:.4f}; nothing was started (rerun with a higher limit)"
            )
    return SynthesisSpend(limit_usd, recorded_usd, client)
