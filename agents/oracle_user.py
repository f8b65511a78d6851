"""The oracle's user for dual control: plays the user's part of a scenario's reference solution.

The gold is cut into runs of one side's consecutive calls. The two sides hand the turn over with a text message,
the user first (the agent's greeting opens): whoever holds the turn makes its next run's calls (one per message)
when that run is the next, then hands over; otherwise it hands over at once. Both read from the messages they are
given how many hand-overs there were, so neither keeps state; the user stops once every run is done and the agent
has had its turn to give the reference reply (and never before the agent has answered once).
"""

from __future__ import annotations

from typing import Any

from harness.rules.protocols import STOP, UserTurn
from harness.run.config import ORACLE_USER_MODEL
from harness.schema import AgentSettings, ModelSettings, ReferenceAction, Scenario, ToolCall

PASS_TEXT = "Done; what next?"


def gold_runs(scenario: Scenario) -> list[tuple[str, list[ReferenceAction]]]:
    """The reference solution as runs of (side, calls), in upstream's order."""
    ordered: list[tuple[str, ReferenceAction]] = []
    users = list(scenario.user_reference_actions)
    for index, action in enumerate([*scenario.reference_actions, None]):
        while users and users[0].after_agent_actions <= index:
            ordered.append(("user", users.pop(0)))
        if action is not None:
            ordered.append(("assistant", action))
    runs: list[tuple[str, list[ReferenceAction]]] = []
    for side, action in ordered:
        if runs and runs[-1][0] == side:
            runs[-1][1].append(action)
        else:
            runs.append((side, [action]))
    return runs


def gold_schedule(scenario: Scenario) -> list[list[ReferenceAction]]:
    """The calls made in each hold of the turn: even holds are the user's, odd ones the agent's. A scenario with a
    reference reply ends on a hold of the agent's, so the agent says it before the user stops (a task whose gold
    is only information to communicate has no calls at all). The agent always has a hold: a user states its
    request and stops only once it has been answered, even when the gold asks for nothing (a task whose right
    outcome is to change nothing)."""
    schedule: list[list[ReferenceAction]] = []
    for side, actions in gold_runs(scenario):
        while len(schedule) % 2 != (0 if side == "user" else 1):
            schedule.append([])
        schedule.append(actions)
    while len(schedule) < 2 or (scenario.reference_reply and len(schedule) % 2 == 1):
        schedule.append([])
    return schedule


def hand_overs(messages: list[dict[str, Any]]) -> int:
    """Text messages after the first (the agent's greeting), in a conversation without its system prompt."""
    texts = [
        m
        for m in messages
        if m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str) and m["content"]
    ]
    return max(0, len(texts) - 1)


def next_call(schedule: list[list[ReferenceAction]], hold: int, calls_made: int) -> ReferenceAction | None:
    """The holder's next call of its hold ``hold``, given how many calls it has made in all."""
    if hold >= len(schedule):
        return None
    earlier = sum(len(actions) for actions in schedule[hold % 2 : hold : 2])
    done = calls_made - earlier
    actions = schedule[hold]
    return actions[done] if 0 <= done < len(actions) else None


class OracleUser:
    """Bound to one scenario (with or without user reference actions); stateless between calls."""

    def __init__(self, scenario: Scenario, *, role: str = "user") -> None:
        self.scenario = scenario
        self.settings = AgentSettings(kind="oracle_user", role=role, model=ModelSettings(model=ORACLE_USER_MODEL))

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn:
        return await self.respond_with_tools(messages, [])

    async def respond_with_tools(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> UserTurn:
        schedule = gold_schedule(self.scenario)
        hold = hand_overs([m for m in messages if m.get("role") != "system"])
        if hold >= len(schedule):
            return UserTurn(text=STOP, stop_token=STOP)
        made = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
        action = next_call(schedule, hold, made)
        if action is None:
            return UserTurn(text=PASS_TEXT)
        call = ToolCall(id=f"user_call_{made}", name=action.name, arguments=dict(action.arguments))
        return UserTurn(text="", tool_calls=[call])
