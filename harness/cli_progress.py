"""What ``harness run`` shows: a live progress bar on a terminal, plain periodic lines otherwise, and the
summary table at the end."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from harness.metrics import GroupSummary
from harness.runner import RunOutcome, RunProgress

_PLAIN_INTERVAL_S = 10.0


def _status(progress: RunProgress) -> str:
    mean = f"{progress.mean_reward:.3f}" if progress.mean_reward is not None else "–"
    return (
        f"in flight {progress.in_flight} · errors {progress.infra_errors} · mean reward {mean} · "
        f"{progress.requests_per_second:.1f} req/s · {progress.tokens:,} tok · ${progress.cost_usd:.4f}"
    )


class ProgressView:
    """A rich progress bar when attached to a terminal; otherwise a plain line every few seconds."""

    def __init__(self, console: Console):
        self.console = console
        self.live = console.is_terminal
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._last_line = 0.0

    def __enter__(self) -> ProgressView:
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]episodes"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, progress: RunProgress) -> None:
        if self._progress is not None:
            if self._task is None:
                self._task = self._progress.add_task("run", total=progress.total, status="")
            self._progress.update(self._task, completed=progress.done, status=_status(progress))
            return
        now = time.monotonic()
        if now - self._last_line >= _PLAIN_INTERVAL_S or progress.done == progress.total:
            self._last_line = now
            eta = f" · eta {progress.eta_seconds:.0f}s" if progress.eta_seconds is not None else ""
            self.console.print(f"{progress.done}/{progress.total} episodes · {_status(progress)}{eta}")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _row(group: GroupSummary, label: str) -> list[str]:
    pass_k = " ".join(f"{k}:{v:.2f}" for k, v in sorted(group.pass_hat_k.items())) or "–"
    return [
        label,
        str(group.scored),
        _fmt(group.mean_state_reward),
        _fmt(group.mean_delta_reward),
        _fmt(group.success_rate),
        pass_k,
        _fmt(group.mean_steps, 1),
        _fmt(group.mean_tool_calls, 1),
        f"{group.total_tokens:,}",
        f"{group.total_cost_usd:.4f}",
        str(group.infra_errors),
    ]


def print_summary(console: Console, outcome: RunOutcome) -> None:
    summary = outcome.summary
    table = Table(title=f"Run {summary.run_id}  ({outcome.ran} run now, {outcome.skipped} already done)")
    for column in (
        "environment / mode",
        "scored",
        "state reward",
        "delta reward",
        "success",
        "pass^k",
        "steps",
        "tool calls",
        "tokens",
        "cost $",
        "infra errors",
    ):
        table.add_column(column, justify="left" if column.startswith("env") else "right")
    for group in summary.groups:
        table.add_row(*_row(group, group.label))
    table.add_section()
    table.add_row(*_row(summary.overall, "[bold]all[/bold]"))
    console.print(table)
    terminations = ", ".join(f"{k} {v}" for k, v in sorted(summary.overall.terminations.items()))
    console.print(f"terminations: {terminations or '–'}")
    if summary.overall.infra_errors:
        console.print(
            f"[yellow]{summary.overall.infra_errors} episodes ended in infrastructure errors and are not in the "
            f"averages; re-run them with --resume --retry-errors --out {outcome.run_dir}[/yellow]"
        )
    console.print(f"results: {outcome.run_dir}")
