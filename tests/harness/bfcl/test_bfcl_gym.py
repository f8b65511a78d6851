"""BFCL entries through the gym API: scripted turns inside ``step``, tools that appear from their turn on."""

from __future__ import annotations

from pathlib import Path

from agents.oracle import OracleAgent
from agents.scripted_user import ScriptedUser
from harness.gym import ToolEnv
from harness.library import load_library
from harness.sandbox import JailSpec


async def test_a_miss_func_entry_in_the_gym(bfcl_library: Path) -> None:
    library = load_library(bfcl_library)
    scenario = next(s for s in library.scenarios if s.id == "multi_turn_miss_func_0")
    oracle = OracleAgent(scenario)
    async with JailSpec(workers=1).pool() as pool:
        env = ToolEnv(library, pool=pool, mode="conv", user=ScriptedUser)
        messages, tools = await env.reset(scenario)
        assert messages[-1] == {"role": "user", "content": scenario.turns[0].content}
        assert "sort" not in {t["function"]["name"] for t in tools}
        sort_visible_at: list[bool] = []
        while True:
            turn = await oracle.act(messages, tools)
            result = await env.step(turn.message)
            messages = result.messages
            if result.terminated or result.truncated:
                break
            tools = result.info["tools"]
            if messages[-1].get("role") == "user":
                sort_visible_at.append("sort" in {t["function"]["name"] for t in tools})
    # After turns 0-3 the user speaks turns 1-4; sort is withheld until turn 3.
    assert sort_visible_at == [False, False, True, True]
    trajectory = result.info["trajectory"]
    assert trajectory.reward.success
    assert result.reward == 1.0
