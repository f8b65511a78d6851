"""Check that two checkouts of the project record the same results for the same scripted runs.

    python bench/same_results.py BEFORE_ROOT AFTER_ROOT [--trials 2]

Runs ``harness run`` from each checkout (``PYTHONPATH`` set to it) on the seed library, in both modes, twice:
with ``--agent oracle`` and with a model (the mock OpenAI-compatible server replaying each scenario's reference
actions, its simulated user opening with the task). The ``results.jsonl`` of the two checkouts must then hold
the same lines byte for byte once the fields that measure time are blanked (timings, step durations, a usage's
model seconds) and the lines are put in episode order (episodes finish in any order). Exits 1 naming the first
difference.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from tests.doubles.seed_replay import alias_file, serving_mock  # noqa: E402


def timeless(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with every time measurement blanked."""
    record["timings"] = None
    for step in record.get("steps") or []:
        step["duration_ms"] = None
    for usage in (record.get("usage") or {}).values():
        usage["model_seconds"] = None
    return record


def normalised_lines(results: Path) -> list[bytes]:
    records = [timeless(orjson.loads(line)) for line in results.read_bytes().splitlines() if line.strip()]
    records.sort(key=lambda r: str(r["episode_id"]))
    return [orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in records]


def first_difference(before: Any, after: Any, path: str = "") -> tuple[str, Any, Any]:
    if isinstance(before, dict) and isinstance(after, dict) and before.keys() == after.keys():
        for key in before:
            if before[key] != after[key]:
                return first_difference(before[key], after[key], f"{path}.{key}")
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            if old != new:
                return first_difference(old, new, f"{path}[{index}]")
    return path or ".", before, after


def run_in(root: Path, args: list[str], env: dict[str, str]) -> None:
    environment = {**os.environ, **env, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=root, env=environment, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{root}: harness {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")


def compare(name: str, before: Path, after: Path) -> bool:
    old, new = normalised_lines(before), normalised_lines(after)
    if len(old) != len(new):
        print(f"{name}: {len(old)} results before, {len(new)} after")
        return False
    for line_before, line_after in zip(old, new, strict=True):
        if line_before != line_after:
            path, old_value, new_value = first_difference(orjson.loads(line_before), orjson.loads(line_after))
            print(f"{name}: first difference at {path}: before {old_value!r:.500}, after {new_value!r:.500}")
            return False
    print(f"{name}: {len(new)} results, identical apart from time measurements")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args()
    common = ["run", "--mode", "both", "--trials", str(args.trials), "--concurrency", "32"]
    same = True
    with tempfile.TemporaryDirectory() as folder, serving_mock() as server:
        scratch = Path(folder)
        models = alias_file(scratch / "models.toml", server.base_url)
        with models.open("a") as aliases:
            aliases.write(f'[aliases.mock-user]\nmodel = "hosted_vllm/user"\napi_base = "{server.base_url}"\n')
        env = {"HARNESS_MODELS_FILE": str(models)}
        runs = {
            "oracle": ["--agent", "oracle"],
            "model": ["--model", "mock-agent", "--user-model", "mock-user"],
        }
        for name, extra in runs.items():
            outputs = []
            for side, root in (("before", args.before), ("after", args.after)):
                out = scratch / side / name  # the folder name is the run id: the same on both sides
                run_in(root.resolve(), [*common, *extra, "--out", str(out)], env)
                outputs.append(out / "results.jsonl")
            same = compare(name, *outputs) and same
    raise SystemExit(0 if same else 1)


if __name__ == "__main__":
    main()
