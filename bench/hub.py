"""Time and peak memory to publish 10,000 scenarios to the Hub and to load them back.

Runs the Hub test server in its own process, then each phase in a fresh process so that its peak memory is
its own: peak RSS (``ru_maxrss``, includes the interpreter and imported libraries), the peak of Python
allocations during the phase (``tracemalloc``), and Arrow's peak pool allocation.

    python bench/hub.py [--scenarios 10000] [--environments 50]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_benchDummyToken"
REPO = "bench/scenarios-10k"


def make_library(n_environments: int, n_scenarios: int) -> tuple[list[Any], list[Any]]:
    from harness.schema import (
        Check,
        Environment,
        FunctionSpec,
        ReferenceAction,
        Scenario,
        ToolSpec,
        UserProfile,
    )

    code = "class Shop:\n    def __init__(self, state):\n        self.state = state\n" + "".join(
        f"\n    def tool_{i}(self, item_id: str) -> dict:\n        return self.state['items'][item_id]\n"
        for i in range(12)
    )
    environments = [
        Environment(
            id=f"env_{e:03d}",
            name=f"Shop {e}",
            domain=["retail", "travel", "finance", "health"][e % 4],
            introduction="You run the shop's back office. " * 10,
            rules=[f"Rule {r}: be exact." for r in range(8)],
            tools=[ToolSpec(function=FunctionSpec(name=f"tool_{i}", description="Get an item.")) for i in range(12)],
            class_name="Shop",
            code=code,
        )
        for e in range(n_environments)
    ]
    scenarios = []
    rng = random.Random(0)
    words = ["red", "blue", "lamp", "desk", "chair", "cable", "phone", "case", "mug", "book", "pen", "bag"]
    for s in range(n_scenarios):
        # Varied values so that the Parquet files compress like real data, not like copies of one row.
        items = {
            f"I-{s}-{k}": {
                "name": " ".join(rng.choices(words, k=3)),
                "price": round(rng.uniform(1, 500), 2),
                "stock": rng.randint(0, 99),
                "tags": rng.sample(words, 2),
                "owner": f"U-{rng.randint(0, 10**6)}" if k % 4 else None,
            }
            for k in range(15)
        }
        scenarios.append(
            Scenario(
                id=f"scn_{s:06d}",
                environment_id=f"env_{s % n_environments:03d}",
                initial_state={"items": items, "users": {f"U-{s}": {"name": "Ada", "tier": "gold"}}},
                task=f"Reduce the stock of item I-{s}-3 by one and tell the customer the new price.",
                user_profile=UserProfile(persona="A customer", goal="Buy an item", known_info=[f"item I-{s}-3"])
                if s % 2
                else None,
                checks=[
                    Check(
                        id=f"c{c}",
                        description="Stock went down.",
                        source=f"def check(initial_state, final_state):\n"
                        f"    return final_state['items']['I-{s}-3']['stock'] == "
                        f"initial_state['items']['I-{s}-3']['stock'] - {c}\n",
                    )
                    for c in range(3)
                ],
                reference_actions=[ReferenceAction(name="tool_3", arguments={"item_id": f"I-{s}-3"})],
                tags=["bench"],
            )
        )
    return environments, scenarios


def rss_peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def timed(action: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """Run once untraced: wall time, and the process's peak RSS before and after."""
    before = rss_peak_mb()
    start = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - start
    return result, {"seconds": round(seconds, 3), "rss_peak_before_mb": before, "rss_peak_mb": rss_peak_mb()}


def traced_peak_mb(action: Callable[[], Any]) -> dict[str, Any]:
    """Run again under tracemalloc (slower, so not timed): peak of Python allocations and of Arrow's pool."""
    import pyarrow as pa

    tracemalloc.start()
    action()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "python_peak_mb": round(peak / 2**20, 1),
        "arrow_pool_peak_mb": round((pa.default_memory_pool().max_memory() or 0) / 2**20, 1),
    }


