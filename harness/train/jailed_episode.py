"""One episode driven from outside the harness's own loop (by a trainer), with every failure kept as an outcome.

A trainer's rollout must never die of one bad row, one bad call or one crashing environment: each of those ends
only its own rollout, with a recorded reason and no reward (the reward functions read it as 0). The reason is
logged once: a row that recurs (each of a prompt's generations) does not log again.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.episode.loop import Episode
from harness.episode_factory import UNKNOWN_SCENARIO, EpisodeFactory, EpisodeRecipe, Refusal
from harness.library import Library
from harness.rules.profiles import EpisodeRules
from harness.rules.protocols import agent_turn_from_message
from harness.sandbox import SandboxPool
from harness.sandbox.arguments import CallRejected, validate_call
from harness.schema import (
    AgentSettings,
    Mode,
    ModelSettings,
    RewardBreakdown,
    Scenario,
    TerminationReason,
    Trajectory,
)
from harness.train.rows import BAD_ROW, read_row

logger = logging.getLogger(__name__)

OTHER_ENVIRONMENT = "scenario_of_another_environment"
REJECTED_CALL = "rejected_tool_call"
NOT_STARTED = "not_started"


@dataclass
class RolloutOutcome:
    """How a rollout ended: the episode's termination reason or the adapter's own (``UNKNOWN_SCENARIO`` …)."""

    scenario_id: str | None
    reason: str
    detail: str | None = None
    reward: RewardBreakdown | None = None
    trajectory: Trajectory | None = None

    @property
    def scored(self) -> bool:
        return self.reward is not None


_LOGGED_LIMIT = 4096
_logged: set[tuple[str, str, str]] = set()
_logged_lock = threading.Lock()


def void_outcome(scenario_id: str | None, reason: str, detail: str) -> RolloutOutcome:
    """The outcome of a rollout that ended for ``reason`` without a reward; logged as a warning the first time
    this process sees it (the same row, scenario and reason again: at debug level)."""
    key = (scenario_id or "", reason, detail)
    with _logged_lock:
        first = key not in _logged
        if first:
            if len(_logged) >= _LOGGED_LIMIT:
                _logged.clear()
            _logged.add(key)
    level = logging.WARNING if first else logging.DEBUG
    logger.log(level, "rollout of scenario %s ended: %s: %s", scenario_id or "(none)", reason, detail)
    return RolloutOutcome(scenario_id or None, reason, detail)


@dataclass
class EpisodeSettings:
    """What every rollout slot of one trainer shares: the library, the scenarios it may reset to, and the recipe
    of its episodes (:class:`~harness.episode_factory.EpisodeRecipe`)."""

    library: Library
    environment_id: str | None
    """The environment every scenario must belong to (None: any environment of the library)."""
    recipe: EpisodeRecipe = field(default_factory=EpisodeRecipe)
    user: Any = None
    """A :class:`UserPolicy`, or a function from the scenario to one (conversational mode)."""
    policy_name: str = "trainer"
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    screened: dict[str, tuple[Scenario, str | None]] = field(default_factory=dict)
    """The cheap validation's verdict per scenario id, shared by every rollout slot."""

    def __post_init__(self) -> None:
        if not self.scenarios:
            self.scenarios = {s.id: s for s in self.library.scenarios}

    @property
    def mode(self) -> Mode:
        return self.recipe.mode

    @property
    def profile(self) -> EpisodeRules:
        return self.recipe.rules


