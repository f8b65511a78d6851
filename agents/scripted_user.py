"""The scripted user: says a scenario's turns in order, one each time the agent ends its turn, then stops."""

from __future__ import annotations

from typing import Any

from harness.rules.protocols import STOP, UserTurn
from harness.schema import AgentSettings, ModelSettings, Scenario


class ScriptedUser:
    """Bound to one scenario with scripted turns. Stateless between calls: the next turn is the number of
    messages it has already said (its own messages are the ``assistant`` ones of its view)."""

    def __init__(self, scenario: Scenario, *, role: str = "user") -> None:
        if not scenario.turns:
            raise ValueError(f"scenario {scenario.id!r} has no scripted turns")
        self.scenario = scenario
        self.settings = AgentSettings(kind="scripted_user", role=role, model=ModelSettings(model="scripted"))

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn:
        said = sum(1 for message in messages if message.get("role") == "assistant")
        if said >= len(self.scenario.turns):
            return UserTurn(text=STOP, stop_token=STOP)
        return UserTurn(text=self.scenario.turns[said].content)
