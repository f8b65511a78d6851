"""The seed library in numbers, and what a do-nothing agent scores on it.

python bench/seed_library.py
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter

from harness.library import load_library
from harness.scoring.checks import score_final_state
from harness.validate import initial_snapshot


async def main() -> None:
    library = load_library()
    tools = [len(e.tools) for e in library.environments.values()]
    rules = [len(e.rules) for e in library.environments.values()]
    checks = [len(s.checks) for s in library.scenarios]
    references = [len(s.reference_actions) for s in library.scenarios]
    print(
        f"environments {len(library.environments)}; tools {sum(tools)} ({min(tools)}-{max(tools)} each); "
        f"rules {min(rules)}-{max(rules)} each"
    )
    print(
        f"scenarios {len(library.scenarios)}; checks {sum(checks)} ({min(checks)}-{max(checks)}, "
        f"median {statistics.median(checks)}); reference calls {min(references)}-{max(references)} "
        f"(median {statistics.median(references)}, mean {statistics.mean(references):.2f})"
    )
    print(
        f"difficulty {dict(Counter(s.difficulty for s in library.scenarios))}; "
        f"with a refusal {sum('refusal' in s.tags for s in library.scenarios)}; "
        f"scored on the transcript {sum('transcript-check' in s.tags for s in library.scenarios)}"
    )
    async with library.jail().pool() as pool:
        rewards = []
        for scenario in library.scenarios:
            # Doing nothing: the final state is the state at reset, and the agent said nothing.
            snapshot = await initial_snapshot(pool, library.environments[scenario.environment_id], scenario)
            _, reward = await score_final_state(pool, scenario, snapshot, initial_state=snapshot, transcript=[])
            rewards.append(reward)
    deltas = [r.delta_reward for r in rewards if r.delta_reward is not None]
    print(
        f"do-nothing agent: mean state_reward {statistics.mean(r.state_reward for r in rewards):.3f}, "
        f"mean delta_reward {statistics.mean(deltas):.3f}, successes {sum(r.success for r in rewards)}"
    )


if __name__ == "__main__":
    asyncio.run(main())
