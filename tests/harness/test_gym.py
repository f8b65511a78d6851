"""The gym-style API driven by an oracle policy, in both modes, and its truncation at the step limit."""

from __future__ import annotations

import json

import pytest

from harness.gym import InvalidScenario, ToolEnv
from harness.library import load_library
from harness.protocols import UserTurn
from harness.sandbox import SandboxPool
from harness.schema import AgentSettings, Check, ModelSettings, Scenario

LIBRARY = load_library()


def oracle(scenario: Scenario):
    actions = list(scenario.reference_actions)

    def act() -> dict:
        if not actions:
            return {"role": "assistant", "content": scenario.reference_reply or "Done."}
        action = actions.pop(0)
        call = {
            "id": f"c{len(actions)}",
            "type": "function",
            "function": {"name": action.name, "arguments": json.dumps(action.arguments)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    return act


class ScriptedUser:
    settings = AgentSettings(kind="simulated_user", role="user", model=ModelSettings(model="scripted"))

    def __init__(self, scenario: Scenario):
        self.scenario = scenario

    async def respond(self, messages):
        if not any(m["role"] == "assistant" for m in messages):
            return UserTurn(text=self.scenario.task)
        return UserTurn(text="Thank you. ###STOP###", stop_token="###STOP###")


@pytest.fixture
async def pool():
    async with SandboxPool(workers=2) as sandbox:
        yield sandbox


@pytest.mark.parametrize("mode", ["nonconv", "conv"])
async def test_oracle_reaches_full_reward(pool, mode):
    for scenario in LIBRARY.scenarios[:: len(LIBRARY.scenarios) // 6][:6]:
        env = ToolEnv(LIBRARY, pool=pool, mode=mode, user=ScriptedUser(scenario) if mode == "conv" else None)
        act = oracle(scenario)
        messages, tools = await env.reset(scenario)
        assert messages[0]["role"] == "system" and tools and tools[0]["type"] == "function"
        if mode == "conv":
            assert messages[-1] == {"role": "user", "content": scenario.task}
        rewards = []
        for _ in range(50):
            result = await env.step(act())
            rewards.append(result.reward)
            if result.terminated or result.truncated:
                break
        assert result.terminated and not result.truncated
        assert result.reward == pytest.approx(1.0), (scenario.id, result.info["trajectory"].reward)
        assert all(r == 0.0 for r in rewards[:-1])
        trajectory = result.info["trajectory"]
        assert trajectory.reward.success and trajectory.reward.trajectory_reward == 1.0
        assert result.info["termination"] == ("user_stop" if mode == "conv" else "agent_done")


async def test_step_returns_tool_observations(pool):
    scenario = LIBRARY.scenarios[0]
    env = ToolEnv(LIBRARY, pool=pool)
    await env.reset(scenario)
    result = await env.step(oracle(scenario)())
    assert [m["role"] for m in result.observations] == ["tool"]
    assert not result.terminated and result.reward == 0.0


async def test_truncates_at_the_step_limit(pool):
    scenario = LIBRARY.scenarios[0]
    env = ToolEnv(LIBRARY, pool=pool, max_steps=3)
    await env.reset(scenario)
    lookup = scenario.reference_actions[0]
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "", "type": "function", "function": {"name": lookup.name, "arguments": json.dumps(lookup.arguments)}}
        ],
    }
    results = [await env.step(call) for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert not results[-1].terminated
    assert results[-1].info["termination"] == "max_steps"
    with pytest.raises(RuntimeError, match="reset"):
        await env.step(call)


def always_true_at_reset(scenario: Scenario) -> Scenario:
    check = Check(
        id="holds",
        description="Holds whatever happens.",
        source="def check(initial_state, final_state):\n    return True\n",
    )
    return scenario.model_copy(update={"id": f"{scenario.id}-hollow", "checks": [check]})


async def test_an_invalid_scenario_is_refused_unless_included(pool):
    hollow = always_true_at_reset(LIBRARY.scenarios[0])
    with pytest.raises(InvalidScenario, match=f"scenario '{hollow.id}' is invalid: every check already holds"):
        await ToolEnv(LIBRARY, pool=pool).reset(hollow)
    env = ToolEnv(LIBRARY, pool=pool, include_invalid=True)
    messages, tools = await env.reset(hollow)
    assert messages and tools
    result = await env.step({"role": "assistant", "content": "Done."})
    assert result.terminated
    assert [r["passed"] for r in result.info["check_results"]] == [True], "doing nothing passes: why it is refused"


async def test_envscaler_rules_end_the_episode_with_reward_0_when_a_tool_raises(pool):
    scenario = LIBRARY.scenarios[0]
    lookup = scenario.reference_actions[0]
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c0",
                "type": "function",
                "function": {"name": lookup.name, "arguments": json.dumps({**lookup.arguments, "no_such": 1})},
            }
        ],
    }
    harness_rules = ToolEnv(LIBRARY, pool=pool)
    await harness_rules.reset(scenario)
    recovered = await harness_rules.step(call)
    assert not recovered.terminated and recovered.observations, "an error observation the agent can recover from"
    await harness_rules.close()

    envscaler = ToolEnv(LIBRARY, pool=pool, rules="envscaler")
    await envscaler.reset(scenario)
    ended = await envscaler.step(call)
    assert ended.terminated and ended.reward == 0.0
    assert ended.info["rules"] == "envscaler" and ended.info["termination"] == "tool_exception"
