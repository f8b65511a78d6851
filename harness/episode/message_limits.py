"""The step and error limits of rules that count messages (``EpisodeRules.step_unit``), as a benchmark's
orchestrator counts them.

Such an orchestrator counts one step per message: each agent message, each batch of
tool results, each user message (the agent's greeting is not one). After every step whose next message is not
for the environment it checks the step limit, then the number of tool results flagged as errors over the whole
episode; the error limit wins when both are reached, and either replaces a user stop made in the same step.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.rules.profiles import EpisodeRules
from harness.schema import Observation, ObservationKind, TerminationReason

LimitReached = tuple[TerminationReason, str]


@dataclass
class MessageLimits:
    rules: EpisodeRules
    step_limit: int
    steps: int = 0
    tool_errors: int = 0

    def record_tool_result(self, observation: Observation) -> None:
        """Count ``observation`` as a failed call when upstream would flag its tool message as an error."""
        prefix = self.rules.tool_error_prefix
        failed = observation.kind is not ObservationKind.OK or (
            prefix is not None and isinstance(observation.content, str) and observation.content.startswith(prefix)
        )
        if failed:
            self.tool_errors += 1

    def count(self, messages: int) -> LimitReached | None:
        """Count ``messages`` steps, the last of them not for the environment; the limit they reach, if any."""
        self.steps += messages
        most_errors = self.rules.max_tool_errors
        if most_errors is not None and self.tool_errors >= most_errors:
            return TerminationReason.TOO_MANY_ERRORS, f"{self.tool_errors} tool calls failed (limit {most_errors})"
        if self.steps >= self.step_limit:
            return TerminationReason.MAX_STEPS, f"step limit {self.step_limit} reached ({self.steps} messages)"
        return None
