"""RL rollouts on Ray: a pool of environment actors, step by step and in GRPO-style groups, with rewards.

    python examples/ray_rollouts.py                                        # offline: local Ray + mock policy
    python examples/ray_rollouts.py --address auto \
        --model hosted_vllm/qwen3-8b --api-base http://localhost:8000/v1  # your cluster and policy server

Without ``--api-base`` the policy is the repository's mock OpenAI-compatible server replaying each scenario's
reference actions (a stand-in for the model being trained), so the example runs anywhere, offline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.distributed import EnvironmentPool, PolicyEndpoint
from harness.library import Library, load_library
from harness.schema import Scenario


def scripted_policy(scenario: Scenario) -> Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, Any]]:
    """Stands in for the trainer's generate call: one reference call per turn, then a final answer."""
    actions = list(scenario.reference_actions)

    def act(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        if not actions:
            return {"role": "assistant", "content": "Done."}
        action = actions.pop(0)
        call = {
            "id": f"call_{len(messages)}",
            "type": "function",
            "function": {"name": action.name, "arguments": json.dumps(action.arguments)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    return act


def mock_policy_server(stack: ExitStack, library: Library) -> str:
    from tests.doubles.mock_openai import MockOpenAIServer

    server = MockOpenAIServer(record_bodies=False)
    for scenario in library.scenarios:
        server.register_replay(scenario.task, [a.model_dump() for a in scenario.reference_actions])
    stack.enter_context(server.running_in_thread())
    return server.base_url


async def main(arguments: argparse.Namespace) -> None:
    library = load_library()
    scenario_ids = [scenario.id for scenario in library.scenarios[: arguments.scenarios]]
    with ExitStack() as stack:
        api_base = arguments.api_base or mock_policy_server(stack, library)
        policy = PolicyEndpoint(model=arguments.model, api_base=api_base, temperature=arguments.temperature)
        ray.init(address=arguments.address)
        pool = await EnvironmentPool.create(library, actors=arguments.actors, workers_per_actor=1)
        try:
            # 1. The gym loop, one session: a trainer puts its own generate call where the policy acts.
            scenario = library.scenarios[0]
            session, messages, tools = await pool.reset(scenario.id)
            act = scripted_policy(scenario)
            while True:
                message = act(messages, tools)
                outcome = await pool.step(session, message)
                if outcome.terminated or outcome.truncated:
                    break
                messages = outcome.messages
            assert outcome.trajectory is not None
            print(
                f"step loop   {scenario.id:32} reward {outcome.reward:.3f} "
                f"(reward function: {pool.reward(scenario.id, outcome.trajectory):.3f})"
            )
            # 2. Groups of rollouts sampled from the policy endpoint, spread over the actors.
            groups = await pool.rollout_groups(scenario_ids, group_size=arguments.group_size, policy=policy)
            for scenario_id, group in zip(scenario_ids, groups, strict=True):
                rewards = [round(rollout.reward, 3) for rollout in group]
                print(f"group       {scenario_id:32} rewards {rewards}")
        finally:
            await pool.shutdown()
            ray.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", default=None, help="Ray address (default: start a local Ray).")
    parser.add_argument("--model", default="hosted_vllm/replay", help="litellm model string of the policy.")
    parser.add_argument("--api-base", default=None, help="The policy's OpenAI-compatible endpoint.")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--scenarios", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=4)
    asyncio.run(main(parser.parse_args()))
