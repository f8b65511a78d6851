"""A run folder is hostile input: every command that reads one (``show``, ``show --diff``, ``rescore``, each
``export``, ``leaderboard build``), through the real command line, on a run made against the mock model and then
tampered with. Each test shows the harm did not happen: a symlinked file's target was not read (its marker is in no
output and no written file), an over-budget line was not decoded (the command's peak memory stays near that of the
good run), and no export wrote outside its ``--out``."""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

import orjson
import pytest

from harness.files import ReadBudget
from harness.results.metrics import read_results
from harness.results.store import read_records
from harness.schema import Trajectory
from tests.support.cli_process import harness
from tests.support.hostile_runs import (
    SEED,
    acebench_run,
    bfcl_library,
    copy_run,
    edit_scenarios,
    files_under,
    harness_with_peak_memory,
    import_acebench,
    read_lines,
    write_lines,
)
from tests.support.stored_runs import mock_model_run

MARKER = "MARKER-4f1c9a-not-to-be-read"


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory) -> Path:
    return mock_model_run(tmp_path_factory.mktemp("stored"), ["banking-001"], trials=1)


def every_command(run: Path, good: Path, out: Path) -> dict[str, list[str]]:
    """Each command that reads a run folder, reading ``run`` (``good`` is the other side of a comparison)."""
    return {
        "show": ["show", str(run)],
        "show --episode": ["show", str(run), "--episode", "0"],
        "show --diff OLD": ["show", "--diff", str(run), str(good)],
        "show --diff NEW": ["show", "--diff", str(good), str(run)],
        "rescore": ["rescore", str(run), "--envs", str(SEED), "--out", str(out / "rescored")],
        "export atif": ["export", "atif", str(run), "--out", str(out / "atif")],
        "export leaderboard-json": ["export", "leaderboard-json", str(run), "--out", str(out / "submission.json")],
        "export tau2": ["export", "tau2", str(run), "--out", str(out / "tau2.json")],
        "export taubench": ["export", "taubench", str(run), "--out", str(out / "taubench.json")],
        "export acebench": ["export", "acebench", str(run), "--out", str(out / "acebench")],
        "export bfcl": ["export", "bfcl", str(run), "--out", str(out / "bfcl")],
        "leaderboard build": ["leaderboard", "build", str(run), "--out", str(out / "board")],
        "leaderboard build of two": ["leaderboard", "build", str(good), str(run), "--out", str(out / "board2")],
    }


COMMANDS = list(every_command(Path("r"), Path("g"), Path("o")))


def marked_copy(stored_run: Path, target: Path, name: str) -> Path:
    """A file like the run's ``name`` (a results file or a manifest), carrying the marker where commands show it."""
    if name == "results.jsonl":
        lines = read_lines(stored_run)
        for line in lines:
            line["messages"][-1]["content"] = MARKER
            line["agent"]["model"]["model"] = MARKER
        target.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    else:
        manifest = orjson.loads((stored_run / name).read_bytes())
        manifest["run_id"] = MARKER
        manifest["config"]["model"] = MARKER
        target.write_bytes(orjson.dumps(manifest))
    return target


