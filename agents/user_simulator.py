"""The simulated user of conversational mode: a model playing the scenario's user profile.

The loop gives it its own view of the conversation (its system prompt, built from the profile by
:func:`harness.rules.prompts.user_system_prompt`; its past messages as ``assistant``; the agent's text replies as
``user``), so it never sees the agent's tool calls. It ends the conversation with a stop token. Under dual control
(:mod:`harness.episode.dual_control`) it is also given the user's own tools, and its view holds its own calls and their
results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.rules.protocols import (
    AgentPolicyError,
    UserTurn,
    find_stop_token,
    split_reasoning,
    tool_calls_from_message,
)
from harness.schema import AgentSettings, ModelSettings, Usage

if TYPE_CHECKING:
    from harness.llm import LLMClient


class UserSimulator:
    """One message per call. An empty reply is asked for again (up to ``attempts`` calls in all)."""

    def __init__(
        self,
        settings: ModelSettings,
        client: LLMClient,
        *,
        role: str = "user",
        system_prompt_version: str = "1",
        attempts: int = 3,
    ) -> None:
        self.model_settings = settings
        self.client = client
        self.role = role
        self.attempts = attempts
        self.settings = AgentSettings(
            kind="simulated_user", role=role, model=settings, system_prompt_version=system_prompt_version
        )

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn:
        return await self.respond_with_tools(messages, [])

    async def respond_with_tools(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> UserTurn:
        """Dual control: with ``tools`` (the user's own), a reply may call them instead of writing to the agent."""
        usage = Usage()
        for _ in range(self.attempts):
            result = await self.client.chat(self.model_settings, messages, tools=tools or None, role=self.role)
            usage.add(result.usage)
            calls = tool_calls_from_message(result.message) if tools else []
            if calls:
                return UserTurn(text="", usage=usage, tool_calls=calls)
            text, _reasoning = split_reasoning(result.message.get("content") or "")
            text = text.strip()
            if text:
                return UserTurn(text=text, usage=usage, stop_token=find_stop_token(text))
        raise AgentPolicyError(f"the simulated user gave an empty message {self.attempts} times")