def run_phase(name: str, args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir)
    if name == "publish":
        from harness.hub import build_library, upload_built

        environments, scenarios = make_library(args.environments, args.scenarios)
        built, build = timed(lambda: build_library(environments, scenarios, workdir / "build", REPO))
        build.update(traced_peak_mb(lambda: build_library(environments, scenarios, workdir / "again", REPO)))
        build["folder_mb"] = round(sum(p.stat().st_size for p in built.folder.rglob("*") if p.is_file()) / 2**20, 2)
        result, upload = timed(lambda: upload_built(built))
        upload["committed"] = result.committed
        repeat, again = timed(lambda: upload_built(built))
        again["committed"] = repeat.committed
        return {"build (records -> parquet+card)": build, "upload (new repo)": upload, "republish unchanged": again}
    if name == "load_library":
        from harness.hub import load_library_from_hub

        (environments, scenarios, ref), load = timed(lambda: load_library_from_hub(REPO))
        load.update(environments=len(environments), scenarios=len(scenarios))
        del environments, scenarios
        _, cached = timed(lambda: load_library_from_hub(f"{REPO}@{ref.revision}"))
        cached.update(traced_peak_mb(lambda: load_library_from_hub(f"{REPO}@{ref.revision}")))
        return {"load_library_from_hub": load, "load pinned sha (cached)": cached}
    if name == "load_dataset":
        import importlib

        hf_datasets = importlib.import_module("datasets")
        rows, load = timed(lambda: hf_datasets.load_dataset(REPO, "scenarios", split="train"))
        load["rows"] = len(rows)
        return {"datasets.load_dataset": load}
    raise SystemExit(f"unknown phase {name}")


def hub_environment(url: str, workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HF_ENDPOINT": url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_TOKEN": TOKEN,
            "HF_HOME": str(workdir / "hf_home"),
            "HF_DATASETS_CACHE": str(workdir / "hf_datasets"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            "PYTHONPATH": str(ROOT),
        }
    )
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scenarios", type=int, default=10_000)
    parser.add_argument("--environments", type=int, default=50)
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        sys.stdout.write(json.dumps(run_phase(args.phase, args)) + "\n")
        return

    with tempfile.TemporaryDirectory(prefix="bench-hub-") as tmp:
        workdir = Path(tmp)
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.doubles.hub_server", "--root", str(workdir / "server"), "--token", TOKEN],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            env = hub_environment(url, workdir)
            results: dict[str, Any] = {}
            for phase in ("publish", "load_library", "load_dataset"):
                output = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--phase",
                        phase,
                        "--workdir",
                        str(workdir),
                        "--scenarios",
                        str(args.scenarios),
                        "--environments",
                        str(args.environments),
                    ],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                results.update(json.loads(output.strip().splitlines()[-1]))
        finally:
            server.terminate()
            server.wait(timeout=30)

    print(f"Hub publish/load of {args.scenarios} scenarios and {args.environments} environments (test server)")
    print("Each phase group runs in its own process; RSS includes the interpreter and imported libraries.")
    header = f"{'phase':<34}{'seconds':>9}{'rss peak MB':>13}{'python peak MB':>16}{'arrow peak MB':>15}  notes"
    print(header)
    known = ("seconds", "rss_peak_mb", "python_peak_mb", "arrow_pool_peak_mb")
    for phase, figures in results.items():
        notes = ", ".join(f"{k}={v}" for k, v in figures.items() if k not in known)
        python_peak = figures.get("python_peak_mb", "-")
        arrow_peak = figures.get("arrow_pool_peak_mb", "-")
        print(
            f"{phase:<34}{figures['seconds']:>9.2f}{figures['rss_peak_mb']:>13.1f}"
            f"{python_peak!s:>16}{arrow_peak!s:>15}  {notes}"
        )


if __name__ == "__main__":
    main()
