"""Sandbox overhead: tool-call latency and throughput through the worker pool, and state snapshot cost.

    python bench/sandbox.py [--calls 5000] [--sessions 64]

Prints p50/p99 latency of one call through the sandbox against the same call made in-process, calls per second
across the pool with many sessions in flight, and the cost of a call and of a state read as state grows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from harness.sandbox import SandboxLimits, SandboxPool
from harness.schema import Environment, ToolCall
from harness.toolspec import derive_tools

CODE = '''
class Store:
    def __init__(self, init_config: dict):
        self.items = init_config.get("items", {})
        self.hits = init_config.get("hits", 0)

    def get_item(self, item_id: str) -> dict:
        """Read one item.

        Args:
            item_id: The item.
        """
        item = self.items.get(item_id)
        if item is None:
            return {"success": False, "error": "not found"}
        return {"success": True, "data": item}

    def touch(self, item_id: str) -> dict:
        """Count a visit.

        Args:
            item_id: The item.
        """
        self.hits += 1
        return {"success": True, "data": self.hits}
'''


def environment() -> Environment:
    return Environment(id="store", name="Store", class_name="Store", code=CODE, tools=derive_tools(CODE, "Store"))


def state_of_size(target_bytes: int) -> dict[str, Any]:
    record = {"name": "widget", "price": 12.5, "tags": ["a", "b"], "stock": 3}
    per_item = 80
    return {"items": {f"I-{i}": dict(record) for i in range(max(1, target_bytes // per_item))}, "hits": 0}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def direct_latencies(calls: int) -> list[float]:
    namespace: dict[str, Any] = {}
    exec(compile(CODE, "<bench>", "exec"), namespace)  # trusted benchmark code, for the in-process baseline
    instance = namespace["Store"](state_of_size(1000))
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        instance.get_item("I-1")
        samples.append(time.perf_counter() - start)
    return samples


async def sandbox_latencies(pool: SandboxPool, calls: int) -> list[float]:
    session = await pool.open_session(environment(), state_of_size(1000))
    call = ToolCall(id="c", name="get_item", arguments={"item_id": "I-1"})
    for _ in range(200):
        await session.call(call)
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await session.call(call)
        samples.append(time.perf_counter() - start)
    await session.close()
    return samples


async def pool_throughput(pool: SandboxPool, sessions: int, calls_per_session: int) -> float:
    opened = [await pool.open_session(environment(), state_of_size(1000), seed=i) for i in range(sessions)]
    call = ToolCall(id="c", name="touch", arguments={"item_id": "I-1"})

    async def drive(session: Any) -> None:
        for _ in range(calls_per_session):
            await session.call(call)

    start = time.perf_counter()
    await asyncio.gather(*(drive(s) for s in opened))
    elapsed = time.perf_counter() - start
    for session in opened:
        await session.close()
    return sessions * calls_per_session / elapsed


async def snapshot_costs(pool: SandboxPool) -> list[tuple[str, float, float, float]]:
    rows = []
    for label, size in (("1 KB", 1_000), ("100 KB", 100_000), ("10 MB", 10_000_000)):
        session = await pool.open_session(environment(), state_of_size(size))
        read = ToolCall(id="c", name="get_item", arguments={"item_id": "I-1"})
        write = ToolCall(id="c", name="touch", arguments={"item_id": "I-1"})
        reads, writes, states = [], [], []
        for _ in range(20):
            start = time.perf_counter()
            await session.call(read)
            reads.append(time.perf_counter() - start)
            start = time.perf_counter()
            await session.call(write)
            writes.append(time.perf_counter() - start)
            start = time.perf_counter()
            await session.state()
            states.append(time.perf_counter() - start)
        rows.append((label, statistics.median(reads), statistics.median(writes), statistics.median(states)))
        await session.close()
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--sessions", type=int, default=64)
    args = parser.parse_args()
    workers = os.cpu_count() or 1
    direct = direct_latencies(args.calls)
    async with SandboxPool(workers=workers, limits=SandboxLimits(max_state_bytes=200_000_000)) as pool:
        sandboxed = await sandbox_latencies(pool, args.calls)
        throughput = await pool_throughput(pool, args.sessions, max(1, args.calls // args.sessions) * 4)
        snapshots = await snapshot_costs(pool)
    print(f"workers: {workers}")
    print(f"direct call:   p50 {percentile(direct, 0.5) * 1e3:.4f} ms   p99 {percentile(direct, 0.99) * 1e3:.4f} ms")
    print(
        f"sandbox call:  p50 {percentile(sandboxed, 0.5) * 1e3:.4f} ms   p99 {percentile(sandboxed, 0.99) * 1e3:.4f} ms"
    )
    overhead = percentile(sandboxed, 0.5) - percentile(direct, 0.5)
    print(f"p50 overhead per call: {overhead * 1e3:.4f} ms")
    print(f"one session, sequential: {1 / statistics.mean(sandboxed):,.0f} calls/s")
    print(f"{args.sessions} sessions in flight across the pool: {throughput:,.0f} calls/s")
    print("state size   read call (ms)   state-changing call (ms)   state read (ms)")
    for label, read, write, state in snapshots:
        print(f"{label:>10}   {read * 1e3:14.3f}   {write * 1e3:24.3f}   {state * 1e3:15.3f}")


if __name__ == "__main__":
    asyncio.run(main())
