"""The RL actor API on the test cluster: gym sessions through environment actors, group rollouts sampled from
the mock OpenAI-compatible server, rewards equal to the plain reward function; and the runnable example."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from harness.distributed import EnvironmentPool, PolicyEndpoint
from harness.scoring.reward import trajectory_reward
from tests.doubles.mock_openai import MockOpenAIServer
from tests.harness.run.test_runner import LIBRARY, register_scenarios
from tests.support.ray_cluster import ROOT

SCENARIOS = {scenario.id: scenario for scenario in LIBRARY.scenarios}


def reference_message(scenario, turn: int) -> dict:
    actions = scenario.reference_actions
    if turn >= len(actions):
        return {"role": "assistant", "content": "Done."}
    action = actions[turn]
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": action.name, "arguments": json.dumps(action.arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def test_gym_sessions_and_group_rollouts_over_two_actors(ray_cluster):
    pool = await EnvironmentPool.create(LIBRARY, actors=2, workers_per_actor=1)
    mock = MockOpenAIServer(record_bodies=False)
    register_scenarios(mock)
    try:
        chosen = [scenario.id for scenario in LIBRARY.scenarios[:3]]
        sessions = [await pool.reset(scenario_id) for scenario_id in chosen]
        assert {pool._where[session] for session, _, _ in sessions} == {0, 1}  # spread over both actors
        for (session, messages, tools), scenario_id in zip(sessions, chosen, strict=True):
            assert messages[-1]["role"] == "user" and tools
            turn = 0
            while True:
                outcome = await pool.step(session, reference_message(SCENARIOS[scenario_id], turn))
                turn += 1
                if outcome.terminated or outcome.truncated:
                    break
                assert outcome.reward == 0.0 and outcome.observations
            assert outcome.terminated and outcome.trajectory is not None
            assert outcome.trajectory.reward.success
            assert outcome.reward == trajectory_reward(SCENARIOS[scenario_id], outcome.trajectory)
            assert pool.reward(scenario_id, outcome.trajectory) == outcome.reward
        with mock.running_in_thread():
            policy = PolicyEndpoint(model="hosted_vllm/replay", api_base=mock.base_url, temperature=1.0)
            groups = await pool.rollout_groups(chosen, group_size=3, policy=policy)
        assert [len(group) for group in groups] == [3, 3, 3]
        for scenario_id, group in zip(chosen, groups, strict=True):
            for rollout in group:
                assert rollout.scenario_id == scenario_id and rollout.trajectory.reward.success
                assert rollout.reward == trajectory_reward(SCENARIOS[scenario_id], rollout.trajectory)
        assert (
            len(mock.chat_requests())
            == sum(len(SCENARIOS[scenario_id].reference_actions) + 1 for scenario_id in chosen) * 3
        )
    finally:
        await pool.shutdown()


def test_the_ray_rollouts_example_runs(ray_cluster):
    example = ROOT / "examples" / "ray_rollouts.py"
    arguments = ["--address", ray_cluster.address, "--scenarios", "2", "--group-size", "2"]
    result = subprocess.run(
        [sys.executable, str(example), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("step loop", "group"))]
    assert len(lines) == 3, result.stdout
    assert lines[0].endswith("reward 1.000 (reward function: 1.000)")
    assert all(line.endswith("rewards [1.0, 1.0]") for line in lines[1:]), lines


async def test_environment_actors_follow_the_rules_profile_and_the_reward_function_with_them(ray_cluster):
    pool = await EnvironmentPool.create(LIBRARY, actors=1, workers_per_actor=1, rules="envscaler")
    scenario = LIBRARY.scenarios[0]
    lookup = scenario.reference_actions[0]
    raising = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": lookup.name, "arguments": json.dumps({**lookup.arguments, "no_such": 1})},
            }
        ],
    }
    try:
        session, _, _ = await pool.reset(scenario.id)
        ended = await pool.step(session, raising)  # a keyword the method does not take: upstream raises
        assert ended.terminated and ended.reward == 0.0 and ended.termination == "tool_exception"
        assert pool.reward(scenario.id, ended.trajectory) == 0.0

        session, _, _ = await pool.reset(scenario.id)
        turn = 0
        while True:
            outcome = await pool.step(session, reference_message(scenario, turn))
            turn += 1
            if outcome.terminated or outcome.truncated:
                break
        assert outcome.trajectory is not None and outcome.trajectory.reward.success
        assert outcome.reward == 1.0 and pool.reward(scenario.id, outcome.trajectory) == 1.0
    finally:
        await pool.shutdown()
