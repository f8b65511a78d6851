"""Jail overhead: opening a session, one tool call, throughput, memory per open session, checks, snapshots.

    python bench/sandbox.py [--calls 5000] [--sessions 64] [--open 256]

Prints p50/p99 latency of opening a session (fork from the zygote + confinement + loading the class) and of one
call through the jail against the same call made in-process, calls per second with many sessions in flight,
the private memory (USS) and proportional share (PSS) per open session with ``--open`` sessions open (read from
/proc/<pid>/smaps_rollup), the sandbox CPU and page faults per session (opened, one call, closed), the latency of
one check run (a fresh confined process), the sandbox CPU per episode of
scoring episodes that finish together, each in a process of its own and in batches of one scenario (each in a pool
of its own, whose zygote's CPU, its children's included, is counted when the pool closes), and the cost of a call
and of a state read as state grows.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
from typing import Any

from harness.registry import jail_modules
from harness.sandbox import JailSpec, SandboxLimits, SandboxPool
from harness.sandbox.check_batches import checks_of_scenario
from harness.sandbox.policy import optional_modules_named_in
from harness.schema import Check, Environment, ToolCall
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


async def open_latencies(pool: SandboxPool, count: int) -> list[float]:
    samples = []
    for index in range(count):
        start = time.perf_counter()
        session = await pool.open_session(environment(), state_of_size(1000), seed=index)
        samples.append(time.perf_counter() - start)
        await session.close()
    return samples


def _memory_of(pid: int) -> tuple[int, int]:
    """(USS, PSS) of a process in bytes."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0), fields.get("Pss", 0)


async def memory_per_session(pool: SandboxPool, count: int) -> tuple[float, float]:
    """Mean USS and PSS of ``count`` open sessions (each has made one call)."""
    sessions = [await pool.open_session(environment(), state_of_size(1000), seed=i) for i in range(count)]
    call = ToolCall(id="c", name="touch", arguments={"item_id": "I-1"})
    await asyncio.gather(*(session.call(call) for session in sessions))
    pids = [session._child.pid for session in sessions if session._child is not None]
    measured = [_memory_of(pid) for pid in pids]
    for session in sessions:
        await session.close()
    return statistics.mean(m[0] for m in measured), statistics.mean(m[1] for m in measured)


async def check_latencies(pool: SandboxPool, count: int) -> list[float]:
    checks = [
        Check(id=f"c{i}", description="", source=f"def check(initial, final):\n    return final['hits'] >= {i}\n")
        for i in range(10)
    ]
    state = state_of_size(1000)
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await pool.run_checks(checks, state, state)
        samples.append(time.perf_counter() - start)
    return samples


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def scoring_cpu(rounds: int, together: int, batched: bool) -> float:
    """Sandbox CPU seconds per episode of scoring ``rounds`` times ``together`` episodes of one scenario that finish
    at once (10 checks each), in a pool of its own."""
    checks = [
        Check(id=f"c{i}", description="", source=f"def check(initial, final):\n    return final['hits'] >= {i}\n")
        for i in range(10)
    ]
    state = state_of_size(1000)

    async def score() -> None:
        if batched:
            with checks_of_scenario("bench"):
                await pool.run_checks(checks, state, state)
        else:
            await pool.run_checks(checks, state, state)

    before = _children_cpu()
    async with JailSpec(optional_modules=optional_modules_named_in([CODE], jail_modules())).pool() as pool:
        for _ in range(rounds):
            await asyncio.gather(*(score() for _ in range(together)))
    return (_children_cpu() - before) / (rounds * together)


def _children_faults() -> int:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt


async def session_cpu(count: int) -> tuple[float, float]:
    """Sandbox CPU seconds and page faults per session (opened, one call, closed, one after the other), over a pool
    of its own, less those of a pool that opens none (its zygote's start and end)."""

    async def pool_cost(sessions: int) -> tuple[float, int]:
        cpu, faults = _children_cpu(), _children_faults()
        async with JailSpec(optional_modules=optional_modules_named_in([CODE], jail_modules())).pool() as pool:
            for index in range(sessions):
                session = await pool.open_session(environment(), state_of_size(1000), seed=index)
                await session.call(ToolCall(id="c", name="get_item", arguments={"item_id": "I-1"}))
                await session.close()
        return _children_cpu() - cpu, _children_faults() - faults

    empty_cpu, empty_faults = await pool_cost(0)
    cpu, faults = await pool_cost(count)
    return (cpu - empty_cpu) / count, (faults - empty_faults) / count


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
    parser.add_argument("--open", type=int, default=256, help="Sessions held open for the memory figure.")
    parser.add_argument("--workers", type=int, default=1, help="Zygotes.")
    args = parser.parse_args()
    direct = direct_latencies(args.calls)
    limits = SandboxLimits(max_state_bytes=200_000_000)
    async with JailSpec(
        workers=args.workers, limits=limits, optional_modules=optional_modules_named_in([CODE], jail_modules())
    ).pool() as pool:
        active = [layer["name"] for layer in pool.layers if layer["active"]]
        opens = await open_latencies(pool, 200)
        sandboxed = await sandbox_latencies(pool, args.calls)
        throughput = await pool_throughput(pool, args.sessions, max(1, args.calls // args.sessions) * 4)
        uss, pss = await memory_per_session(pool, args.open)
        checks = await check_latencies(pool, 100)
        snapshots = await snapshot_costs(pool)
    per_session, session_faults = await session_cpu(300)
    alone = await scoring_cpu(40, 8, batched=False)
    batched = await scoring_cpu(40, 8, batched=True)
    print(f"zygotes: {args.workers}; layers active: {', '.join(active)}")
    print(f"open session:  p50 {percentile(opens, 0.5) * 1e3:.3f} ms   p99 {percentile(opens, 0.99) * 1e3:.3f} ms")
    print(f"direct call:   p50 {percentile(direct, 0.5) * 1e3:.4f} ms   p99 {percentile(direct, 0.99) * 1e3:.4f} ms")
    print(
        f"sandbox call:  p50 {percentile(sandboxed, 0.5) * 1e3:.4f} ms   p99 {percentile(sandboxed, 0.99) * 1e3:.4f} ms"
    )
    overhead = percentile(sandboxed, 0.5) - percentile(direct, 0.5)
    print(f"p50 overhead per call: {overhead * 1e3:.4f} ms")
    print(f"one session, sequential: {1 / statistics.mean(sandboxed):,.0f} calls/s")
    print(f"{args.sessions} sessions in flight: {throughput:,.0f} calls/s")
    print(f"memory per open session ({args.open} open): USS {uss / 1e6:.2f} MB   PSS {pss / 1e6:.2f} MB")
    print(
        f"sandbox CPU per session (opened, one call, closed): {per_session * 1e3:.2f} ms, "
        f"{session_faults:.0f} page faults"
    )
    print(
        f"10 checks in a fresh process: p50 {percentile(checks, 0.5) * 1e3:.3f} ms   "
        f"p99 {percentile(checks, 0.99) * 1e3:.3f} ms"
    )
    print(
        f"sandbox CPU per episode scored (8 at once, 10 checks): {alone * 1e3:.2f} ms each in its own process, "
        f"{batched * 1e3:.2f} ms in one process per scenario"
    )
    print("state size   read call (ms)   state-changing call (ms)   state read (ms)")
    for label, read, write, state in snapshots:
        print(f"{label:>10}   {read * 1e3:14.3f}   {write * 1e3:24.3f}   {state * 1e3:15.3f}")


if __name__ == "__main__":
    asyncio.run(main())
