"""Environment synthesis throughput with the scripted model: environments per minute through the whole pipeline
(discovery, planning, modeling, assessment, validation) and the share of wall time spent outside model calls.

    python bench/synth_envs.py --envs 64 --concurrency 32 --rounds 100 [--latency-ms 100]

"Inside model calls" is the union of the intervals during which at least one scripted answer was being produced
(its simulated latency included); the rest of the wall time is the pipeline's own work: litellm and the client
(request building, retries, accounting), sandbox calls, state reads, checks, embedding, persistence.
``share_outside_client_calls`` is the looser figure that counts the client's own time as inside.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.llm import EndpointLimits, LLMClient, register_python_model
from harness.llm.embeddings import embed
from harness.sandbox import JailSpec
from synth.pipeline import SynthEnvsConfig, synthesize_environments
from tests.doubles.scripted_synth import ScriptedSynthModel


class TimedClient:
    """Delegates to an LLMClient and records when each call was in flight."""

    def __init__(self, client: LLMClient):
        self.client = client
        self.intervals: list[tuple[float, float]] = []

    async def chat(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self.client.chat(*args, **kwargs)
        finally:
            self.intervals.append((started, time.perf_counter()))

    async def aclose(self) -> None:
        await self.client.aclose()


def covered(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


class TimedHandler:
    """The scripted model, answering after a simulated latency (awaited, as a remote endpoint would be), with
    the time spent inside it."""

    def __init__(self, model: ScriptedSynthModel, latency: float):
        self.model = model
        self.latency = latency
        self.seconds = 0.0
        self.intervals: list[tuple[float, float]] = []

    async def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        if self.latency:
            await asyncio.sleep(self.latency)
        try:
            return self.model(request)
        finally:
            stopped = time.perf_counter()
            self.seconds += stopped - started
            self.intervals.append((started, stopped))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    handler = TimedHandler(ScriptedSynthModel(), args.latency_ms / 1000)
    register_python_model("bench-synth", handler)
    with tempfile.TemporaryDirectory() as folder:
        tasks = Path(folder) / "tasks.jsonl"
        tasks.write_text(
            "".join(
                json.dumps({"task": f"Issue a parking permit in district {n} for plate AB-{n}."}) + "\n"
                for n in range(1, args.envs + 1)
            )
        )
        config = SynthEnvsConfig(
            source=str(tasks),
            model="python/bench-synth",
            out=Path(folder) / "out",
            rounds=args.rounds,
            concurrency=args.concurrency,
            similarity=0.9999,
            sandbox_workers=args.workers or None,
        )
        client = TimedClient(LLMClient(default_limits=EndpointLimits(concurrency=args.concurrency, rpm=None, tpm=None)))
        await embed(["warm up the embedding model before the clock starts"])
        async with JailSpec(workers=args.workers or None).pool() as pool:
            started = time.perf_counter()
            result = await synthesize_environments(config, client=client, pool=pool)  # type: ignore[arg-type]
            wall = time.perf_counter() - started
        await client.aclose()
    in_model = covered(handler.intervals)
    in_calls = covered(client.intervals)
    latencies = sorted(stop - start for start, stop in client.intervals)
    return {
        "environments_requested": args.envs,
        "accepted": len(result.accepted),
        "rejected": len(result.rejected),
        "rounds": args.rounds,
        "concurrency": args.concurrency,
        "sandbox_workers": pool.size,
        "scripted_latency_ms": args.latency_ms,
        "model_calls": len(client.intervals),
        "wall_seconds": round(wall, 2),
        "environments_per_minute": round(len(result.accepted) / wall * 60, 1),
        "share_outside_model_calls": round(1 - in_model / wall, 3),
        "share_outside_client_calls": round(1 - in_calls / wall, 3),
        "median_call_ms": round(latencies[len(latencies) // 2] * 1000, 2) if latencies else None,
        "share_of_call_time_in_the_model": round(handler.seconds / sum(latencies), 3) if latencies else None,
        "model_calls_per_second": round(len(client.intervals) / wall, 1),
        "usd_per_accepted_at_gpt_4_1": result.costs.usd_per_accepted,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--workers", type=int, default=0, help="sandbox workers (default: one per core)")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="simulated model latency per call (awaited)")
    figures = asyncio.run(main(parser.parse_args()))
    for key, value in figures.items():
        print(f"{key:32} {value}")
