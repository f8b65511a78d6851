"""Runner throughput against the mock OpenAI-compatible server at a fixed latency.

    python bench/runner.py [--latency 0.1] [--levels 16,64,256,1024] [--episodes N] [--rpm-seconds 130]
        [--default-collector]

For each concurrency level, in a fresh process: episodes/s and requests/s against the bound concurrency / L,
harness CPU per request, CPU of the sandbox processes (zygote, session and check processes) per episode, and
peak memory (RSS); "… running" is the harness CPU per request counted from the first episode's start (without
the process's imports, the sandbox start, the screening and the model probe); "model ms/req" the mock server's
own CPU per request (it shares the machine's cores); "busy" the share of all cores the harness, the sandbox and
the mock server used while the run ran. ``--episodes`` sets the episodes per level (default: three times the
concurrency, at least 200). The mock model replays each seed
scenario's reference actions (about five requests per episode); the server runs in its own process. Then the
requests per minute achieved with ``rpm=600`` while demand exceeds it, counted by the server.
``--default-collector`` runs with CPython's default garbage-collector settings instead of the ones a run uses
(``harness/collector.py``), for comparison. With ``--rpm-seconds 0``, a second table gives each level's start
(until its first model request) and its requests/s between its first and last model request, against the same
bound.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.children import receive  # noqa: E402


def serve(
    latency: float, ready: multiprocessing.Queue, stop: multiprocessing.Event, counts: multiprocessing.Queue
) -> None:  # type: ignore[type-arg]
    from harness.library import load_library
    from tests.doubles.mock_openai import MockOpenAIServer

    server = MockOpenAIServer(latency=latency, record_bodies=False)
    for scenario in load_library().scenarios:
        server.register_replay(scenario.task, [a.model_dump() for a in scenario.reference_actions])
    with server.running_in_thread():
        ready.put((server.base_url, None))
        stop.wait()
        counts.put(([r.t for r in server.chat_requests()], server.max_open_connections))


def run_level(
    base_url: str,
    concurrency: int,
    episodes: int,
    rpm: int | None,
    results: multiprocessing.Queue,  # type: ignore[type-arg]
    default_collector: bool = False,
) -> None:
    import contextlib

    import harness.run.driver

    if default_collector:
        harness.run.driver.tuned_for_throughput = contextlib.nullcontext  # type: ignore[assignment]
    from agents.run_adapters import agent_factory
    from harness.library import load_library
    from harness.llm import AliasTable, EndpointLimits, LLMClient
    from harness.llm.aliases import AliasEntry
    from harness.run import RunConfig, run

    library = load_library()
    trials = max(1, -(-episodes // len(library.scenarios)))
    aliases = AliasTable({"mock": AliasEntry(model="hosted_vllm/replay", api_base=base_url)}, environ={})

    at_start: list[resource.struct_rusage] = []

    async def go() -> tuple[float, int, int]:
        client = LLMClient(aliases=aliases, default_limits=EndpointLimits(concurrency=concurrency, rpm=rpm))
        with tempfile.TemporaryDirectory() as folder:
            config = RunConfig(model="mock", trials=trials, concurrency=concurrency, out=Path(folder) / "run")
            started = time.perf_counter()
            outcome = await run(
                config,
                agent_factory=agent_factory,
                client=client,
                library=library,
                on_start=lambda _plan: at_start.append(resource.getrusage(resource.RUSAGE_SELF)),
            )
            elapsed = time.perf_counter() - started
        requests = sum(u.requests for u in client.usage_by_role().values())
        await client.aclose()
        return elapsed, outcome.ran, requests

    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    jail_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    elapsed, ran, requests = asyncio.run(go())
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    # The sandbox zygote has exited and reaped its session and check processes: their CPU is counted here.
    jail_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    started = at_start[0] if at_start else cpu_before
    cpu_episodes = (cpu_after.ru_utime - started.ru_utime) + (cpu_after.ru_stime - started.ru_stime)
    jail_cpu = (jail_after.ru_utime - jail_before.ru_utime) + (jail_after.ru_stime - jail_before.ru_stime)
    peak_mb = cpu_after.ru_maxrss / 1024
    results.put((elapsed, ran, requests, cpu, peak_mb, jail_cpu, cpu_episodes))


def measure(
    base_url: str, concurrency: int, episodes: int, rpm: int | None = None, default_collector: bool = False
) -> tuple[float, int, int, float, float, float, float]:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=run_level, args=(base_url, concurrency, episodes, rpm, results, default_collector))
    process.start()
    value = receive(results, process, f"the run at concurrency {concurrency}")
    process.join()
    return value  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--levels", default="16,64,256,1024")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per level")
    parser.add_argument("--rpm-seconds", type=float, default=130.0, help="0 skips the rpm measurement")
    parser.add_argument("--default-collector", action="store_true", help="CPython's default collector settings")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    ready, counts = context.Queue(), context.Queue()
    stop = context.Event()
    server = context.Process(target=serve, args=(args.latency, ready, stop, counts))
    server.start()
    base_url, _ = receive(ready, server, "the mock server")
    print(f"mock server latency {args.latency * 1000:.0f} ms; bound = concurrency / latency requests/s")
    print(
        f"{'conc.':>6} {'episodes':>9} {'episodes/s':>11} {'requests/s':>11} {'bound':>7} {'% bound':>8} "
        f"{'CPU ms/req':>11} {'… running':>10} {'jail ms/ep':>11} {'model ms/req':>13} {'busy':>6} {'peak MB':>8}"
    )
    windows: list[tuple[int, float, float]] = []
    cores = os.cpu_count() or 1
    for level in [int(x) for x in args.levels.split(",")]:
        episodes = args.episodes or max(3 * level, 200)
        level_started = time.monotonic()
        server_before = process_cpu(server.pid)
        elapsed, ran, requests, cpu, peak, jail_cpu, cpu_episodes = measure(
            base_url, level, episodes, default_collector=args.default_collector
        )
        level_ended = time.monotonic()
        server_cpu = process_cpu(server.pid) - server_before
        windows.append((level, level_started, level_ended))
        bound = level / args.latency
        rate = requests / elapsed
        busy = (cpu + jail_cpu + server_cpu) / (cores * elapsed)
        print(
            f"{level:>6} {ran:>9} {ran / elapsed:>11.1f} {rate:>11.1f} {bound:>7.0f} {100 * rate / bound:>7.1f}% "
            f"{1000 * cpu / max(requests, 1):>11.2f} {1000 * cpu_episodes / max(requests, 1):>10.2f} "
            f"{1000 * jail_cpu / max(ran, 1):>11.2f} {1000 * server_cpu / max(requests, 1):>13.2f} "
            f"{100 * busy:>5.0f}% {peak:>8.0f}"
        )
    if args.rpm_seconds:
        episodes = int(args.rpm_seconds * 600 / 60 / 4)  # demand well above 600/min at concurrency 64
        started = time.monotonic()
        context_results = context.Queue()
        process = context.Process(target=run_level, args=(base_url, 64, episodes * 4, 600, context_results))
        process.start()
        time.sleep(args.rpm_seconds)
        process.kill()
        process.join()
        stop.set()
        times, _connections = counts.get()
        times = [t for t in times if t >= started]  # CLOCK_MONOTONIC is shared by all processes
        window = [t for t in times if t >= times[-1] - 60.0] if times else []
        print(
            f"rpm=600 for {time.monotonic() - started:.0f} s: {len(window)} requests in the last 60 s "
            f"({100 * len(window) / 600:.1f}% of 600); busiest 60 s window: {busiest(times, 60.0)}"
        )
    else:
        stop.set()
        times, _connections = counts.get()
        print_steady_state(times, windows, args.latency)
    server.join()


def process_cpu(pid: int | None) -> float:
    """User and system CPU seconds of a running process, from /proc (0 when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def print_steady_state(times: list[float], windows: list[tuple[int, float, float]], latency: float) -> None:
    """Requests/s between each level's first and last model request: the run without its start (process start,
    imports, sandbox start-up, screening of the library, the model probe) and its summary."""
    print(f"{'conc.':>6} {'start s':>8} {'steady req/s':>13} {'% bound':>8}")
    for level, started, ended in windows:
        inside = [t for t in times if started <= t <= ended]
        if len(inside) < 2:
            continue
        steady = (len(inside) - 1) / (inside[-1] - inside[0])
        print(f"{level:>6} {inside[0] - started:>8.2f} {steady:>13.1f} {100 * steady * latency / level:>7.1f}%")


def busiest(times: list[float], window: float) -> int:
    best, start = 0, 0
    for end in range(len(times)):
        while times[end] - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


if __name__ == "__main__":
    main()
