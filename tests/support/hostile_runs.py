"""Run folders made hostile from a real one, and a library whose scenarios say they came from ACEBench and BFCL,
for the tests of the commands that read run folders (show, rescore, exports, leaderboard build)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from harness.library import load_library, write_seed_layout
from harness.schema import Provenance
from tests.support.acebench_checkout import write_checkout
from tests.support.cli_process import Finished, harness
from tests.support.hostile_sources import harness_measured

SEED = Path(__file__).resolve().parents[2] / "datasets" / "seed"


def read_lines(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (run_dir / "results.jsonl").read_bytes().splitlines() if line.strip()]


def write_lines(run_dir: Path, lines: list[dict[str, Any]]) -> None:
    (run_dir / "results.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def copy_run(run_dir: Path, to: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """A copy of ``run_dir`` at ``to``, each results line changed by ``edit``."""
    shutil.copytree(run_dir, to)
    if edit is not None:
        lines = read_lines(to)
        for line in lines:
            edit(line)
        write_lines(to, lines)
    return to


def set_manifest(run_dir: Path, **changes: Any) -> None:
    path = run_dir / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    for dotted, value in changes.items():
        node = manifest
        *head, last = dotted.split("__")
        for key in head:
            node = node[key]
        node[last] = value
    path.write_bytes(orjson.dumps(manifest))


def files_under(folder: Path) -> dict[Path, bytes]:
    if not folder.exists():
        return {}
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file() and not path.is_symlink()}


def bfcl_library(folder: Path, details: Mapping[str, Any]) -> Path:
    """The seed's banking environment with ``bfcl-1``, a copy of ``banking-001`` that says it came from BFCL (with
    ``details`` as its provenance details)."""
    seed = load_library(str(SEED))
    scenario = next(s for s in seed.scenarios if s.id == "banking-001")
    copy = scenario.model_copy(update={"id": "bfcl-1", "provenance": Provenance(source="bfcl", details=dict(details))})
    write_seed_layout([seed.environments["banking"]], [copy], folder)
    return folder


def import_acebench(folder: Path) -> Path:
    """ACEBench's agent multi_step category of the made-up checkout (``tests.support.acebench_checkout``),
    imported by the real command line into ``folder / "library"``."""
    checkout = write_checkout(folder / "ACEBench")
    out = folder / "library"
    command = ["import", "acebench", "--source", str(checkout), "--category", "multi_step", "--out", str(out)]
    finished = harness([*command, "--skip-bad-records"])
    assert finished.code == 0, finished.stderr
    return out


def edit_scenarios(library: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Change every scenario record of a library in the seed layout."""
    for path in sorted((library / "scenarios").glob("*.jsonl")):
        records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        for record in records:
            edit(record)
        path.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in records))


def acebench_run(stored_run: Path, library: Path, folder: Path, *, model: str = "mock-agent") -> Path:
    """A run folder naming ``library`` in its manifest, with one episode of each of its scenarios (the agent made no
    call: each result is the scenario's state at reset), by ``model``."""
    template = read_lines(stored_run)[0]
    lines = []
    for number, scenario in enumerate(load_library(str(library)).scenarios):
        lines.append(
            {
                **template,
                "episode_id": f"ace{number:04d}",
                "scenario_id": scenario.id,
                "environment_id": scenario.environment_id,
                "mode": "nonconv",
                "trial": 0,
                "agent": {**template["agent"], "model": {"model": model}},
                "user": None,
                "messages": [{"role": "user", "content": scenario.task}, {"role": "assistant", "content": "done"}],
                "steps": [],
            }
        )
    run = copy_run(stored_run, folder)
    write_lines(run, lines)
    set_manifest(run, dataset__source=str(library), dataset__fingerprint=None)
    return run


def harness_with_peak_memory(args: list[str], env: Mapping[str, str] | None = None) -> tuple[Finished, int]:
    """The real CLI in a subprocess, and the peak resident memory of that process in bytes. The CLI is started by a
    small driver: a process started straight from the test worker would count the worker's own peak as its own (the
    kernel carries the high-water mark of the memory an ``exec`` replaces)."""
    measured = harness_measured(*args, env=env)
    return Finished(measured.code, measured.stdout, measured.stderr), measured.peak_kib * 1024
