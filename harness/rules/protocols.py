"""The small contract between the episode loop and the policies it drives.

The loop only knows an agent as something that turns a message list into an :class:`AgentTurn`, and a
simulated user as something that turns its view of the conversation into a :class:`UserTurn`. Policies are
stateless between calls: everything they need is in the messages they are given, so one policy object
serves many concurrent episodes.

The helpers here also fix how an OpenAI assistant message maps to :class:`~harness.schema.ToolCall` records,
so that agents, the loop and trainer-facing APIs read tool calls the same way.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harness.schema import AgentSettings, DiffEntry, Observation, ToolCall, Usage

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
STOP_TOKENS: tuple[str, ...] = (STOP, TRANSFER, OUT_OF_SCOPE)
"""Tokens a simulated user ends a conversation with (the conventions of simulated-user benchmarks)."""


@runtime_checkable
class ToolSession(Protocol):
    """Where an episode's tool calls run and its state lives: a sandbox session, or an MCP server's."""

    async def call(self, call: ToolCall) -> tuple[Observation, list[DiffEntry]]: ...

    async def state(self, *, shared: bool = False) -> dict[str, Any]:
        """The current state. ``shared``: the caller will not change it, so it may be one object shared with
        other readers of the same state."""
        ...

    async def close(self) -> None: ...


class AgentPolicyError(Exception):
    """A policy could not produce a usable turn and cannot recover (the episode ends as ``agent_error``)."""


@dataclass
class AgentTurn:
    """One agent turn.

    ``message`` is the OpenAI assistant message to append to the transcript (tool calls in OpenAI form, even
    when the model wrote them as text). ``tool_calls`` are the parsed calls to execute, in order.
    ``parse_error`` is set when the model's output could not be read as tool calls; ``feedback`` is then the
    message the loop appends after ``message`` so the model can correct itself on its next turn.
    """

    message: dict[str, Any]
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    parse_error: str | None = None
    feedback: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        content = self.message.get("content")
        return content if isinstance(content, str) else ""


@dataclass
class UserTurn:
    """One simulated-user message. ``stop_token`` is the stop token it contains, if any."""

    text: str
    usage: Usage = field(default_factory=Usage)
    stop_token: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Dual control: calls of the user's own tools (the message then has no text for the agent)."""


@runtime_checkable
class AgentPolicy(Protocol):
    """Chooses the agent's next turn from the transcript so far and the environment's tools."""

    settings: AgentSettings

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn: ...


@runtime_checkable
class UserPolicy(Protocol):
    """Plays the user. ``messages`` is the user's view: its own system prompt, its own past messages as
    ``assistant`` and the agent's text replies as ``user``; it never contains tool calls."""

    settings: AgentSettings

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn: ...


@runtime_checkable
class ToolUsingUserPolicy(Protocol):
    """A user that can call tools of its own (dual control, :mod:`harness.episode.dual_control`). ``messages`` is its
    view with its own calls (``assistant`` messages with ``tool_calls``) and their results (``tool`` messages);
    ``tools`` are the user's tools in OpenAI form. A reply with tool calls goes to the environment, never to the
    agent."""

    settings: AgentSettings

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn: ...

    async def respond_with_tools(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> UserTurn: ...


def find_stop_token(text: str) -> str | None:
    """The first stop token that occurs in ``text``, if any."""
    positions = [(text.find(token), token) for token in STOP_TOKENS if token in text]
    return min(positions)[1] if positions else None


def parse_arguments(raw: Any) -> dict[str, Any] | None:
    """Arguments of a tool call as a dict, or None when they are not a JSON object.

    An empty string means "no arguments", which several servers send for parameterless tools.
    """
    if isinstance(raw, dict):
        return raw
    if raw is None:
        return {}
    if not isinstance(raw, str):
        return None
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def tool_calls_from_message(message: dict[str, Any]) -> list[ToolCall]:
    """Read the ``tool_calls`` of an OpenAI assistant message.

    Never raises on malformed input: argument text that is not a JSON object gives ``arguments=None`` with the
    text kept in ``raw_arguments``, so the loop can answer with an invalid-arguments observation. A missing id
    is left empty for the loop to fill in.
    """
    calls: list[ToolCall] = []
    for entry in message.get("tool_calls") or []:
        if not isinstance(entry, dict):
            calls.append(ToolCall(id="", name="", arguments=None, raw_arguments=repr(entry)))
            continue
        function = entry.get("function")
        if not isinstance(function, dict):
            function = {}
        raw = function.get("arguments")
        arguments = parse_arguments(raw)
        raw_text: str | None = None
        if arguments is None:
            raw_text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
        name = function.get("name")
        calls.append(
            ToolCall(
                id=str(entry.get("id") or ""),
                name=name if isinstance(name, str) else "",
                arguments=arguments,
                raw_arguments=raw_text,
            )
        )
    return calls


def openai_tool_call(call: ToolCall) -> dict[str, Any]:
    """A :class:`ToolCall` in the OpenAI assistant-message form."""
    if call.arguments is not None:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
    else:
        arguments = call.raw_arguments or ""
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


def agent_turn_from_message(message: dict[str, Any], usage: Usage | None = None) -> AgentTurn:
    """An :class:`AgentTurn` from an OpenAI assistant message (as a native tool-calling model returns it).

    The recorded message keeps ``content``, ``reasoning_content`` (also taken from ``<think>`` blocks left in
    the content) and the tool calls in normalized form (argument text re-serialized when it parsed, kept
    verbatim when it did not).
    """
    tool_calls = tool_calls_from_message(message)
    content = message.get("content")
    reasoning = message.get("reasoning_content") or None
    if isinstance(content, str) and "<think>" in content:
        content, inline_reasoning = split_reasoning(content)
        reasoning = reasoning or inline_reasoning
    record: dict[str, Any] = {"role": "assistant", "content": content if isinstance(content, str) else None}
    if tool_calls:
        record["tool_calls"] = [openai_tool_call(call) for call in tool_calls]
    elif record["content"] is None:
        record["content"] = ""
    if reasoning:
        record["reasoning_content"] = reasoning
    return AgentTurn(message=record, tool_calls=tool_calls, usage=usage if usage is not None else Usage())


_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def split_reasoning(text: str) -> tuple[str, str | None]:
    """Separate ``<think>…</think>`` blocks (Qwen3 and similar models) from the visible text."""
    thoughts = [m.strip() for m in _THINK_BLOCK.findall(text)]
    if not thoughts:
        return text, None
    return _THINK_BLOCK.sub("", text).strip(), "\n\n".join(thoughts)
