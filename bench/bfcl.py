"""BFCL multi-turn: import time, and a full oracle pass over the 800 entries at concurrency 64.

    python bench/bfcl.py [--source WHEEL_OR_DIR] [--concurrency 64] [--workers N]

Without ``--source`` the wheel is downloaded once with ``pip download bfcl-eval==2026.3.23 --no-deps`` into
``~/.cache/envharness/bfcl``. Prints: the import's wall time (reading and composing, then the sandbox
verification that replays every ground truth), and for the oracle pass (ground truth replayed through the
scripted user, scored as BFCL's checker scores it) its wall time, CPU per episode (this process plus its sandbox
workers) and peak memory.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VERSION = "2026.3.23"


def wheel() -> Path:
    cache = Path.home() / ".cache" / "envharness" / "bfcl"
    path = cache / f"bfcl_eval-{VERSION}-py3-none-any.whl"
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", f"bfcl-eval=={VERSION}", "--no-deps", "-d", str(cache)],
            check=True,
            capture_output=True,
        )
    return path


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def main(source: Path, concurrency: int, workers: int | None) -> None:
    from agents.run_adapters import agent_factory, user_factory
    from harness.benchmarks.bfcl.importer import import_bfcl, verify_import, write_import
    from harness.library import load_library
    from harness.run import RunConfig, run
    from harness.sandbox import JailSpec

    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        imported = import_bfcl(source, ["all"])
        read = time.perf_counter() - started
        async with JailSpec(workers=workers).pool() as pool:
            verification = await verify_import(imported, pool)
        verified = time.perf_counter() - started
        library_dir = Path(folder) / "library"
        write_import(imported, library_dir)
        total = time.perf_counter() - started
        print(f"import: {len(imported.scenarios)} entries {dict(imported.counts)}, {len(imported.environments)} envs")
        print(f"  read + compose {read:.2f} s, + sandbox verification {verified:.2f} s, + write {total:.2f} s")
        print(f"  problems {len(verification.problems)}; refused modules {verification.unavailable or 'none'}")

        library = load_library(library_dir)
        config = RunConfig(
            envs=str(library_dir),
            agent_kind="oracle",
            mode="conv",
            concurrency=concurrency,
            workers=workers,
            out=Path(folder) / "run",
        )
        cpu_before = cpu_seconds()
        started = time.perf_counter()
        outcome = await run(config, agent_factory=agent_factory, user_factory=user_factory, library=library)
        wall = time.perf_counter() - started
        cpu = cpu_seconds() - cpu_before
        from harness.results.metrics import read_results

        results = read_results(outcome.run_dir / "results.jsonl")
        terminations = Counter(t.termination.value for t in results)
        scored = [t for t in results if t.reward is not None]
        successes = sum(t.reward.success for t in scored if t.reward is not None)
        steps = sum(len(t.steps) for t in results)
        own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        child_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"oracle pass: {len(results)} episodes at concurrency {concurrency}, {steps} tool calls")
        print(f"  terminations {dict(terminations)}; success {successes}/{len(scored)} scored")
        print(f"  wall {wall:.1f} s ({len(results) / wall:.1f} episodes/s)")
        print(f"  CPU {cpu:.1f} s in all, {cpu / len(results) * 1000:.0f} ms per episode (runner + sandbox workers)")
        print(f"  peak RSS: runner {own_peak:.0f} MB, largest sandbox worker {child_peak:.0f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=None)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.source or wheel(), arguments.concurrency, arguments.workers))
