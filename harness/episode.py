"""The episode loop: one scenario worked by one agent, in non-conversational or conversational mode.

Non-conversational: system prompt, the task as the first user message, then agent turns; each tool call runs
in the scenario's sandbox session and its observation comes back as a ``tool`` message. The episode ends when
the agent answers without a tool call, or at the step limit (a step is one agent turn).

Conversational: the simulated user opens; agent turns alternate with tool calls, and each text reply of the
agent goes to the user, whose answer comes back as the next ``user`` message. The episode ends when the user
writes a stop token, or at the step limit.

:class:`Episode` holds one episode's state and applies one agent turn at a time, so the same code serves
:func:`run_episode` (which asks an :class:`~harness.protocols.AgentPolicy` for each turn) and callers that
supply assistant messages themselves, such as a trainer's rollout loop.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.bfcl import score_turns
from harness.dispatch import open_tool_session
from harness.llm import ContextWindowExceeded, LLMError
from harness.prompts import agent_system_prompt, default_user_profile, user_greeting, user_system_prompt
from harness.protocols import (
    AgentPolicy,
    AgentPolicyError,
    AgentTurn,
    ToolSession,
    UserPolicy,
    UserTurn,
    openai_tool_call,
)
from harness.reward import CompositeWeights, composite
from harness.sandbox import SandboxError, SandboxPool
from harness.schema import (
    AgentSettings,
    CheckResult,
    DiffEntry,
    Environment,
    Mode,
    Observation,
    ObservationKind,
    RewardBreakdown,
    Scenario,
    Step,
    TerminationReason,
    Timings,
    ToolCall,
    Trajectory,
    Usage,
    utc_now,
)
from harness.scoring import score_final_state
from harness.statediff import diff_values
from harness.toolspec import derive_tools
from harness.turns import TurnTracker

logger = logging.getLogger(__name__)

DEFAULT_MAX_STEPS: dict[str, int] = {"nonconv": 30, "conv": 40}

SessionOpener = Callable[[Environment, dict[str, Any], int], Awaitable[ToolSession]]
"""Opens the episode's tool session from (environment, initial state, seed); the sandbox pool by default."""


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

    @property
    def step_limit(self) -> int:
        return self.max_steps if self.max_steps is not None else DEFAULT_MAX_STEPS[self.mode]


def observation_content(observation: Observation) -> str:
    """The JSON text of a ``tool`` message: the tool's own result, or an error the agent can act on."""
    if observation.kind is ObservationKind.OK or (
        observation.kind is ObservationKind.TOOL_ERROR and observation.content is not None
    ):
        payload: Any = observation.content
    else:
        payload = {
            "success": False,
            "error": observation.error or observation.kind.value,
            "error_type": observation.kind.value,
        }
    return json.dumps(payload, ensure_ascii=False, default=str)


def tool_message(observation: Observation) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": observation.tool_call_id,
        "name": observation.name,
        "content": observation_content(observation),
    }


