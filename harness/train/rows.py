"""What a trainer's row must hold to start a rollout, checked in one place.

TRL calls ``reset(**row)`` with the whole dataset row, verl's agent loop gets the row's non-tensor fields (ours
in ``extra_info``), and the gym's ``reset(scenario, seed=...)`` takes a seed too. A row whose values are not what
a rollout needs (no scenario id, a seed that is not a 64-bit integer, a key of ours of the wrong type) does not
start: the rollout ends at once with the reason (``BAD_ROW``), before anything runs, and never raises into the
trainer. Keys that are not ours (TRL's ``prompt``, verl's ``index``, anything else) are left alone.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

BAD_ROW = "bad_row"
"""The ending of a rollout whose row does not hold what a rollout needs."""

MAX_SEED = 2**63 - 1
"""The largest seed: the sandbox's request carries it as a 64-bit integer."""


class RolloutRow(BaseModel):
    """The fields of a trainer's row that start a rollout."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    scenario_id: StrictStr = Field(min_length=1, max_length=1000, description="The scenario the rollout opens.")
    seed: StrictInt = Field(
        default=0,
        ge=0,
        le=MAX_SEED,
        description="Seeds the session's frozen clock and random generators; absent or null: 0.",
    )
    environment: StrictStr | None = Field(
        default=None, description="The scenario's environment, when the row names it (TRL picks a factory by it)."
    )

    @field_validator("scenario_id", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("the row names no scenario")
        return value

    @field_validator("seed", mode="before")
    @classmethod
    def _integral(cls, value: Any) -> Any:
        """Null is no seed (0); an integer of another library (numpy's) is that integer; anything else is left to
        the strict check (a bool, a float, a string are refused)."""
        if value is None:
            return 0
        if not isinstance(value, bool | int) and hasattr(type(value), "__index__"):
            try:
                return operator.index(value)
            except Exception:
                return value
        return value


def read_row(row: object) -> RolloutRow | str:
    """The row's rollout fields, or every problem with them on one line."""
    try:
        return RolloutRow.model_validate(dict(row) if isinstance(row, Mapping) else row)
    except ValidationError as exc:
        return "; ".join(_problem(error) for error in exc.errors(include_url=False, include_input=False))


def _problem(error: Any) -> str:
    where = ".".join(str(part) for part in error.get("loc", ())) or "the row"
    if error.get("type") == "missing":
        return f"{where}: the row has none"
    return f"{where}: {error.get('msg', 'invalid')}"


def void_text(reason: str, detail: str | None) -> str:
    """What a trainer's policy reads where the task would be, for a rollout that ended before it started."""
    because = f": {detail}" if detail else ""
    return f"This rollout is void ({reason}{because}). No tool runs in it, and its reward is 0."


__all__ = ["BAD_ROW", "MAX_SEED", "RolloutRow", "read_row", "void_text"]
