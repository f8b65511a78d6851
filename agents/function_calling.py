"""The function-calling agent: a model with native tool calling, reached through ``harness.llm.LLMClient``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.model_agent import ModelAgent
from harness.rules.protocols import AgentTurn, agent_turn_from_message

if TYPE_CHECKING:
    pass

_OUTGOING_KEYS: dict[str, tuple[str, ...]] = {
    "system": ("role", "content"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "tool_calls"),
    "tool": ("role", "content", "tool_call_id", "name"),
}


def outgoing_message(message: dict[str, Any]) -> dict[str, Any]:
    """A transcript message as sent back to the model: the fields its role has in the chat API, nothing else.

    ``reasoning_content`` stays in the record but is not replayed (chat templates drop earlier turns'
    reasoning, and some providers refuse unknown fields).
    """
    role = message.get("role", "")
    keys = _OUTGOING_KEYS.get(role)
    if keys is None:
        return dict(message)
    outgoing = {key: message[key] for key in keys if message.get(key) is not None}
    if role == "assistant" and outgoing.get("tool_calls"):
        outgoing["content"] = message.get("content")
    else:
        outgoing["content"] = message.get("content") or ""
    return outgoing


class FunctionCallingAgent(ModelAgent):
    """Sends the transcript and tool schemas to the model and executes whatever tool calls it returns
    (several per turn allowed). Broken argument JSON is passed on as a call with ``arguments=None``."""

    kind = "function_calling"

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        result = await self.client.chat(
            self.model_settings, [outgoing_message(m) for m in messages], tools=tools or None, role=self.role
        )
        return agent_turn_from_message(result.message, result.usage)
