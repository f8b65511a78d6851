"""Steps per second of the gym-style API with an oracle policy (no model) on the seed library.

    python bench/gym.py [--rollouts 16] [--passes 2]

Each rollout loop owns a ``ToolEnv``; all share one sandbox pool. A step is one assistant message applied
(its tool calls executed in the sandbox), and each episode ends with scoring (checks in the sandbox).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from harness.gym import ToolEnv
from harness.library import Library, load_library
from harness.sandbox import SandboxPool
from harness.schema import Scenario


def oracle_messages(scenario: Scenario) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for index, action in enumerate(scenario.reference_actions):
        call = {
            "id": f"c{index}",
            "type": "function",
            "function": {"name": action.name, "arguments": json.dumps(action.arguments)},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


async def rollout_loop(library: Library, pool: SandboxPool, scenarios: list[Scenario], counts: list[int]) -> None:
    env = ToolEnv(library, pool=pool)
    for scenario in scenarios:
        await env.reset(scenario)
        for message in oracle_messages(scenario):
            result = await env.step(message)
            counts[0] += 1
            if result.terminated or result.truncated:
                counts[1] += 1
                counts[2] += result.reward == 1.0
                break


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rollouts", type=int, default=16, help="concurrent rollout loops")
    parser.add_argument("--passes", type=int, default=2, help="times over the whole seed library")
    args = parser.parse_args()
    library = load_library()
    work = library.scenarios * args.passes
    shards = [work[i :: args.rollouts] for i in range(args.rollouts)]
    counts = [0, 0, 0]  # steps, episodes, episodes with reward 1.0
    async with library.jail().pool() as pool:
        await rollout_loop(library, pool, library.scenarios[:2], [0, 0, 0])  # warm the check caches
        started = time.perf_counter()
        await asyncio.gather(*(rollout_loop(library, pool, shard, counts) for shard in shards))
        elapsed = time.perf_counter() - started
    steps, episodes, perfect = counts
    print(f"{args.rollouts} rollout loops, {episodes} episodes, {steps} steps in {elapsed:.2f} s")
    print(f"steps/s: {steps / elapsed:,.0f}   episodes/s: {episodes / elapsed:,.1f}   reward 1.0: {perfect}/{episodes}")


if __name__ == "__main__":
    asyncio.run(main())
