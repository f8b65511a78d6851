"""How a trainer's rollout loop uses the gym-style API and the plain reward function.

    python examples/rl_rollout.py

Runs offline: the "policy" here replays each scenario's reference actions (stand in your model's
generate call), on the bundled seed library, in both modes. Prints each episode's reward.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from harness.gym import ToolEnv
from harness.library import load_library
from harness.rules.protocols import UserTurn
from harness.sandbox import JailSpec
from harness.schema import AgentSettings, ModelSettings, Scenario
from harness.scoring.reward import trajectory_reward


def reference_policy(scenario: Scenario):
    """A stand-in for the model being trained: one reference call per turn, then a final answer."""
    actions = list(scenario.reference_actions)

    def act(_messages: list[dict[str, Any]], _tools: list[dict[str, Any]]) -> dict[str, Any]:
        if not actions:
            return {"role": "assistant", "content": "All done."}
        action = actions.pop(0)
        call = {
            "id": f"call_{len(actions)}",
            "type": "function",
            "function": {"name": action.name, "arguments": json.dumps(action.arguments)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    return act


class ScriptedUser:
    """A stand-in simulated user for conversational mode: states the task, then stops."""

    settings = AgentSettings(kind="simulated_user", role="user", model=ModelSettings(model="scripted"))

    def __init__(self, scenario: Scenario):
        self.scenario = scenario

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn:
        spoken = sum(m["role"] == "assistant" for m in messages)
        if spoken == 0:
            return UserTurn(text=self.scenario.task)
        return UserTurn(text="Thanks, that's everything. ###STOP###", stop_token="###STOP###")


async def main() -> None:
    library = load_library()
    async with JailSpec().pool() as pool:
        for scenario in library.scenarios[:3]:
            for mode in ("nonconv", "conv"):
                user = ScriptedUser(scenario) if mode == "conv" else None
                env = ToolEnv(library, pool=pool, mode=mode, user=user)
                policy = reference_policy(scenario)
                messages, tools = await env.reset(scenario)
                while True:
                    result = await env.step(policy(messages, tools))
                    messages = result.messages
                    if result.terminated or result.truncated:
                        break
                trajectory = result.info["trajectory"]
                # The same number a trainer can compute later from a stored trajectory:
                offline = trajectory_reward(scenario, trajectory)
                print(
                    f"{scenario.id:28} {mode:8} reward {result.reward:.3f} (recomputed {offline:.3f}) "
                    f"{result.info['termination']}"
                )


if __name__ == "__main__":
    asyncio.run(main())
