"""Cost of the TRL adapter over the jail it forwards to.

    python bench/train_adapters.py [--calls 300] [--resets 30]

Per tool call: a read-only call through a TRL environment object (a synchronous method, hopping to the jail's
loop thread, schema-checked, recorded as an episode step) against the same call made directly on a jailed
session inside the loop. Targets: overhead p50 ≤ 0.5 ms; ``reset`` p50 ≤ 10 ms. CPU time of this process is
printed beside the wall-clock figures, which are noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from harness.library import load_library
from harness.schema import ToolCall
from harness.train.trl_environment import environment_factory


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--resets", type=int, default=30)
    args = parser.parse_args()

    library = load_library(None)
    factory = environment_factory(library, environments=["banking"])
    assert callable(factory)
    environment: Any = factory()
    jail = environment.jail
    scenario = library.scenarios_for("banking")[0]
    action = scenario.reference_actions[0]

    async def bare_calls(count: int) -> tuple[list[float], float]:
        session = await jail.pool.open_session(library.environments["banking"], scenario.initial_state)
        call = ToolCall(id="c", name=action.name, arguments=action.arguments)
        times: list[float] = []
        cpu = time.process_time()
        try:
            for _ in range(count):
                started = time.perf_counter()
                await session.call(call)
                times.append(time.perf_counter() - started)
        finally:
            await session.close()
        return times, time.process_time() - cpu

    environment.settings.max_steps = args.calls + 10  # one long episode: every call is a step
    environment.reset(scenario_id=scenario.id)
    method = getattr(environment, action.name)
    method(**action.arguments)  # warm
    bare, bare_cpu = jail.run(bare_calls(args.calls))
    adapter: list[float] = []
    cpu = time.process_time()
    for _ in range(args.calls):
        started = time.perf_counter()
        method(**action.arguments)
        adapter.append(time.perf_counter() - started)
    adapter_cpu = time.process_time() - cpu

    resets: list[float] = []
    for _ in range(args.resets):
        started = time.perf_counter()
        environment.reset(scenario_id=scenario.id)
        resets.append(time.perf_counter() - started)
    jail.close()

    ms = 1000.0
    print(f"bare jail call   p50 {statistics.median(bare) * ms:.3f} ms  p90 {percentile(bare, 0.9) * ms:.3f} ms")
    print(f"adapter call     p50 {statistics.median(adapter) * ms:.3f} ms  p90 {percentile(adapter, 0.9) * ms:.3f} ms")
    overhead = (statistics.median(adapter) - statistics.median(bare)) * ms
    print(f"adapter overhead p50 {overhead:.3f} ms (target ≤ 0.5 ms)")
    print(
        f"CPU of this process per call: bare {bare_cpu / args.calls * ms:.3f} ms, "
        f"adapter {adapter_cpu / args.calls * ms:.3f} ms"
    )
    print(f"reset            p50 {statistics.median(resets) * ms:.3f} ms (target ≤ 10 ms)")


if __name__ == "__main__":
    main()