class JailedEpisode:
    """The current episode of one rollout slot; ``open`` again for the next rollout."""

    def __init__(self, settings: EpisodeSettings, pool: SandboxPool) -> None:
        self.settings = settings
        self.pool = pool
        self.factory = EpisodeFactory(settings.recipe, settings.library, pool, settings.screened)
        self.agent = AgentSettings(kind=settings.policy_name, model=ModelSettings(model=settings.policy_name))
        self.episode: Episode | None = None
        self.scenario: Scenario | None = None
        self.outcome: RolloutOutcome | None = RolloutOutcome(None, NOT_STARTED, "reset() was not called")
        self._count = 0

    async def open_row(self, row: object) -> list[dict[str, Any]]:
        """Start the episode a trainer's row names (``harness.train.rows``): its opening messages, or [] when the
        rollout ended already, a row that cannot start one included (``outcome`` says why)."""
        await self.close()
        self.scenario = None
        read = read_row(row)
        if isinstance(read, str):
            scenario_id = row.get("scenario_id") if isinstance(row, Mapping) else None
            return self._refuse(scenario_id if isinstance(scenario_id, str) else "", BAD_ROW, read)
        scenario = self.settings.scenarios.get(read.scenario_id)
        if read.environment is not None and scenario is not None and read.environment != scenario.environment_id:
            detail = f"the row names environment {read.environment!r}; scenario {scenario.id!r} belongs to "
            return self._refuse(scenario.id, OTHER_ENVIRONMENT, detail + repr(scenario.environment_id))
        return await self._start(read.scenario_id, read.seed)

    async def open(self, scenario_id: Any, *, seed: Any = 0) -> list[dict[str, Any]]:
        """Start the scenario's episode and return its opening messages ([] when the rollout ended already, a
        scenario id or seed a rollout cannot take included)."""
        return await self.open_row({"scenario_id": scenario_id, "seed": seed})

    async def _start(self, scenario_id: str, seed: int) -> list[dict[str, Any]]:
        await self.close()
        self.outcome = None
        self.scenario = None
        settings = self.settings
        scenario = settings.scenarios.get(scenario_id)
        if scenario is None:
            return self._refuse(str(scenario_id), UNKNOWN_SCENARIO, f"no scenario {scenario_id!r} in the library")
        self.scenario = scenario
        environment = settings.library.environments.get(scenario.environment_id)
        if environment is None:
            return self._refuse(scenario.id, UNKNOWN_SCENARIO, f"environment {scenario.environment_id!r} is missing")
        if settings.environment_id is not None and scenario.environment_id != settings.environment_id:
            detail = f"scenario {scenario.id!r} belongs to {scenario.environment_id!r}, not {settings.environment_id!r}"
            return self._refuse(scenario.id, OTHER_ENVIRONMENT, detail)
        episode = await self.factory.open(
            scenario,
            seed=seed,
            episode_id=f"{scenario.id}-{self._count + 1}",
            agent_settings=self.agent,
            user=settings.user,
        )
        if isinstance(episode, Refusal):
            return self._refuse(scenario.id, episode.reason, episode.detail)
        self._count += 1
        self.episode = episode
        try:
            await episode.start()
        except Exception as exc:
            episode.fail(exc)
        if episode.done:
            await self._finish_episode()
            return []
        return list(episode.messages)

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.episode.tools) if self.episode is not None else []

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool call and return the tool message's text. A call its schema rejects ends the rollout."""
        episode = self.episode
        if episode is None:
            return self._ended_text()
        try:
            encoded = json.dumps(arguments)
        except (TypeError, ValueError) as exc:
            await self.abort(REJECTED_CALL, f"the arguments of {name!r} are not JSON: {exc}")
            return f"Error: the arguments of {name!r} are not JSON. The episode has ended."
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": encoded}}],
        }
        rejection = await self.reject_invalid_calls(message)
        if rejection is not None:
            return f"Error: {rejection} The episode has ended."
        observations = await self.step(message)
        return "\n".join(str(o.get("content") or "") for o in observations) or self._ended_text()

    async def reject_invalid_calls(self, assistant_message: dict[str, Any]) -> str | None:
        """Why a tool call of ``assistant_message`` breaks its schema (the rollout then ends), or None."""
        episode = self.episode
        if episode is None:
            return None
        tools = {tool.function.name: tool for tool in episode.environment.tools}
        for call in agent_turn_from_message(assistant_message).tool_calls:
            try:
                validate_call(call, tools)
            except CallRejected as exc:
                await self.abort(REJECTED_CALL, str(exc))
                return str(exc)
        return None

    async def step(self, assistant_message: dict[str, Any]) -> list[dict[str, Any]]:
        """Apply one assistant message; the messages that followed it (tool results, the user's reply)."""
        episode = self.episode
        if episode is None:
            return []
        before = len(episode.messages)
        try:
            await episode.apply(agent_turn_from_message(assistant_message))
        except Exception as exc:
            episode.fail(exc)
        observations = episode.messages[before + 1 :]
        if episode.done:
            await self._finish_episode()
        return observations

    async def end(self, final_text: str = "") -> RolloutOutcome:
        """End the rollout (the agent has said its last word) and score it; the same outcome on later calls."""
        episode = self.episode
        if episode is not None and not episode.done:
            episode.messages.append({"role": "assistant", "content": final_text})
            episode.end(TerminationReason.AGENT_DONE)
        if self.episode is not None:
            await self._finish_episode()
        assert self.outcome is not None
        return self.outcome

    async def abort(self, reason: str, detail: str) -> None:
        """End the rollout without a reward, for ``reason``."""
        scenario_id = self.scenario.id if self.scenario is not None else None
        await self.close()
        self._refuse(scenario_id or "", reason, detail)

    async def close(self) -> None:
        episode, self.episode = self.episode, None
        if episode is not None:
            await episode.close()

    async def _finish_episode(self) -> None:
        episode, self.episode = self.episode, None
        assert episode is not None
        trajectory = await episode.finish()
        self.outcome = RolloutOutcome(
            trajectory.scenario_id,
            trajectory.termination.value,
            trajectory.termination_detail,
            trajectory.reward,
            trajectory,
        )

    def _refuse(self, scenario_id: str, reason: str, detail: str) -> list[dict[str, Any]]:
        self.outcome = void_outcome(scenario_id, reason, detail)
        return []

    def _ended_text(self) -> str:
        reason = self.outcome.reason if self.outcome is not None else NOT_STARTED
        return f"Error: the episode has ended ({reason}); no more tool calls run."
