"""Every command that reads a run folder streams it now, and gives byte for byte what it gave while it held every
record in memory: ``show`` (at 200 and 80 columns, of one model and of two, one episode), ``show --diff``,
``rescore``, every export (ATIF, leaderboard JSON, τ², τ-bench, ACEBench, BFCL), ``leaderboard build`` (one set,
several sets split, a run and its re-scoring), the SFT export and the summaries, on stored runs with a retried
episode, failures of each kind, a damaged line and a torn last line (``tests/support/held_outputs.py``). The
expected digests were made by the last checkout that held the records, except ``export acebench``'s printed text,
which has since gained each file's count of tasks, and ``export bfcl``'s, whose lines now name each file's BFCL
release (their files are unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness.benchmarks.test_tau2_import import tau2_wheel  # noqa: F401  (fixture)
from tests.support.cli_process import REPO
from tests.support.held_outputs import EXPECTED, differences, outputs, prepare


def test_every_reading_command_gives_what_it_gave_while_holding_every_record(
    tmp_path: Path,
    tau2_wheel: Path,  # noqa: F811
) -> None:
    prepare(tmp_path, tau2_wheel)
    found = outputs(REPO, tmp_path)
    expected = json.loads(EXPECTED.read_text())
    assert differences(expected, found) == []
    assert all(result["exit"] == 0 for result in found.values()), {k: v["exit"] for k, v in found.items()}
    # Each command wrote what it is meant to write (the digests compare them).
    assert len(found["leaderboard build"]["files"]) == 21 and len(found["export atif"]["files"]) == 14