class Episode:
    """One episode in progress: the transcript, the sandbox session and everything the trajectory records.

    Use :meth:`start`, then :meth:`apply` for each agent turn until :attr:`done`, then :meth:`finish`. An
    exception raised by a step can be handed to :meth:`fail`, which ends the episode with the matching
    termination reason; :meth:`finish` never raises for per-episode failures.
    """

    def __init__(
        self,
        scenario: Scenario,
        environment: Environment,
        *,
        pool: SandboxPool,
        config: EpisodeConfig,
        episode_id: str,
        agent_settings: AgentSettings,
        user: UserPolicy | None = None,
        session_opener: SessionOpener | None = None,
    ) -> None:
        if config.mode == "conv" and user is None:
            raise ValueError("conversational mode needs a user policy")
        if not environment.tools:
            tools = derive_tools(environment.code, environment.class_name)
            environment = environment.model_copy(update={"tools": tools})
        self.scenario = scenario
        self.environment = environment
        self.pool = pool
        self.config = config
        self.episode_id = episode_id
        self.agent_settings = agent_settings
        self.user = user if config.mode == "conv" else None
        self.tools: list[dict[str, Any]] = [tool.model_dump(mode="json") for tool in environment.tools]
        # Scripted turns (conv mode): tools a later turn adds stay hidden, and each turn has its own step limit.
        self.scripted = TurnTracker(scenario) if scenario.turns and self.user is not None else None
        if self.scripted is not None:
            self.tools = self.scripted.tools(environment.tools)
        self.messages: list[dict[str, Any]] = []
        self.user_view: list[dict[str, Any]] = []
        self.steps: list[Step] = []
        self.turns = 0
        self.usage: dict[str, Usage] = {"agent": Usage()}
        if self.user is not None:
            self.usage["user"] = Usage()
        self.errors: list[str] = []
        self.termination: TerminationReason | None = None
        self.termination_detail: str | None = None
        self.timings = Timings()
        self.phase = "sandbox"
        self._clock = time.perf_counter()
        self._session: ToolSession | None = None
        self._session_opener = session_opener
        self._start_state: dict[str, Any] | None = None
        self._used_call_ids: set[str] = set()
        self._parse_errors_in_a_row = 0

    # ------------------------------------------------------------------------------------------ lifecycle

    @property
    def done(self) -> bool:
        return self.termination is not None

    def end(self, reason: TerminationReason, detail: str | None = None) -> None:
        if self.termination is None:
            self.termination = reason
            self.termination_detail = detail

    async def start(self) -> None:
        """Open the sandbox session and write the opening messages (in conv mode the user speaks first)."""
        self.phase = "sandbox"
        started = time.perf_counter()
        if self._session_opener is not None:
            self._session = await self._session_opener(self.environment, self.scenario.initial_state, self.config.seed)
        else:
            self._session = await open_tool_session(
                self.pool, self.environment, self.scenario.initial_state, seed=self.config.seed
            )
        self._start_state = await self._session.state()
        self.timings.tool_seconds += time.perf_counter() - started
        version = self.agent_settings.system_prompt_version
        if self.scripted is None:  # a scripted conversation (a benchmark's) is played verbatim, without ours
            self.messages.append(
                {"role": "system", "content": agent_system_prompt(self.environment, self.config.mode, version)}
            )
        if self.user is None:
            self.messages.append({"role": "user", "content": self.scenario.task})
            return
        profile = self.scenario.user_profile or default_user_profile(self.scenario.task)
        user_version = self.user.settings.system_prompt_version
        self.user_view = [
            {"role": "system", "content": user_system_prompt(profile, user_version)},
            {"role": "user", "content": user_greeting(user_version)},
        ]
        await self._user_speaks()

    async def act(self, agent: AgentPolicy) -> AgentTurn:
        """Ask ``agent`` for its next turn, timing it as model time."""
        self.phase = "agent"
        started = time.perf_counter()
        try:
            return await agent.act(self.messages, self.tools)
        finally:
            self.timings.model_seconds += time.perf_counter() - started

    async def apply(self, turn: AgentTurn) -> list[Observation]:
        """Apply one agent turn: run its tool calls, or pass its reply on; returns the observations."""
        if self.done:
            raise RuntimeError(f"episode {self.episode_id} has already ended ({self.termination})")
        turn_index = self.turns
        self.turns += 1
        self.usage["agent"].add(turn.usage)
        calls = self._assign_call_ids(turn, turn_index)
        self.messages.append(turn.message)
        observations: list[Observation] = []
        if turn.parse_error is not None and not calls:
            self._parse_errors_in_a_row += 1
            self.errors.append(f"turn {turn_index}: unreadable agent output: {turn.parse_error}")
            if turn.feedback is not None:
                self.messages.append(turn.feedback)
            if self._parse_errors_in_a_row >= self.config.max_consecutive_parse_errors:
                self.end(
                    TerminationReason.AGENT_ERROR,
                    f"{self._parse_errors_in_a_row} unreadable turns in a row; last: {turn.parse_error}",
                )
        elif calls:
            self._parse_errors_in_a_row = 0
            for call in calls:
                observations.append(await self._execute(call, turn_index))
            if self.scripted is not None and (reason := self.scripted.tool_step()) is not None:
                self.end(TerminationReason.MAX_STEPS, reason)
        else:
            self._parse_errors_in_a_row = 0
            if self.user is None:
                self.end(TerminationReason.AGENT_DONE)
            else:
                self.user_view.append({"role": "user", "content": turn.text})
                await self._user_speaks()
        if not self.done and self.turns >= self.config.step_limit and not self._turn_limited:
            self.end(TerminationReason.MAX_STEPS, f"step limit {self.config.step_limit} reached")
        return observations

    @property
    def _turn_limited(self) -> bool:
        """A scripted conversation whose turns carry their own step limit has no episode limit unless one is set."""
        return (
            self.scripted is not None and self.scripted.step_limit is not None and self.config.max_steps is None
        )

    def fail(self, exc: BaseException) -> None:
        """End the episode because ``exc`` was raised during the current phase."""
        reason, detail = classify_failure(exc, self.phase)
        if reason is TerminationReason.CONTEXT_OVERFLOW:
            logger.info("episode %s: context window exceeded (%s)", self.episode_id, self.phase)
        elif isinstance(exc, LLMError | SandboxError | AgentPolicyError):
            logger.warning("episode %s ended as %s: %s", self.episode_id, reason.value, detail)
        else:
            logger.exception("episode %s: unexpected error in %s", self.episode_id, self.phase, exc_info=exc)
        self.errors.append(detail)
        self.end(reason, detail)

    async def finish(self) -> Trajectory:
        """Score the final state (unless the infrastructure failed), close the session, build the record."""
        if self.termination is None:
            raise RuntimeError(f"episode {self.episode_id} has not ended")
        final_state_diff: list[DiffEntry] = []
        check_results: list[CheckResult] = []
        reward: RewardBreakdown | None = None
        if self.termination is not TerminationReason.INFRA_ERROR and self._session is not None:
            self.phase = "sandbox"
            try:
                final_state = await self._session.state()
                if self._start_state is not None:
                    final_state_diff = [
                        DiffEntry.model_validate(entry) for entry in diff_values(self._start_state, final_state)
                    ]
                if self.scripted is not None and not self.scenario.checks:
                    started = time.perf_counter()
                    try:
                        check_results, reward = await score_turns(
                            self.pool,
                            self.scenario,
                            self.environment,
                            self.messages,
                            self.termination,
                            seed=self.config.seed,
                        )
                    finally:
                        self.timings.scoring_seconds += time.perf_counter() - started
                elif self.scenario.checks:
                    started = time.perf_counter()
                    try:
                        check_results, reward = await score_final_state(self.pool, self.scenario, final_state)
                        calls = [step.call for step in self.steps]
                        reward = composite(self.scenario, calls, reward, final_state, self.config.reward_weights)
                    finally:
                        self.timings.scoring_seconds += time.perf_counter() - started
            except Exception as exc:
                self.termination = None
                self.fail(exc)
                check_results, reward = [], None
        await self.close()
        termination = self.termination
        assert termination is not None
        self.timings.ended_at = utc_now()
        self.timings.wall_seconds = time.perf_counter() - self._clock
        return Trajectory(
            episode_id=self.episode_id,
            run_id=self.config.run_id,
            scenario_id=self.scenario.id,
            environment_id=self.environment.id,
            mode=self.config.mode,
            trial=self.config.trial,
            agent=self.agent_settings,
            user=self.user.settings if self.user is not None else None,
            tools=self.environment.tools,
            messages=self.messages,
            steps=self.steps,
            final_state_diff=final_state_diff,
            check_results=check_results,
            reward=reward,
            termination=termination,
            termination_detail=self.termination_detail,
            usage=self.usage,
            timings=self.timings,
            errors=self.errors,
        )

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            await session.close()
        except Exception as exc:
            logger.warning("episode %s: closing the sandbox session failed: %s", self.episode_id, exc)

    # ---------------------------------------------------------------------------------------------- steps

    def _assign_call_ids(self, turn: AgentTurn, turn_index: int) -> list[ToolCall]:
        """Keep the model's tool-call ids; give ``call_<turn>_<i>`` to calls without one (or a repeated one),
        and make the recorded assistant message agree."""
        calls: list[ToolCall] = []
        changed = False
        for i, call in enumerate(turn.tool_calls):
            if not call.id or call.id in self._used_call_ids:
                call = call.model_copy(update={"id": f"call_{turn_index}_{i}"})
                changed = True
            self._used_call_ids.add(call.id)
            calls.append(call)
        if changed or (calls and not turn.message.get("tool_calls")):
            turn.message = {**turn.message, "tool_calls": [openai_tool_call(call) for call in calls]}
        turn.tool_calls = calls
        return calls

    async def _execute(self, call: ToolCall, turn_index: int) -> Observation:
        self.phase = "sandbox"
        started = time.perf_counter()
        assert self._session is not None
        # Unknown tools and arguments that are not a JSON object come back as error observations.
        observation, diff = await self._session.call(call)
        duration = time.perf_counter() - started
        self.timings.tool_seconds += duration
        if observation.kind is ObservationKind.SANDBOX_ERROR:
            raise SandboxError(f"sandbox failed on tool call {call.name!r}: {observation.error}")
        self.steps.append(
            Step(
                index=len(self.steps),
                turn=turn_index,
                call=call,
                observation=observation,
                state_diff=diff,
                duration_ms=duration * 1000.0,
            )
        )
        self.messages.append(tool_message(observation))
        return observation

    async def _user_speaks(self) -> None:
        assert self.user is not None
        self.phase = "user"
        started = time.perf_counter()
        try:
            reply: UserTurn = await self.user.respond(self.user_view)
        finally:
            self.timings.model_seconds += time.perf_counter() - started
        self.usage["user"].add(reply.usage)
        self.user_view.append({"role": "assistant", "content": reply.text})
        self.messages.append({"role": "user", "content": reply.text})
        if reply.stop_token is not None:
            self.end(TerminationReason.USER_STOP, reply.stop_token)
        elif self.scripted is not None:
            self.scripted.user_spoke()
            self.tools = self.scripted.tools(self.environment.tools)


