"""Reading a run folder holds one record at a time: ``show``'s summary and failed list, ``show --diff``, the ATIF and
leaderboard-json exports, the SFT export and ``leaderboard build`` with every episode page, over a run of 600
records of 50 kB each (30 MB of messages; holding them as records takes more). The peak of what Python allocated
while each ran (tracemalloc, which counts every allocation the same way on every run) stays a third of that, once
the modules a command imports on first use (matplotlib for the report's plots) are imported."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.results.atif import write_atif
from harness.results.metrics import open_results, open_run
from harness.results.sft import export
from harness.schema import TerminationReason, Trajectory
from leaderboards import build_leaderboard, write_leaderboard
from leaderboards.run_diff import diff_runs
from leaderboards.submission import export_submission
from leaderboards.terminal import open_run_view, run_view
from tests.support.leaderboard_runs import REV1, make_trajectory, write_run

RECORDS = 600
TEXT = 50_000
BOUND = 10_000_000
"""Bytes: a third of the messages alone."""


def large_record(index: int) -> Trajectory:
    record = make_trajectory(
        f"large-{index:04d}",
        scenario_id=f"s{index % 7}",
        environment_id=f"env_{index % 3}",
        trial=index // 7,
        state_reward=[1.0, 0.5, 0.0][index % 3],
        termination=TerminationReason.INFRA_ERROR if index % 50 == 0 else TerminationReason.AGENT_DONE,
    )
    text = f"{index} " + "y" * TEXT
    return record.model_copy(update={"messages": [*record.messages, {"role": "assistant", "content": text}]})


@pytest.fixture(scope="module")
def large_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("large")
    # A first small leaderboard imports what the report draws with, so only the large one's own memory is measured.
    small = write_run(folder / "small", [large_record(index) for index in range(5)], dataset=REV1)
    write_leaderboard(build_leaderboard([small]), folder / "warm")
    return write_run(folder / "run", [large_record(index) for index in range(RECORDS)], dataset=REV1)


def peak_of(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def show(run_dir: Path) -> None:
    run, tally = open_run_view(run_dir)
    run_view(run, tally, width=200)


def test_show_and_diff_hold_one_record_at_a_time(large_run: Path) -> None:
    assert peak_of(lambda: show(large_run)) < BOUND
    assert peak_of(lambda: diff_runs(large_run, large_run)) < BOUND


def test_exports_hold_one_record_at_a_time(large_run: Path, tmp_path: Path) -> None:
    assert peak_of(lambda: write_atif(open_run(large_run).results, tmp_path / "atif")) < BOUND
    assert len(list((tmp_path / "atif").iterdir())) == RECORDS
    assert peak_of(lambda: export_submission(large_run, tmp_path / "submission.json")) < BOUND
    counted = peak_of(
        lambda: export(open_results(large_run / "results.jsonl"), tmp_path / "sft", split=True, count_tokens=len)
    )
    assert counted < BOUND
    assert (tmp_path / "sft" / "messages.jsonl").read_bytes().count(b"\n") == 7  # one per scenario: the same calls


def test_a_leaderboard_with_every_episode_page_holds_one_record_at_a_time(large_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "board"
    assert peak_of(lambda: write_leaderboard(build_leaderboard([large_run]), out)) < BOUND
    assert len(list((out / "episodes").iterdir())) == RECORDS
    assert (out / "index.html").read_text().count("<tr data-environment") == RECORDS


def test_no_command_reads_a_run_folder_into_a_list() -> None:
    """``read_results`` and ``load_run`` hold every record: only ``publish`` (which uploads them as one table) may
    call them outside the module that defines them."""
    root = Path(__file__).resolve().parents[2]
    callers = sorted(
        path.relative_to(root).as_posix()
        for folder in ("harness", "leaderboards", "agents", "synth")
        for path in (root / folder).rglob("*.py")
        if any(f"{name}(" in path.read_text() for name in ("read_results", "load_run"))
    )
    assert callers == ["harness/hub/sources.py", "harness/results/metrics.py"]
