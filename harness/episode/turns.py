"""Scripted user turns: which tools the agent sees in each turn, how many steps a turn may take, and which of
the agent's calls belong to which turn."""

from __future__ import annotations

from typing import Any

from harness.rules.protocols import tool_calls_from_message
from harness.schema import Scenario, ScriptedTurn, ToolCall, ToolSpec


def withheld_tools(turns: list[ScriptedTurn], turn_index: int) -> set[str]:
    """Tools that a later turn adds, hence not yet visible in ``turn_index``."""
    return {name for turn in turns[turn_index + 1 :] for name in turn.tools_added}


def visible_tools(tools: list[ToolSpec], turns: list[ScriptedTurn], turn_index: int) -> list[dict[str, Any]]:
    hidden = withheld_tools(turns, turn_index)
    return [tool.model_dump(mode="json") for tool in tools if tool.function.name not in hidden]


class TurnTracker:
    """Where a scripted conversation stands: the user turn under way and the agent's tool-calling steps in it."""

    def __init__(self, scenario: Scenario):
        self.turns = scenario.turns
        self.step_limit = scenario.max_steps_per_turn
        self.turn = -1
        self.steps_in_turn = 0

    def user_spoke(self) -> None:
        self.turn += 1
        self.steps_in_turn = 0

    def tools(self, tools: list[ToolSpec]) -> list[dict[str, Any]]:
        return visible_tools(tools, self.turns, max(self.turn, 0))

    def tool_step(self) -> str | None:
        """Count one tool-calling agent turn; the reason to stop when it is one more than the turn allows."""
        self.steps_in_turn += 1
        if self.step_limit is not None and self.steps_in_turn > self.step_limit:
            return f"more than {self.step_limit} tool-calling steps in user turn {self.turn}"
        return None


def calls_by_turn(messages: list[dict[str, Any]], turns: list[ScriptedTurn]) -> list[list[list[ToolCall]]]:
    """The agent's tool calls per scripted turn reached, as steps (one assistant message each).

    A turn starts at the user message that says its content (in order; other user messages, such as parse
    feedback, belong to the turn under way). A step whose calls include one with unreadable arguments is left
    out whole, as a turn checker leaves out a response it cannot decode.
    """
    grouped: list[list[list[ToolCall]]] = []
    for message in messages:
        role = message.get("role")
        if role == "user":
            if len(grouped) < len(turns) and message.get("content") == turns[len(grouped)].content:
                grouped.append([])
            continue
        if role != "assistant" or not grouped or not message.get("tool_calls"):
            continue
        calls = tool_calls_from_message(message)
        if calls and all(call.arguments is not None for call in calls):
            grouped[-1].append(calls)
    return grouped
