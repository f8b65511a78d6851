"""Re-scoring stored episodes: how long ``harness rescore`` takes for a run of about 1,000 episodes.

    python bench/rescore.py [--trials 7] [--concurrency 32]

Makes a stored run first (the oracle agent on every seed scenario, non-conversational, ``--trials`` each: 144
scenarios × 7 = 1,008 episodes; not timed), then re-scores it with the same library in-process, as
``harness rescore`` does: every episode's recorded tool calls replayed in a fresh jailed session, its checks run.
Prints episodes, wall seconds, episodes per second, and CPU seconds of the harness process and of the jail (the
zygotes and their children, counted once the pool has closed).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.library import load_library
from harness.rescore import plan_rescore, rescore_run

REPO = Path(__file__).resolve().parents[1]


def make_run(folder: Path, trials: int) -> Path:
    run_dir = folder / "run"
    command = [sys.executable, "-m", "harness.cli", "run", "--agent", "oracle", "--mode", "nonconv"]
    command += ["--trials", str(trials), "--limit", "100000", "--out", str(run_dir)]
    subprocess.run(command, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return run_dir


async def rescore(run_dir: Path, out: Path, concurrency: int) -> int:
    library = load_library(str(REPO / "datasets" / "seed"))
    plan = plan_rescore(run_dir, library, out)
    async with library.jail().pool() as pool:
        report = await rescore_run(plan, pool, concurrency=concurrency)
    assert report.complete, report.not_rescored[:3]
    return report.rescored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        run_dir = make_run(folder, args.trials)
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        episodes = asyncio.run(rescore(run_dir, folder / "rescored", args.concurrency))
        wall = time.perf_counter() - started
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
    harness_cpu = own.ru_utime + own.ru_stime - own_before.ru_utime - own_before.ru_stime
    jail_cpu = children.ru_utime + children.ru_stime - children_before.ru_utime - children_before.ru_stime
    print(f"episodes re-scored     {episodes}")
    print(f"wall                   {wall:.2f} s ({episodes / wall:.1f} episodes/s)")
    print(f"CPU, harness process   {harness_cpu:.2f} s ({1000 * harness_cpu / episodes:.2f} ms per episode)")
    print(f"CPU, jail              {jail_cpu:.2f} s ({1000 * jail_cpu / episodes:.2f} ms per episode)")


if __name__ == "__main__":
    main()
