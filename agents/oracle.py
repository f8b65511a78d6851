"""The oracle: replays a scenario's reference actions, one call per turn, then a final message (the scenario's
reference reply when it has one). No model."""

from __future__ import annotations

from typing import Any

from agents.oracle_user import PASS_TEXT, gold_schedule, hand_overs, next_call
from harness.rules.protocols import AgentTurn, openai_tool_call
from harness.schema import AgentSettings, ModelSettings, Scenario, ToolCall

ORACLE_FINAL_MESSAGE = "I have completed your request."


class OracleAgent:
    """Bound to one scenario. Its progress is read from the transcript (how many of its tool-calling turns
    it holds), so it needs no state of its own and can resume any transcript it produced."""

    def __init__(self, scenario: Scenario, *, role: str = "agent", final_message: str = ORACLE_FINAL_MESSAGE) -> None:
        self.scenario = scenario
        self.final_message = final_message
        self.settings = AgentSettings(kind="oracle", role=role, model=ModelSettings(model="oracle"))

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        if self.scenario.turns:
            return self._act_in_turn(messages)
        if self.scenario.user_reference_actions:
            return self._act_in_run(messages)
        done = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        actions = self.scenario.reference_actions
        if done >= len(actions):
            reply = self.scenario.reference_reply or self.final_message
            return AgentTurn(message={"role": "assistant", "content": reply})
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        action = actions[done]
        call = ToolCall(id=f"call_{turn}_0", name=action.name, arguments=dict(action.arguments))
        message = {"role": "assistant", "content": None, "tool_calls": [openai_tool_call(call)]}
        return AgentTurn(message=message, tool_calls=[call])

    def _act_in_turn(self, messages: list[dict[str, Any]]) -> AgentTurn:
        """Scripted turns: all of the current turn's reference calls in one message, then the final message."""
        turns = self.scenario.turns
        spoken = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        turn_index, start = -1, 0
        for position in spoken:
            if turn_index + 1 < len(turns) and messages[position].get("content") == turns[turn_index + 1].content:
                turn_index += 1
                start = position
        if turn_index < 0:
            return AgentTurn(message={"role": "assistant", "content": self.final_message})
        acted = any(m.get("role") == "assistant" and m.get("tool_calls") for m in messages[start:])
        actions = turns[turn_index].reference_actions
        if acted or not actions:
            return AgentTurn(message={"role": "assistant", "content": self.final_message})
        number = sum(1 for m in messages if m.get("role") == "assistant")
        calls = [
            ToolCall(id=f"call_{number}_{i}", name=action.name, arguments=dict(action.arguments))
            for i, action in enumerate(actions)
        ]
        message = {"role": "assistant", "content": None, "tool_calls": [openai_tool_call(call) for call in calls]}
        return AgentTurn(message=message, tool_calls=calls)

    def _act_in_run(self, messages: list[dict[str, Any]]) -> AgentTurn:
        """Dual control: the agent's part of the gold, handing the turn to the user between its runs
        (:mod:`agents.oracle_user`)."""
        schedule = gold_schedule(self.scenario)
        hold = hand_overs([m for m in messages if m.get("role") != "system"])
        made = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
        action = next_call(schedule, hold, made)
        if action is not None:
            turn = sum(1 for m in messages if m.get("role") == "assistant")
            call = ToolCall(id=f"call_{turn}_0", name=action.name, arguments=dict(action.arguments))
            message = {"role": "assistant", "content": None, "tool_calls": [openai_tool_call(call)]}
            return AgentTurn(message=message, tool_calls=[call])
        last = hold + 1 >= len(schedule)
        reply = self.scenario.reference_reply if last and self.scenario.reference_reply else PASS_TEXT
        return AgentTurn(message={"role": "assistant", "content": reply})
