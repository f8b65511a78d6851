"""The components an episode is played with, each chosen by its rules profile from the profile's typed fields:
how an agent turn is read (:class:`TurnReader`), what the agent is answered (:class:`Answers`) and when the episode
ends (:class:`Ending`). The episode loop (:mod:`harness.episode.loop`) runs the generic algorithm and asks them; the
prompts are the profile's own component (``EpisodeRules.prompts``, :mod:`harness.rules.prompts`) and the reward is the
verdict's (:mod:`harness.episode.verdict`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from harness.episode.tool_messages import pass_through_tools, tool_message
from harness.rules.profiles import INVALID_ACTION_TEXT, PARSE_ERROR_TEXT, EpisodeRules, user_reply
from harness.rules.protocols import AgentTurn, UserTurn
from harness.schema import Environment, Observation, ObservationKind, ToolCall

RAISING_KINDS = frozenset(
    {
        ObservationKind.TOOL_EXCEPTION,
        ObservationKind.INVALID_ARGUMENTS,
        ObservationKind.TIMEOUT,
        ObservationKind.RESOURCE_LIMIT,
        ObservationKind.FORBIDDEN,
    }
)
"""Observation kinds that mean "the method raised" (or would have, in plain Python: a keyword the method does not
take, a missing argument). A result that is not JSON (BAD_RESULT) is not among them: the method returned, and a
runtime that shows its ``str()`` goes on, so the agent gets an error observation and goes on."""


class TurnKind(Enum):
    CALLS = "calls"
    """Tool calls to run, in order."""
    REPLY = "reply"
    """A text reply: it ends a non-conversational episode and goes to the user in a conversation."""
    INVALID_ACTION = "invalid_action"
    """An action the rules answer with an "invalid action" message; the episode goes on."""
    UNREADABLE = "unreadable"
    """A turn that cannot be read."""


@dataclass(frozen=True)
class TurnAction:
    """What one agent turn is, as its rules read it."""

    kind: TurnKind
    calls: list[ToolCall] = field(default_factory=list)
    text: str = ""
    error: str = ""


class NameOutcome(Enum):
    RUN = "run"
    """The session runs the call (an unknown tool there is an error observation)."""
    INVALID_ACTION = "invalid_action"
    """No such tool: answered as an invalid action without running anything."""
    NOT_CALLABLE = "not_callable"
    """A state attribute called as a tool: in plain Python, a ``TypeError``."""


class TurnReader:
    """How an agent turn is read: which of its calls run, and whether it is calls, a reply, an invalid action or
    an unreadable turn."""

    def __init__(self, rules: EpisodeRules) -> None:
        self.rules = rules

    def session_environment(self, environment: Environment) -> Environment:
        """The environment a session is opened with: under rules that pass arguments through, with schemas that let
        any value reach the method."""
        if self.rules.pass_arguments_through:
            return environment.model_copy(update={"tools": pass_through_tools(environment)})
        return environment

    def runnable(self, turn: AgentTurn, calls: list[ToolCall]) -> list[ToolCall]:
        """The calls of ``turn`` that run; under rules that cut the recorded message to them, ``turn.message`` is
        cut too."""
        if not self.rules.first_call_only:
            return calls
        if self.rules.drop_unrun_calls and len(turn.message.get("tool_calls") or []) > 1:
            turn.message = {**turn.message, "tool_calls": turn.message["tool_calls"][:1]}
        return calls[:1]

    def read(self, turn: AgentTurn, calls: list[ToolCall]) -> TurnAction:
        rules = self.rules
        if calls and rules.reply_tool and calls[0].name == rules.reply_tool:
            content = (calls[0].arguments or {}).get("content")
            if isinstance(content, str):
                return TurnAction(TurnKind.REPLY, text=content)
            return TurnAction(TurnKind.INVALID_ACTION, error="the reply tool needs a 'content' argument")
        if calls and rules.errors_as_user_messages and calls[0].arguments is None:
            # Arguments that are JSON but not an object are an invalid action; others do not parse.
            if _is_json(calls[0].raw_arguments):
                return TurnAction(TurnKind.INVALID_ACTION, error=f"arguments of {calls[0].name!r} are not an object")
            return TurnAction(TurnKind.UNREADABLE, error=f"arguments of {calls[0].name!r} are not JSON")
        if rules.unreadable_turn_ends_episode and any(call.arguments is None for call in calls):
            unreadable = next(call for call in calls if call.arguments is None)
            return TurnAction(TurnKind.UNREADABLE, error=f"arguments of {unreadable.name!r} are not a JSON object")
        if calls:
            return TurnAction(TurnKind.CALLS, calls=calls)
        if turn.parse_error is not None:
            return TurnAction(TurnKind.UNREADABLE, error=turn.parse_error)
        if not turn.text and rules.empty_turn_is_parse_error:
            return TurnAction(TurnKind.UNREADABLE, error="the turn has neither text nor a tool call")
        return TurnAction(TurnKind.REPLY, text=turn.text)

    def name_outcome(self, name: str, session_tools: set[str], state_keys: set[str]) -> NameOutcome:
        """What a call to ``name`` is before it runs: under rules that answer errors as user messages, a name the
        session has no tool for is an invalid action, or a state attribute that cannot be called."""
        if not self.rules.errors_as_user_messages or name in session_tools:
            return NameOutcome.RUN
        return NameOutcome.NOT_CALLABLE if name in state_keys else NameOutcome.INVALID_ACTION


class Answers:
    """What the agent is given back: a tool's result, a raising tool, an invalid action, an unreadable turn, and
    the simulated user's message."""

    def __init__(self, rules: EpisodeRules) -> None:
        self.rules = rules

    def tool_result(self, observation: Observation) -> dict[str, Any]:
        return tool_message(observation, self.rules)

    def raised(self, observation: Observation) -> dict[str, Any]:
        """A raising tool under rules that end the episode on it: the exception as a user message."""
        return {"role": "user", "content": f"Error: <Exception>\n{observation.error}"}

    def invalid_action(self) -> dict[str, Any]:
        return {"role": "user", "content": INVALID_ACTION_TEXT}

    def unreadable(self, turn: AgentTurn) -> dict[str, Any] | None:
        """The message that answers an unreadable turn (a parse-error user message under rules that answer errors
        so, else the agent's own feedback when it has one)."""
        if self.rules.errors_as_user_messages:
            return {"role": "user", "content": PARSE_ERROR_TEXT}
        return turn.feedback

    def user_message(self, reply: UserTurn) -> str:
        return user_reply(reply, self.rules)