def classify_failure(exc: BaseException, phase: str) -> tuple[TerminationReason, str]:
    """Which termination reason an exception raised during ``phase`` (agent, user, sandbox) means."""
    detail = f"{phase}: {type(exc).__name__}: {exc}"
    if isinstance(exc, ContextWindowExceeded):
        return TerminationReason.CONTEXT_OVERFLOW, detail
    if isinstance(exc, LLMError | SandboxError):
        return TerminationReason.INFRA_ERROR, detail
    if phase == "agent":
        return TerminationReason.AGENT_ERROR, detail
    # A failing user policy or loop is not the agent's fault: mark it for a re-run instead of scoring it.
    return TerminationReason.INFRA_ERROR, detail


async def run_episode(
    scenario: Scenario,
    environment: Environment,
    *,
    pool: SandboxPool,
    agent: AgentPolicy,
    user: UserPolicy | None = None,
    config: EpisodeConfig,
    episode_id: str,
) -> Trajectory:
    """Run one episode to its end and return its trajectory. Per-episode failures never raise: they end the
    trajectory with a termination reason (``infra_error`` episodes are not scored and can be re-run)."""
    episode = Episode(
        scenario,
        environment,
        pool=pool,
        config=config,
        episode_id=episode_id,
        agent_settings=agent.settings,
        user=user,
    )
    return await drive(episode, agent)


async def drive(episode: Episode, agent: AgentPolicy) -> Trajectory:
    """Play ``episode`` with ``agent`` to its end; per-episode failures end the trajectory, never raise."""
    try:
        await episode.start()
        while not episode.done:
            await episode.apply(await episode.act(agent))
    except Exception as exc:
        episode.fail(exc)
    finally:
        if not episode.done:
            # Only reached when the task is cancelled: release the sandbox before the cancellation goes on.
            await episode.close()
    return await episode.finish()
