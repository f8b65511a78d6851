"""How one episode runs: its mode, step limit, seed, trial, reward weights and episode rules."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.registry import rules_profile
from harness.rules.profiles import HARNESS_RULES, EpisodeRules
from harness.schema import Mode
from harness.scoring.reward import CompositeWeights

DEFAULT_MAX_STEPS: dict[str, int] = {"nonconv": 30, "conv": 40}


class EpisodeConfig(BaseModel):
    """How one episode runs. ``max_steps`` counts agent turns; None takes the mode's default (30 / 40)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = "nonconv"
    max_steps: int | None = Field(default=None, ge=1)
    seed: int = 0
    trial: int = 0
    run_id: str | None = None
    reward_weights: CompositeWeights = Field(
        default_factory=CompositeWeights, description="α, γ and tolerances of the composite reward."
    )
    max_consecutive_parse_errors: int = Field(
        default=3, ge=1, description="Unreadable agent turns in a row before the episode ends as agent_error."
    )
    rules: EpisodeRules = Field(
        default=HARNESS_RULES,
        description="The episode rules: a profile, or its name (harness, or one a registered benchmark declares), "
        "resolved once here.",
    )

    @field_validator("rules", mode="before")
    @classmethod
    def _profile(cls, rules: Any) -> Any:
        return rules_profile(rules) if rules is None or isinstance(rules, str) else rules

    @property
    def step_limit(self) -> int:
        if self.max_steps is not None:
            return self.max_steps
        return self.rules.default_max_steps or DEFAULT_MAX_STEPS[self.mode]