class Ending:
    """When the episode ends: a tool that ends it, a finishing phrase of the agent, the user's stop, a raising
    tool, an unreadable turn."""

    def __init__(self, rules: EpisodeRules) -> None:
        self.rules = rules

    def after_call(self, name: str) -> bool:
        return name in self.rules.ending_tools

    def agent_done(self, text: str) -> bool:
        """The agent's reply ends the episode in a conversation too."""
        return any(phrase in text for phrase in self.rules.agent_stop_phrases)

    def user_stop(self, reply: UserTurn) -> str | None:
        """The stop the user's message makes (None: the conversation goes on)."""
        stops = self.rules.stop_tokens
        if stops is None:
            return reply.stop_token
        # The rules' own tokens wherever they are in the message (upstream's `token in message`): another
        # profile's token before them does not hide them, and a rules' own phrase need not be a simulator token.
        found = [(reply.text.find(stop), stop) for stop in stops if stop in reply.text]
        return min(found)[1] if found else None

    def on_raise(self, observation: Observation) -> bool:
        """A raising tool ends the episode (with reward 0)."""
        return self.rules.raising_tool_ends_episode and observation.kind in RAISING_KINDS

    @property
    def unreadable_ends(self) -> bool:
        return self.rules.unreadable_turn_ends_episode

    @property
    def unreadable_in_a_row_ends(self) -> bool:
        """Unreadable turns in a row end the episode at the episode's limit."""
        return self.rules.parse_error_limit

    @property
    def environment_failure_scores(self) -> bool:
        """An environment failure is a failed episode (reward 0), not an unscored one."""
        return self.rules.environment_failure == "scored_failed"


@dataclass(frozen=True)
class Components:
    reader: TurnReader
    answers: Answers
    ending: Ending


@functools.cache
def components(rules: EpisodeRules) -> Components:
    """The components of ``rules`` (made once per profile)."""
    return Components(TurnReader(rules), Answers(rules), Ending(rules))


def _is_json(text: str | None) -> bool:
    try:
        json.loads(text or "")
    except ValueError:
        return False
    return True
