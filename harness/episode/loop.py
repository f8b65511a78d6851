"""The episode loop: one scenario worked by one agent, in non-conversational or conversational mode.

Non-conversational: system prompt, the task as the first user message, then agent turns; each tool call runs
in the scenario's sandbox session and its observation comes back as a ``tool`` message. The episode ends when
the agent answers without a tool call, or at the step limit (a step is one agent turn).

Conversational: the simulated user opens; agent turns alternate with tool calls, and each text reply of the
agent goes to the user, whose answer comes back as the next ``user`` message. The episode ends when the user
writes a stop token, or at the step limit.

:class:`Episode` holds one episode's state and applies one agent turn at a time, so the same code serves
:func:`run_episode` (which asks an :class:`~harness.rules.protocols.AgentPolicy` for each turn) and callers that
supply assistant messages themselves, such as a trainer's rollout loop.

How a turn is treated and how the reward is computed follow the episode rules (:mod:`harness.rules.profiles`,
``EpisodeConfig.rules``): ``harness`` (the default) or a profile a benchmark declares. The loop
reads the profile's fields (:attr:`Episode.rules`), never its name. Checks get the state snapshot taken at
reset as ``initial_state`` and, when they declare a third parameter, the transcript
(:func:`harness.scoring.checks.check_transcript`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from harness.episode.blame import classify_failure, environment_failure
from harness.episode.config import EpisodeConfig
from harness.episode.dispatch import open_tool_session
from harness.episode.dual_control import UserToolSession, user_call_messages, user_round
from harness.episode.message_limits import MessageLimits
from harness.episode.rule_components import NameOutcome, TurnKind, components
from harness.episode.turns import TurnTracker
from harness.episode.verdict import EndedEpisode, episode_verdict
from harness.llm import LLMError
from harness.rules.profiles import EpisodeRules
from harness.rules.prompts import conversation_opening, rules_agent_system_prompt, rules_user_system_prompt
from harness.rules.protocols import (
    AgentPolicy,
    AgentPolicyError,
    AgentTurn,
    ToolSession,
    ToolUsingUserPolicy,
    UserPolicy,
    openai_tool_call,
)
from harness.sandbox import SandboxError, SandboxPool
from harness.schema import (
    AgentSettings,
    CheckResult,
    DiffEntry,
    Environment,
    Failure,
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
from harness.scoring.checks import zero_reward
from harness.states.diff import diff_values
from harness.toolspec import derive_tools

logger = logging.getLogger(__name__)

SessionOpener = Callable[[Environment, dict[str, Any], int], Awaitable[ToolSession]]
"""Opens the episode's tool session from (environment, initial state, seed); the sandbox pool by default."""


