"""The gym-style API driven by an oracle policy, in both modes, and its truncation at the step limit; a tool or a
constructor raising what is not an Exception is the environment's failure; a bad value given to ``reset`` ends
that episode with its reason, never with an exception."""

from __future__ import annotations

import json

import pytest

from harness.gym import InvalidScenario, ToolEnv
from harness.library import load_library
from harness.rules.protocols import UserTurn
from harness.sandbox import JailSpec
from harness.schema import AgentSettings, Check, ModelSettings, Scenario
from tests.support.raising_library import LOADS, RAISING_CHECKS, RAISING_TOOLS, TOOLS_SCENARIO, write_raising_library

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
    async with JailSpec(workers=2).pool() as sandbox:
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


def tool_call(name: str, arguments: dict | None = None) -> dict:
    function = {"name": name, "arguments": json.dumps(arguments or {})}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"c-{name}", "type": "function", "function": function}],
    }


@pytest.fixture(scope="module")
def raising(tmp_path_factory):
    return load_library(str(write_raising_library(tmp_path_factory.mktemp("raising") / "library")))


async def test_a_tool_raising_a_base_exception_is_a_tool_error_the_agent_sees(pool, raising):
    scenario = next(s for s in raising.scenarios if s.id == TOOLS_SCENARIO)
    env = ToolEnv(raising, pool=pool, include_invalid=True)
    await env.reset(scenario)
    for name, error in RAISING_TOOLS.items():
        result = await env.step(tool_call(name))
        assert not result.terminated, (name, result.info)
        (message,) = result.observations
        answer = json.loads(message["content"])
        assert (message["role"], answer["success"], answer["error_type"]) == ("tool", False, "tool_exception")
        assert answer["error"].startswith(error), answer
    finished = await env.step(tool_call("complete"))
    assert json.loads(finished.observations[0]["content"]) == {"success": True, "data": 4}  # one state throughout
    done = await env.step({"role": "assistant", "content": "Done."})
    assert done.terminated and done.info["termination"] == "agent_done"
    trajectory = done.info["trajectory"]
    assert trajectory.failure is None
    assert [step.observation.kind for step in trajectory.steps] == ["tool_exception"] * 4 + ["ok"]
    results = {r["check_id"]: r for r in done.info["check_results"]}
    assert results["done"]["passed"] and results["calls"]["passed"]  # one session, the same state throughout
    for check_id, (_, error) in RAISING_CHECKS.items():
        assert not results[check_id]["passed"] and results[check_id]["error"].startswith(error), results[check_id]

    envscaler = ToolEnv(raising, pool=pool, include_invalid=True, rules="envscaler")
    await envscaler.reset(scenario)
    ended = await envscaler.step(tool_call("interrupt"))
    assert ended.terminated and ended.reward == 0.0
    assert ended.info["termination"] == "tool_exception", ended.info
    assert ended.info["trajectory"].failure is None


async def test_a_constructor_raising_a_base_exception_ends_the_episode_as_the_environments_failure(pool, raising):
    env = ToolEnv(raising, pool=pool, include_invalid=True)
    for what, error in LOADS.items():
        scenario = next(s for s in raising.scenarios if s.id == f"raises-on-load-{what.replace('_', '-')}")
        messages, tools = await env.reset(scenario)
        assert tools == [] and "This rollout is void (environment_error" in messages[0]["content"], messages
        result = await env.step({"role": "assistant", "content": "Done."})
        assert result.terminated and result.reward == 0.0
        assert result.info["termination"] == "environment_error"
        failure = result.info["trajectory"].failure
        assert failure.at_fault == "environment" and failure.retryable is False and error in failure.detail


@pytest.mark.parametrize(
    ("seed", "problem"),
    [
        ("abc", "seed: Input should be a valid integer"),
        (1e999, "seed: Input should be a valid integer"),
        ([1], "seed: Input should be a valid integer"),
        (True, "seed: Input should be a valid integer"),
        (2**64, "seed: Input should be less than or equal to 9223372036854775807"),
        (-1, "seed: Input should be greater than or equal to 0"),
    ],
)
async def test_a_bad_seed_voids_the_episode_with_its_reason_and_the_env_goes_on(pool, seed, problem):
    scenario = LIBRARY.scenarios[0]
    env = ToolEnv(LIBRARY, pool=pool)
    messages, tools = await env.reset(scenario, seed=seed)
    assert tools == [] and messages == [
        {
            "role": "user",
            "content": f"This rollout is void (bad_row: {problem}). No tool runs in it, and its reward is 0.",
        }
    ]
    result = await env.step(oracle(scenario)())
    assert (result.terminated, result.truncated, result.reward) == (True, False, 0.0)
    assert result.info["termination"] == "bad_row" and result.info["termination_detail"] == problem
    assert result.info["trajectory"] is None and result.observations == []
    with pytest.raises(RuntimeError, match="reset"):
        await env.step(oracle(scenario)())
    # The same object runs the next episode as usual.
    messages, tools = await env.reset(scenario, seed=7)
    assert messages[0]["role"] == "system" and tools


async def test_what_is_not_a_scenario_of_the_library_voids_the_episode(pool):
    env = ToolEnv(LIBRARY, pool=pool)
    messages, tools = await env.reset("banking-001")  # type: ignore[arg-type]  # a scenario id, not a Scenario
    assert tools == [] and "bad_row: scenario: not a Scenario but str" in messages[0]["content"]
    assert (await env.step({"role": "assistant", "content": "x"})).info["termination"] == "bad_row"
    stranger = LIBRARY.scenarios[0].model_copy(update={"environment_id": "no-such-environment"})
    messages, tools = await env.reset(stranger)
    assert (
        tools == []
        and "unknown_scenario: environment 'no-such-environment' is not in the library" in (messages[0]["content"])
    )
    result = await env.step({"role": "assistant", "content": "x"})
    assert result.info["termination"] == "unknown_scenario" and result.reward == 0.0
