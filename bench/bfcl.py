"""BFCL multi-turn: import time, and a full oracle pass over a release's 800 entries at concurrency 64.

    python bench/bfcl.py [--version 2026.3.23 | --source WHEEL_OR_DIR] [--concurrency 64] [--workers N] [--evaluate]

Without ``--source`` the wheel of ``--version`` (2025.6.16 is BFCL v3, 2026.3.23 v4) is downloaded once with
``pip download bfcl-eval==VERSION --no-deps`` into ``~/.cache/envharness/bfcl``. Prints: the import's wall time
(reading and composing, then the sandbox verification that replays every ground truth), and for the oracle pass
(ground truth replayed through the scripted user, scored as BFCL's checker scores it) its success per category,
wall time, CPU per episode (this process plus its sandbox workers) and peak memory. ``--evaluate`` also exports the
pass and runs that release's ``bfcl evaluate`` on it (in the venv of ``tests/support/bfcl_venv.py``, built once),
printing its accuracy per category and the entries where its verdict and ours differ.
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.library import Library

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VERSION = "2026.3.23"
EVALUATED_AS = "gpt-4o-2024-11-20-FC"


def wheel(version: str) -> Path:
    cache = Path.home() / ".cache" / "envharness" / "bfcl"
    path = cache / f"bfcl_eval-{version}-py3-none-any.whl"
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", f"bfcl-eval=={version}", "--no-deps", "-d", str(cache)],
            check=True,
            capture_output=True,
        )
    return path


def evaluate(run_dir: Path, library: Library, version: str, release: str, work: Path) -> None:
    """Export the run, score it with the release's ``bfcl evaluate`` and compare its verdicts with ours."""
    import os

    import orjson

    from harness.benchmarks.bfcl.export import export_run
    from harness.results.metrics import open_run
    from tests.support.bfcl_venv import bfcl_venv

    started = time.perf_counter()
    venv = bfcl_venv(version)
    built = time.perf_counter() - started
    run = open_run(run_dir)
    results = work / "result" / EVALUATED_AS
    report = export_run(run.results, library, results)
    started = time.perf_counter()
    env = {**os.environ, "BFCL_PROJECT_ROOT": str(work), "OPENAI_API_KEY": "not-used"}
    command = [str(venv.python), "-m", "bfcl_eval", "evaluate", "--model", EVALUATED_AS, "--test-category"]
    categories = [name.split("_", 2)[2] for name in report.files]
    subprocess.run([*command, ",".join(categories)], cwd=work, env=env, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    upstream_id = {s.id: str(s.provenance.upstream_id) for s in library.scenarios}
    ours = {upstream_id[t.scenario_id]: bool(t.reward and t.reward.success) for t in run.results}
    print(f"bfcl evaluate ({version}, venv {'cached' if venv.build_seconds is None else f'built in {built:.0f} s'}):")
    for category in categories:
        lines = (work / "score" / EVALUATED_AS / f"BFCL_{release}_{category}_score.json").read_text().splitlines()
        rows = [orjson.loads(line) for line in lines]
        failed = {row["id"] for row in rows[1:]}
        mine = {entry: passed for entry, passed in ours.items() if entry.rsplit("_", 1)[0] == category}
        differ = sorted(entry for entry, passed in mine.items() if passed == (entry in failed))
        print(
            f"  {category}: accuracy {rows[0]['accuracy']} ({rows[0]['correct_count']}/{rows[0]['total_count']}); "
            f"verdicts that differ from ours: {len(differ)} {differ[:5]}"
        )
    print(f"  evaluate wall {seconds:.1f} s")


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def main(source: Path, version: str, concurrency: int, workers: int | None, with_evaluate: bool) -> None:
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
        print(
            f"import: BFCL {imported.release} (bfcl-eval {imported.version}): {len(imported.scenarios)} entries "
            f"{dict(imported.counts)}, {len(imported.environments)} envs"
        )
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
        category_of = {s.id: s.provenance.details["category"] for s in library.scenarios}
        per_category: Counter[str] = Counter()
        for trajectory in scored:
            per_category[category_of[trajectory.scenario_id]] += bool(trajectory.reward and trajectory.reward.success)
        steps = sum(len(t.steps) for t in results)
        own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        child_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"oracle pass: {len(results)} episodes at concurrency {concurrency}, {steps} tool calls")
        print(f"  terminations {dict(terminations)}; success {successes}/{len(scored)} scored")
        print(f"  success per category {dict(per_category)}")
        print(f"  wall {wall:.1f} s ({len(results) / wall:.1f} episodes/s)")
        print(f"  CPU {cpu:.1f} s in all, {cpu / len(results) * 1000:.0f} ms per episode (runner + sandbox workers)")
        print(f"  peak RSS: runner {own_peak:.0f} MB, largest sandbox worker {child_peak:.0f} MB")
        if with_evaluate:
            evaluate(outcome.run_dir, library, imported.version, imported.release, Path(folder) / "bfcl")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--version", default=VERSION, help="bfcl-eval release to download (2025.6.16: BFCL v3)")
    parser.add_argument("--evaluate", action="store_true", help="Score the pass with the release's bfcl evaluate")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=None)
    arguments = parser.parse_args()
    source = arguments.source or wheel(arguments.version)
    asyncio.run(main(source, arguments.version, arguments.concurrency, arguments.workers, arguments.evaluate))
