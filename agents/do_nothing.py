"""The do-nothing baseline: answers at once without calling a tool. No model.

Scored like any agent, it shows where the floor of a scenario set lies: ``state_reward`` is the share of checks
already true at reset, ``delta_reward`` is 0, and a scenario it "solves" is one that was solved at reset.
"""

from __future__ import annotations

from typing import Any

from harness.rules.protocols import AgentTurn
from harness.schema import AgentSettings, ModelSettings

DO_NOTHING_MESSAGE = "I will not do anything."


class DoNothingAgent:
    """Stateless: the same single text turn for every scenario."""

    def __init__(self, *, role: str = "agent", message: str = DO_NOTHING_MESSAGE) -> None:
        self.message = message
        self.settings = AgentSettings(kind="do_nothing", role=role, model=ModelSettings(model="do_nothing"))

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        return AgentTurn(message={"role": "assistant", "content": self.message})