FAILED_ENDINGS = frozenset({TerminationReason.ENVIRONMENT_ERROR, TerminationReason.INFRA_ERROR})
"""Endings whose final state is not scored by the checks (see :mod:`harness.episode.blame`)."""


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
        self.user_tools: list[dict[str, Any]] = [tool.model_dump(mode="json") for tool in environment.user_tools]
        self.user_steps: list[Step] = []
        self.steps: list[Step] = []
        self.turns = 0
        self.usage: dict[str, Usage] = {"agent": Usage()}
        if self.user is not None:
            self.usage["user"] = Usage()
        self.errors: list[str] = []
        self.termination: TerminationReason | None = None
        self.termination_detail: str | None = None
        self.failure: Failure | None = None
        self.timings = Timings()
        self.phase = "sandbox"
        self._clock = time.perf_counter()
        self._session: ToolSession | None = None
        self._opening: asyncio.Future[None] | None = None
        self._session_opener = session_opener
        self.rules: EpisodeRules = config.rules
        parts = components(self.rules)
        self.reader, self.answers, self.ending = parts.reader, parts.answers, parts.ending
        self._start_state: dict[str, Any] | None = None
        self._state_keys: set[str] = set()
        self._session_tools: set[str] = set()
        self._used_call_ids: set[str] = set()
        self._parse_errors_in_a_row = 0
        self.limits = MessageLimits(self.rules, config.step_limit) if self.rules.step_unit == "message" else None

    # ------------------------------------------------------------------------------------------ lifecycle

    @property
    def done(self) -> bool:
        return self.termination is not None

    def end(self, reason: TerminationReason, detail: str | None = None) -> None:
        if self.termination is None:
            self.termination = reason
            self.termination_detail = detail

    async def start(self, *, until_open: bool = True) -> None:
        """Open the sandbox session and write the opening messages (in conv mode the user speaks first).

        In a conversation whose user has no tools of its own, the user's opening line is asked for while the
        session opens: neither needs the other, and an episode's first model request then hides the open's time.
        The session is open (or the episode failed) when this returns, unless ``until_open`` is False: the open
        then goes on while the agent's first turn is asked for, and :meth:`apply` (or :meth:`finish`) waits for
        it, so that an environment that does not load still costs at most those first two requests."""
        self.phase = "sandbox"
        session_environment = self.environment
        if self._session_opener is None:
            session_environment = self.reader.session_environment(self.environment)
        self._session_tools = set(session_environment.tool_names)
        opening = asyncio.ensure_future(self._open(session_environment))
        user_acts_on_session = bool(self.rules.user_tool_calls and self.user_tools)  # dual control
        try:
            if self._write_openings() and not user_acts_on_session:
                await self._user_speaks()
        except BaseException:
            await _settled(opening)  # the session it opens is this episode's all the same: close() ends it
            raise
        self._opening = opening
        if until_open or user_acts_on_session:
            await self.session_opened()
        if self.user is not None and user_acts_on_session:
            await self._user_speaks()

    async def session_opened(self) -> None:
        """Wait for the session :meth:`start` began to open; its failure ends the episode as it would have there."""
        opening, self._opening = self._opening, None
        if opening is not None:
            self.phase = "sandbox"
            await opening

    async def _open(self, session_environment: Environment) -> None:
        started = time.perf_counter()
        try:
            if self._session_opener is not None:
                self._session = await self._session_opener(
                    session_environment, self.scenario.initial_state, self.config.seed
                )
            else:
                self._session = await open_tool_session(
                    self.pool, session_environment, self.scenario.initial_state, seed=self.config.seed
                )
            # Read-only from here on (diffs and checks read it), so sessions that start alike share one object.
            self._start_state = await self._session.state(shared=True)
            self._state_keys = set(self._start_state)
        finally:
            self.timings.tool_seconds += time.perf_counter() - started

    def _write_openings(self) -> bool:
        """The system prompt and the opening line; whether the user speaks next (a conversation)."""
        if self.scripted is None:  # a scripted conversation (a benchmark's) is played verbatim, without ours
            self.messages.append({"role": "system", "content": self._system_prompt()})
        if self.user is None:
            self.messages.append({"role": "user", "content": self.scenario.task})
            return False
        user_version = self.user.settings.system_prompt_version
        greeting, opening = conversation_opening(self.rules, user_version, self.scenario)
        if greeting is not None:
            self.messages.append({"role": "assistant", "content": greeting})
        user_prompt = rules_user_system_prompt(self.scenario, self.rules, user_version)
        self.user_view = [{"role": "system", "content": user_prompt}, {"role": "user", "content": opening}]
        return True

    async def act(self, agent: AgentPolicy) -> AgentTurn:
        """Ask ``agent`` for its next turn, timing it as model time."""
        self.phase = "agent"
        started = time.perf_counter()
        try:
            return await agent.act(self.messages, self.tools)
        finally:
            self.timings.model_seconds += time.perf_counter() - started

    async def apply(self, turn: AgentTurn) -> list[Observation]:
        """Apply one agent turn: run its tool calls, or pass its reply on; returns the observations.

        Every turn is one of: tool calls to run, a text reply (it ends a non-conversational episode and goes to
        the user in a conversation), or an unreadable turn. The rules decide which calls run and what an empty
        turn, an invalid action or a raising tool mean.
        """
        if self.done:
            raise RuntimeError(f"episode {self.episode_id} has already ended ({self.termination})")
        turn_index = self.turns
        self.turns += 1
        self.usage["agent"].add(turn.usage)
        calls = self.reader.runnable(turn, self._assign_call_ids(turn, turn_index))
        self.messages.append(turn.message)
        await self.session_opened()  # the turn is recorded (and its tokens counted) even if the session failed
        observations: list[Observation] = []
        action = self.reader.read(turn, calls)
        if action.kind is TurnKind.REPLY:
            await self._reply(action.text)
        elif action.kind is TurnKind.INVALID_ACTION:
            self._invalid_action(turn_index, action.error)
        elif action.kind is TurnKind.UNREADABLE:
            self._unreadable(turn, turn_index, action.error)
        else:
            self._parse_errors_in_a_row = 0
            for call in action.calls:
                observation = await self._execute(call, turn_index)
                if observation is None:
                    break
                observations.append(observation)
                if self.ending.after_call(call.name):
                    self.end(TerminationReason.AGENT_DONE, f"the agent called {call.name}, which ends the episode")
                if self.done:
                    break
            if self.scripted is not None and (reason := self.scripted.tool_step()) is not None:
                self.end(TerminationReason.MAX_STEPS, reason)
            if not self.done:
                self._count_messages(2)  # the agent's message and the batch of tool results
        limit_reached = self.limits is None and self.turns >= self.config.step_limit
        if not self.done and limit_reached and not self._turn_limited:
            self.end(TerminationReason.MAX_STEPS, f"step limit {self.config.step_limit} reached")
        return observations

    @property
    def _turn_limited(self) -> bool:
        """A scripted conversation whose turns carry their own step limit has no episode limit unless one is set."""
        return self.scripted is not None and self.scripted.step_limit is not None and self.config.max_steps is None

    async def _reply(self, text: str) -> None:
        """The agent's text reply: the end of a non-conversational episode, the next message to the user in a
        conversation."""
        self._parse_errors_in_a_row = 0
        if self.user is None or self.ending.agent_done(text):
            self.end(TerminationReason.AGENT_DONE)
            return
        self._count_messages(1)
        if not self.done:
            self.user_view.append({"role": "user", "content": text})
            await self._user_speaks()

    def _count_messages(self, messages: int) -> None:
        """Under rules that count messages: count them and end the episode at a limit they reach."""
        if self.limits is None:
            return
        reached = self.limits.count(messages)
        if reached is None:
            return
        if self.termination is TerminationReason.USER_STOP:
            # Upstream checks its limits after the user's message too: a limit reached by the stop replaces it.
            self.termination = None
        self.end(*reached)

    def _unreadable(self, turn: AgentTurn, turn_index: int, error: str) -> None:
        self.errors.append(f"turn {turn_index}: unreadable agent output: {error}")
        if self.ending.unreadable_ends:
            self.end(TerminationReason.AGENT_ERROR, f"unreadable agent turn: {error}")
            return
        answer = self.answers.unreadable(turn)
        if answer is not None:
            self.messages.append(answer)
        # Rules that count messages count the unreadable message and the answer to it.
        self._count_messages(2 if answer is not None else 1)
        if self.done or not self.ending.unreadable_in_a_row_ends:
            return
        self._parse_errors_in_a_row += 1
        if self._parse_errors_in_a_row >= self.config.max_consecutive_parse_errors:
            self.end(
                TerminationReason.AGENT_ERROR,
                f"{self._parse_errors_in_a_row} unreadable turns in a row; last: {error}",
            )

    def _invalid_action(self, turn_index: int, error: str) -> None:
        """An action the rules answer with upstream's "invalid action" user message; the episode goes on."""
        self._parse_errors_in_a_row = 0
        self.errors.append(f"turn {turn_index}: invalid action: {error}")
        self.messages.append(self.answers.invalid_action())

    def fail(self, exc: BaseException) -> None:
        """End the episode because ``exc`` was raised during the current phase (see :mod:`harness.episode.blame`)."""
        reason, detail, failure = classify_failure(exc, self.phase)
        if reason is TerminationReason.CONTEXT_OVERFLOW:
            logger.info("episode %s: context window exceeded (%s)", self.episode_id, self.phase)
        elif (
            isinstance(exc, LLMError | SandboxError | AgentPolicyError) or reason is TerminationReason.ENVIRONMENT_ERROR
        ):
            logger.warning("episode %s ended as %s: %s", self.episode_id, reason.value, detail)
        else:
            logger.exception("episode %s: unexpected error in %s", self.episode_id, self.phase, exc_info=exc)
        self.errors.append(detail)
        if self.termination is None:
            self.failure = failure
        self.end(reason, detail)

    async def finish(self) -> Trajectory:
        """Score the final state (unless the environment or the infrastructure failed), close the session, build
        the record."""
        if self.termination is None:
            raise RuntimeError(f"episode {self.episode_id} has not ended")
        final_state_diff: list[DiffEntry] = []
        check_results: list[CheckResult] = []
        reward: RewardBreakdown | None = None
        if self.termination not in FAILED_ENDINGS and (self._session is not None or self._opening is not None):
            self.phase = "sandbox"
            try:
                await self.session_opened()
                assert self._session is not None
                # Read-only too: a final state equal to a state read lately (nothing changed it) is that object.
                final_state = await self._session.state(shared=True)
                await self.close()  # its process is no longer needed: it exits before the checks run, not after
                if self._start_state is not None:
                    final_state_diff = [
                        DiffEntry.model_validate(entry) for entry in diff_values(self._start_state, final_state)
                    ]
                started = time.perf_counter()
                try:
                    check_results, reward = await episode_verdict(
                        self.pool, self._ended(), final_state, self._start_state
                    )
                finally:
                    self.timings.scoring_seconds += time.perf_counter() - started
            except Exception as exc:
                self.termination = None
                self.failure = None
                self.fail(exc)
                check_results, reward = [], None
        if self.termination is TerminationReason.ENVIRONMENT_ERROR and self.ending.environment_failure_scores:
            reward = zero_reward(self.scenario)
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
            failure=self.failure,
            usage=self.usage,
            timings=self.timings,
            errors=self.errors,
            user_steps=self.user_steps,
        )

    def _ended(self) -> EndedEpisode:
        assert self.termination is not None
        return EndedEpisode(
            scenario=self.scenario,
            environment=self.environment,
            rules=self.rules,
            termination=self.termination,
            messages=self.messages,
            calls=[step.call for step in self.steps],
            user_calls=user_call_messages(self.user_steps),
            seed=self.config.seed,
            scripted=self.scripted is not None,
            weights=self.config.reward_weights,
        )

    def _system_prompt(self) -> str:
        version = self.agent_settings.system_prompt_version
        return rules_agent_system_prompt(self.environment, self.config.mode, self.rules, version, self.scenario)

    async def close(self) -> None:
        opening, self._opening = self._opening, None
        if opening is not None:  # still opening: waited for, so that the session it opens is ended too
            await _settled(opening)
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

    async def _execute(self, call: ToolCall, turn_index: int) -> Observation | None:
        """Run one call and record it; None when the rules answered it without running it (an invalid action)."""
        self.phase = "sandbox"
        assert self._session is not None
        outcome = self.reader.name_outcome(call.name, self._session_tools, self._state_keys)
        if outcome is NameOutcome.INVALID_ACTION:
            self._invalid_action(turn_index, f"no tool named {call.name!r}")
            return None
        if outcome is NameOutcome.NOT_CALLABLE:
            # The name is looked up on the instance and called: a state attribute is not callable.
            observation = Observation(
                tool_call_id=call.id,
                name=call.name,
                kind=ObservationKind.TOOL_EXCEPTION,
                error=f"TypeError: the state attribute {call.name!r} is not callable",
            )
            self._record(call, observation, [], turn_index, 0.0)
            return observation
        started = time.perf_counter()
        # Unknown tools and arguments that are not a JSON object come back as error observations.
        observation, diff = await self._session.call(call)
        duration = time.perf_counter() - started
        self.timings.tool_seconds += duration
        if observation.kind is ObservationKind.SANDBOX_ERROR:
            raise SandboxError(f"sandbox failed on tool call {call.name!r}: {observation.error}")
        if observation.process_ended:
            # The call ended the environment's own process: its episode is the environment's failure, whatever a
            # replay in a new process would give.
            _, detail, self.failure = environment_failure(f"sandbox: tool {call.name!r}: {observation.error}")
            self.errors.append(detail)
            self.end(TerminationReason.ENVIRONMENT_ERROR, detail)
        self._state_keys.update(str(d.path[0]) for d in diff if len(d.path) == 1 and d.op == "add")
        self._record(call, observation, diff, turn_index, duration)
        return observation

    def _record(
        self, call: ToolCall, observation: Observation, diff: list[DiffEntry], turn_index: int, duration: float
    ) -> None:
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
        if self.limits is not None:
            self.limits.record_tool_result(observation)
        if self.ending.on_raise(observation):
            # The exception is answered as a user message and the episode ends with reward 0.
            self.messages.append(self.answers.raised(observation))
            self.end(TerminationReason.TOOL_EXCEPTION, f"{call.name}: {observation.error}")
            return
        self.messages.append(self.answers.tool_result(observation))

    async def _user_speaks(self) -> None:
        assert self.user is not None
        self.phase = "user"
        started = time.perf_counter()
        reached = None
        try:
            user, session = self.user, self._session
            if self.rules.user_tool_calls and self.user_tools and isinstance(user, ToolUsingUserPolicy):
                assert isinstance(session, UserToolSession), "dual control needs a dispatching session"
                round_ = await user_round(
                    user, session, self.user_view, self.user_tools, self.user_steps, self.limits, len(self.messages)
                )
                reply, reached = round_.reply, round_.reached
                self.usage["user"].add(round_.usage)
            else:
                reply = await self.user.respond(self.user_view)
        finally:
            self.timings.model_seconds += time.perf_counter() - started
        if reached is not None:
            self.end(*reached)
            return
        self.usage["user"].add(reply.usage)
        opening = not any(m.get("role") == "user" for m in self.messages)
        self.user_view.append({"role": self.rules.user_own_role, "content": reply.text})
        self.messages.append({"role": "user", "content": self.answers.user_message(reply)})
        stop_token = self.ending.user_stop(reply) if self.rules.opening_stop_ends or not opening else None
        if stop_token is not None:
            self.end(TerminationReason.USER_STOP, stop_token)
        elif self.scripted is not None:
            self.scripted.user_spoke()
            self.tools = self.scripted.tools(self.environment.tools)
        self._count_messages(1)


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
    """Run one episode to its end and return its trajectory: the primitive under
    :meth:`harness.episode_factory.EpisodeFactory.play`, for a caller that holds the environment and the whole
    configuration (no trust rule, no screening). Per-episode failures never raise: they end the
    trajectory with a termination reason (``environment_error`` episodes are scored as the rules say,
    ``infra_error`` episodes are not scored and can be re-run)."""
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


async def _settled(opening: asyncio.Future[None]) -> None:
    """Wait for a session's opening to end, whatever its outcome: the episode has already ended otherwise, so its
    failure no longer decides anything (it is retrieved, not left for asyncio to report)."""
    await asyncio.wait([opening])
    if not opening.cancelled():
        opening.exception()


async def drive(episode: Episode, agent: AgentPolicy) -> Trajectory:
    """Play ``episode`` with ``agent`` to its end; per-episode failures end the trajectory, never raise."""
    try:
        await episode.start(until_open=False)
        while not episode.done:
            await episode.apply(await episode.act(agent))
    except Exception as exc:
        episode.fail(exc)
    finally:
        if not episode.done:
            # Only reached when the task is cancelled: release the sandbox before the cancellation goes on.
            await episode.close()
    return await episode.finish()
