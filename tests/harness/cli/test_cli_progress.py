"""The live progress bar of ``harness run``: updates come faster than it redraws, and it still ends on the last."""

from __future__ import annotations

import io

from rich.console import Console

from harness.cli.progress import ProgressView
from harness.run.progress import RunProgress


def test_the_live_bar_ends_showing_the_last_update_after_a_burst() -> None:
    output = io.StringIO()
    console = Console(file=output, force_terminal=True, width=200)
    progress = RunProgress(total=500)
    with ProgressView(console) as view:
        assert view.live
        for done in range(1, 438):
            progress.done = done
            view.update(progress)
    # The run stopped early (437 of 500): the bar's last frame shows exactly that, not a count from a redraw ago.
    assert "437/500" in output.getvalue()


def test_the_plain_view_prints_the_final_counts_once_at_the_end() -> None:
    output = io.StringIO()
    console = Console(file=output, force_terminal=False, width=200)
    progress = RunProgress(total=3)
    with ProgressView(console) as view:
        for done in range(1, 4):
            progress.done = done
            view.update(progress)
    lines = [line for line in output.getvalue().splitlines() if line.startswith("3/3 episodes")]
    assert len(lines) == 1
