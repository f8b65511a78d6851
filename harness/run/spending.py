"""``--cost-limit``: no episode starts once the spend recorded for the run folder reaches the limit.

The spend is what the folder's results already cost (a resumed run counts them) plus what this invocation's model
client has spent so far, in-flight episodes included, or the cost of the episodes it finished when that is more
(episodes on a Ray cluster spend through their executors' clients). Episodes in flight when the limit is reached
finish and are recorded; the rest are not started, and ``--resume`` with a higher limit runs them. Under a limit, the
local backend starts an episode in a freed slot only once the episode before it there is recorded (not as soon as
it asks to be scored), so each start sees what the episodes before it cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.llm import LLMClient
from harness.results.metrics import episode_cost
from harness.schema import Trajectory

from .config import RunConfig, RunRefused, models_in_use


@dataclass
class SpendLimit:
    limit_usd: float
    recorded_before_usd: float
    client: LLMClient
    finished_usd: float = 0.0
    not_started: int = field(default=0)
    """Episodes the limit kept from starting."""

    def add(self, trajectory: Trajectory) -> None:
        self.finished_usd += episode_cost(trajectory)

    @property
    def spent_usd(self) -> float:
        live = self.client.total_usage().cost_usd
        return self.recorded_before_usd + max(live, self.finished_usd)

    def reached(self) -> bool:
        return self.spent_usd >= self.limit_usd


def unpriced_models(config: RunConfig, client: LLMClient) -> list[str]:
    """The models this run calls whose price is unknown (so a spend limit could not be kept)."""
    return [model for model in models_in_use(config) if client.price_of(client.resolve(model)) is None]


def spend_limit_for(config: RunConfig, client: LLMClient, recorded_usd: float) -> SpendLimit | None:
    """The run's limit, or None without ``--cost-limit``; :class:`RunRefused` when it cannot be kept or when the
    folder's results already spent it (``recorded_usd``, what they cost)."""
    if config.cost_limit is None:
        return None
    unpriced = unpriced_models(config, client)
    if unpriced:
        raise RunRefused(
            *(
                f"--cost-limit needs a price for every model the run calls: {model!r} has none (set "
                "input_usd_per_million and output_usd_per_million for its alias in models.toml)"
                for model in unpriced
            )
        )
    before = recorded_usd
    if before >= config.cost_limit:
        raise RunRefused(
            f"--cost-limit ${config.cost_limit:.4f} is already reached: the run folder's results cost ${before:.4f}; "
            "nothing was started (resume with a higher limit)"
        )
    return SpendLimit(config.cost_limit, before, client)
