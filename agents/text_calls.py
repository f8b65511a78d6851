"""What agents that have the model write its tool calls as text share: the transcript is rendered into a plain
chat prompt, the model is called without tools, its reasoning is set apart, and its text is read into a turn."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from agents.model_agent import ModelAgent
from harness.rules.protocols import AgentTurn, split_reasoning


class TextCallAgent(ModelAgent, ABC):
    """A model-backed agent whose calls are text: subclasses say how the prompt is rendered and the text read."""

    @abstractmethod
    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The chat prompt the model is sent for this transcript (tools described in its text)."""

    @abstractmethod
    def read(self, text: str) -> AgentTurn:
        """The turn the model's visible text makes (its usage and reasoning are added by :meth:`act`)."""

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        prompt = self.render(messages, tools)
        result = await self.client.chat(self.model_settings, prompt, tools=None, role=self.role)
        text, reasoning = split_reasoning(result.message.get("content") or "")
        if reasoning is None and result.message.get("reasoning_content"):
            reasoning = result.message["reasoning_content"]
        turn = self.read(text)
        turn.usage = result.usage
        if reasoning:
            turn.message["reasoning_content"] = reasoning
        return turn
