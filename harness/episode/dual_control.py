"""Dual control: a simulated user with tools of its own, acting on its own part of the state.

A dual-control benchmark's orchestrator sends a user message that holds tool calls to the
environment, which runs each call on the user's toolkit (``requestor="user"``) and syncs the two states; the tool
results go back to the user, who writes again, until it writes text for the agent (or stops). The agent never sees
those calls or their results, and the user never sees the agent's. Each user message with tool calls is a step
(for the environment: no limit is checked), each batch of results is a step after which the limits are checked;
every result flagged as an error counts toward the error limit, as the agent's do.

The episode loop runs a round when its rules allow the user's calls (``EpisodeRules.user_tool_calls``), the
environment declares the user's tools (``Environment.user_tools``) and the user policy can call them
(:class:`~harness.rules.protocols.ToolUsingUserPolicy`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harness.episode.message_limits import LimitReached, MessageLimits
from harness.rules.protocols import ToolUsingUserPolicy, UserTurn, openai_tool_call
from harness.schema import DiffEntry, Observation, Step, ToolCall, Usage


@runtime_checkable
class UserToolSession(Protocol):
    """A session that can run a call on the user's side (``harness.episode.dispatch.DispatchSession``)."""

    async def call_as_user(self, call: ToolCall) -> tuple[Observation, list[DiffEntry]]: ...


@dataclass
class UserRound:
    """What one user turn of dual control gave: its final message, and a limit reached on the way, if any."""

    reply: UserTurn
    reached: LimitReached | None = None
    usage: Usage = field(default_factory=Usage)


def user_tool_message(observation: Observation) -> dict[str, Any]:
    content = observation.content if isinstance(observation.content, str) else f"Error: {observation.error}"
    return {"role": "tool", "tool_call_id": observation.tool_call_id, "content": content}


async def user_round(
    user: ToolUsingUserPolicy,
    session: UserToolSession,
    view: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    steps: list[Step],
    limits: MessageLimits | None,
    before_message: int,
) -> UserRound:
    """Ask the user until it writes for the agent, running its calls on the session; ``view`` and ``steps`` grow
    with its calls and their results, each step numbered with its reply (``turn``) and placed in the agent's
    transcript (``before_message``: the round comes after that many messages). The usage of every reply but the
    last is in the round's ``usage``."""
    usage = Usage()
    reply = await user.respond_with_tools(view, tools)
    while reply.tool_calls:
        usage.add(reply.usage)
        reply_number = steps[-1].turn + 1 if steps else 0
        calls = [
            call if call.id else call.model_copy(update={"id": f"user_call_{len(steps)}_{i}"})
            for i, call in enumerate(reply.tool_calls)
        ]
        view.append({"role": "assistant", "content": None, "tool_calls": [openai_tool_call(c) for c in calls]})
        if limits is not None:
            limits.steps += 1  # the user's message for the environment: no limit is checked after it
        for call in calls:
            started = time.perf_counter()
            observation, diff = await session.call_as_user(call)
            duration = time.perf_counter() - started
            steps.append(
                Step(
                    index=len(steps),
                    turn=reply_number,
                    call=call,
                    observation=observation,
                    state_diff=diff,
                    duration_ms=duration * 1000.0,
                    before_message=before_message,
                )
            )
            if limits is not None:
                limits.record_tool_result(observation)
            view.append(user_tool_message(observation))
        if limits is not None and (reached := limits.count(1)) is not None:
            return UserRound(reply=UserTurn(text=""), reached=reached, usage=usage)
        reply = await user.respond_with_tools(view, tools)
    return UserRound(reply=reply, usage=usage)


def user_call_messages(steps: list[Step]) -> list[dict[str, Any]]:
    """The user's calls as the transcript messages the checks read (upstream's action check matches gold actions
    against the user's calls too)."""
    return [{"role": "user", "content": None, "tool_calls": [openai_tool_call(step.call)]} for step in steps]
