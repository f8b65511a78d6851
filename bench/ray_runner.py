"""The Ray path against the local path, same machine, same concurrency, mock server at a fixed latency.

    python bench/ray_runner.py [--latency 0.1] [--concurrency 256] [--episodes 768] [--workers 2] [--repeat 3]

Each path runs in a fresh process against the mock OpenAI-compatible server (its own process; the mock model
replays each seed scenario's reference actions, about five requests per episode). The Ray path starts a local
Ray instance and one executor on it, so the difference is what the Ray path costs: cluster start, the probes,
shipping the library, the batched submit and collect calls and the trajectories' trip back. Printed per path
and round (the paths alternate, ``--repeat`` rounds): time to the first result (from the call to ``run``),
episodes/s over the whole run and between the first and last result; then the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.children import receive  # noqa: E402


def serve(latency: float, ready: multiprocessing.Queue, stop: multiprocessing.Event) -> None:  # type: ignore[type-arg]
    from harness.library import load_library
    from tests.doubles.mock_openai import MockOpenAIServer

    server = MockOpenAIServer(latency=latency, record_bodies=False)
    for scenario in load_library().scenarios:
        server.register_replay(scenario.task, [a.model_dump() for a in scenario.reference_actions])
    with server.running_in_thread():
        ready.put(server.base_url)
        stop.wait()


def run_path(
    base_url: str,
    ray: str | None,
    concurrency: int,
    episodes: int,
    workers: int,
    results: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    from agents.run_adapters import agent_factory
    from harness.library import load_library
    from harness.llm import AliasTable, EndpointLimits, LLMClient
    from harness.llm.aliases import AliasEntry
    from harness.run import RunConfig, RunProgress, run

    library = load_library()
    trials = max(1, -(-episodes // len(library.scenarios)))
    aliases = AliasTable({"mock": AliasEntry(model="hosted_vllm/replay", api_base=base_url)}, environ={})
    marks: list[float] = []

    def on_progress(progress: RunProgress) -> None:
        while len(marks) < progress.done:
            marks.append(time.perf_counter())

    async def go() -> tuple[float, int]:
        client = LLMClient(aliases=aliases, default_limits=EndpointLimits(concurrency=concurrency))
        with tempfile.TemporaryDirectory() as folder:
            config = RunConfig(
                model="mock", trials=trials, concurrency=concurrency, out=Path(folder) / "run", workers=workers, ray=ray
            )
            started = time.perf_counter()
            outcome = await run(
                config, agent_factory=agent_factory, client=client, library=library, on_progress=on_progress
            )
        await client.aclose()
        return started, outcome.ran

    started, ran = asyncio.run(go())
    results.put((ran, marks[0] - started, marks[-1] - started, marks[-1] - marks[0]))


def measure(
    base_url: str, ray: str | None, concurrency: int, episodes: int, workers: int
) -> tuple[int, float, float, float]:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=run_path, args=(base_url, ray, concurrency, episodes, workers, results))
    process.start()
    value = receive(results, process, f"the {ray or 'local'} path")
    process.join()
    return value  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--episodes", type=int, default=768)
    parser.add_argument("--workers", type=int, default=2, help="Sandbox worker processes (each path).")
    parser.add_argument("--repeat", type=int, default=3, help="Rounds; each runs both paths, figures are medians.")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    stop = context.Event()
    server = context.Process(target=serve, args=(args.latency, ready, stop))
    server.start()
    base_url = receive(ready, server, "the mock server")
    print(
        f"mock server latency {args.latency * 1000:.0f} ms, concurrency {args.concurrency}, "
        f"{args.workers} sandbox workers"
    )
    print(f"{'path':>6} {'episodes':>9} {'first result s':>15} {'total s':>8} {'episodes/s':>11} {'steady ep/s':>12}")
    figures: dict[str, list[tuple[float, float, float]]] = {"local": [], "ray": []}
    for _ in range(args.repeat):
        for name, ray in (("local", None), ("ray", "local")):
            ran, first, last, steady = measure(base_url, ray, args.concurrency, args.episodes, args.workers)
            figures[name].append((first, ran / last, (ran - 1) / steady if steady > 0 else float("nan")))
            row = figures[name][-1]
            print(f"{name:>6} {ran:>9} {first:>15.2f} {last:>8.1f} {row[1]:>11.1f} {row[2]:>12.1f}")
    stop.set()
    server.join()
    medians = {name: [statistics.median(col) for col in zip(*rows, strict=True)] for name, rows in figures.items()}
    for name, (first, overall, steady_rate) in medians.items():
        print(f"median {name}: first result {first:.2f} s, {overall:.1f} episodes/s overall, {steady_rate:.1f} steady")
    overall = 100 * (1 - medians["ray"][1] / medians["local"][1])
    steady = 100 * (1 - medians["ray"][2] / medians["local"][2])
    print(
        f"Ray path (medians): {overall:.1f}% fewer episodes/s over the whole run, "
        f"{steady:.1f}% fewer between first and last result"
    )


if __name__ == "__main__":
    main()