@pytest.mark.parametrize("name", ["results.jsonl", "manifest.json"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_symlinked_run_file_is_refused_naming_it_and_never_read(stored_run, tmp_path, name, command):
    secret = marked_copy(stored_run, tmp_path / "elsewhere.json", name)
    run = copy_run(stored_run, tmp_path / "run")
    (run / name).unlink()
    (run / name).symlink_to(secret)
    before = files_under(tmp_path)
    out = tmp_path / "out"
    finished = harness(every_command(run, stored_run, out)[command])
    assert finished.code == 2, finished.stdout + finished.stderr
    assert len(finished.stderr_lines) == 1, finished.stderr
    assert str(run / name) in finished.stderr and "symbolic link" in finished.stderr
    assert MARKER not in finished.stdout + finished.stderr
    assert not any(MARKER.encode() in data for data in files_under(out).values())
    assert files_under(tmp_path) == before, "nothing was written"


def test_the_results_file_and_the_folder_must_be_regular(stored_run, tmp_path):
    """A symlinked folder on the way to the run folder's files is the user's own choice and is followed; a results
    file that is a FIFO (which would block a reader forever) is refused."""
    linked = tmp_path / "linked"
    linked.symlink_to(stored_run, target_is_directory=True)
    assert harness(["show", str(linked)]).code == 0
    run = copy_run(stored_run, tmp_path / "fifo-run")
    (run / "results.jsonl").unlink()
    os.mkfifo(run / "results.jsonl")
    finished = harness(["show", str(run)])
    assert finished.code == 2 and "not a regular file" in finished.stderr


def huge_line(values: int) -> bytes:
    """One JSON line of ``values`` empty arrays (three bytes each): gigabytes of Python objects once decoded."""
    return b"[" + b"[]," * (values - 1) + b"[]]\n"


@pytest.fixture(scope="module")
def run_with_a_huge_line(stored_run, tmp_path_factory) -> Path:
    run = copy_run(stored_run, tmp_path_factory.mktemp("huge") / "run")
    first, *rest = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
    with (run / "results.jsonl").open("wb") as results:
        results.write(first)
        results.write(huge_line(34_000_000))  # about 100 MB, over the 20 million values of one line
        results.writelines(rest)
    return run


def test_an_over_budget_line_is_skipped_with_a_warning_and_never_decoded(stored_run, run_with_a_huge_line):
    good, good_peak = harness_with_peak_memory(["show", str(stored_run)])
    assert good.code == 0, good.stderr
    finished, peak = harness_with_peak_memory(["show", str(run_with_a_huge_line)])
    assert finished.code == 0, finished.stderr
    warning = f"{run_with_a_huge_line / 'results.jsonl'}:2: skipping a line that holds more than 20,000,000 JSON"
    assert warning in " ".join(finished.stderr.split()) and "not decoded" in finished.stderr
    assert finished.stdout == good.stdout, "the summary of the two episodes, as without the line"
    # Decoding 34 million arrays takes over 2 GB; the line's chunks are dropped as they are counted.
    assert peak - good_peak < 200 << 20, (peak >> 20, good_peak >> 20)


@pytest.mark.parametrize("command", ["export atif", "leaderboard build", "show --diff NEW"])
def test_other_commands_skip_the_over_budget_line_too(stored_run, run_with_a_huge_line, tmp_path, command):
    finished, peak = harness_with_peak_memory(every_command(run_with_a_huge_line, stored_run, tmp_path)[command])
    assert finished.code == 0, finished.stderr
    assert "results.jsonl:2: skipping a line that holds more than" in " ".join(finished.stderr.split())
    assert peak < 1 << 30, peak >> 20
    if command == "export atif":
        assert len(list((tmp_path / "atif").glob("*.json"))) == 2


def test_a_line_longer_than_the_budget_is_skipped_unread_and_the_next_line_is_read(stored_run, tmp_path, caplog):
    run = copy_run(stored_run, tmp_path / "run")
    first, second = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
    (run / "results.jsonl").write_bytes(first + b'"' + b"x" * 3_000_000 + b'"\n' + second)
    budget = ReadBudget(max_bytes=1 << 40, max_values=1 << 40, max_line_bytes=max(len(first), len(second)) + 1)
    with caplog.at_level(logging.WARNING):
        records = list(read_records(run / "results.jsonl", Trajectory, budget))
    assert [number for number, _ in records] == [1, 3]
    assert "results.jsonl:2: skipping a line that is longer than" in caplog.text
    assert [t.episode_id for t in read_results(run / "results.jsonl")] == [t.episode_id for _, t in records]


ESCAPES = ["../../escape", "../../../../../escape"]


def test_names_from_records_never_lead_outside_out(stored_run, tmp_path):
    """Model names and scenario ids like ``../../escape`` or an absolute path: every export and the leaderboard
    write only under their --out (or, for a one-file export, the file --out names)."""
    absolute = tmp_path / "absolute-escape"

    def hostile(line: dict) -> None:
        conv = line["mode"] == "conv"
        line["agent"]["model"]["model"] = ESCAPES[0] if conv else str(absolute)
        line["scenario_id"] = str(absolute) if conv else ESCAPES[1]

    work = tmp_path / "work" / "deep" / "er"
    run = copy_run(stored_run, work / "run", hostile)
    outs = work / "outs"
    before = files_under(tmp_path)
    for name, command in every_command(run, stored_run, outs).items():
        if name.startswith("show") or name == "rescore":
            continue
        harness(command)
    written = set(files_under(tmp_path)) - set(before)
    assert written and all(outs in path.parents for path in written), sorted(written)
    assert not any(path.name.startswith("escape") or "escape" in path.parent.name for path in written)
    assert not absolute.exists()


@pytest.fixture(scope="module")
def acebench_library(tmp_path_factory) -> Path:
    return import_acebench(tmp_path_factory.mktemp("acebench"))


def test_acebench_and_bfcl_exports_make_record_names_safe(stored_run, acebench_library, tmp_path):
    """A library whose categories and languages climb out (``../../escape``, an absolute path) and a run whose model
    is ``../../escape``: both exports write their files inside --out, under safe names."""
    absolute = tmp_path / "absolute"
    library = tmp_path / "acebench"
    shutil.copytree(acebench_library, library)

    def hostile(record: dict) -> None:
        record["provenance"]["details"].update(category="../../escape", language=str(absolute))

    edit_scenarios(library, hostile)
    ace_run = acebench_run(stored_run, library, tmp_path / "run-ace", model="../../escape")
    bfcl = bfcl_library(tmp_path / "bfcl", {"category": "../../../escape"})
    nonconv = next(line for line in read_lines(stored_run) if line["mode"] == "nonconv")
    bfcl_run = copy_run(stored_run, tmp_path / "run-bfcl")
    write_lines(bfcl_run, [{**nonconv, "scenario_id": "bfcl-1"}])
    out = tmp_path / "a" / "b" / "out"
    before = files_under(tmp_path)
    ace = harness(["export", "acebench", str(ace_run), "--out", str(out / "ace")])
    assert ace.code == 0, ace.stderr
    exported = harness(["export", "bfcl", str(bfcl_run), "--envs", str(bfcl), "--out", str(out / "bf")])
    assert exported.code == 0, exported.stderr
    written = sorted(set(files_under(tmp_path)) - set(before))
    relative = [path.relative_to(out).as_posix() for path in written]
    assert len(relative) == 2 and all(out in path.parents for path in written), written
    [ace_file] = [path for path in relative if path.startswith("ace/")]
    parts = ace_file.split("/")
    assert parts[:2] == ["ace", "result_all"] and parts[3] == "escape" and len(parts) == 5, parts
    assert re.fullmatch(r"result_[A-Za-z0-9][A-Za-z0-9._-]*-[0-9a-f]{8}", parts[2]), parts[2]
    assert parts[4].startswith("data_agent_escape-") and parts[4].endswith("_result.json")
    assert len((out / ace_file).read_text().splitlines()) == 3
    [bfcl_file] = [path for path in relative if path.startswith("bf/")]
    assert bfcl_file.startswith("bf/BFCL_v4_escape-") and bfcl_file.count("/") == 1
    assert not absolute.exists() and not (tmp_path / "a" / "escape").exists()


def test_a_symlink_inside_out_does_not_carry_a_file_outside(stored_run, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.json").write_text("untouched")
    episode = read_lines(stored_run)[0]["episode_id"]
    out = tmp_path / "atif"
    out.mkdir()
    (out / f"{episode}.json").symlink_to(outside / "keep.json")
    refused = harness(["export", "atif", str(stored_run), "--out", str(out)])
    assert refused.code == 2 and "outside the output folder" in refused.stderr, refused.stderr
    assert (outside / "keep.json").read_text() == "untouched"

    board = tmp_path / "board"
    board.mkdir()
    (board / "episodes").symlink_to(outside, target_is_directory=True)
    built = harness(["leaderboard", "build", str(stored_run), "--out", str(board)])
    assert built.code == 2 and "outside the output folder" in built.stderr, built.stderr
    assert sorted(path.name for path in outside.iterdir()) == ["keep.json"]
    assert sorted(path.name for path in board.iterdir()) == ["episodes"], "refused before anything was written"
