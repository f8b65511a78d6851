"""What ``harness run`` shows: a header saying what runs, a live progress bar on a terminal (plain periodic
lines otherwise), the summary table with a legend, and a last line explaining the exit status."""

from __future__ import annotations

import signal
import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from harness.cli.errors import EXIT_COST_LIMIT, EXIT_FAILED, EXIT_OK, exit_status_for_signal
from harness.console import markup_text, outside
from harness.episode.config import DEFAULT_MAX_STEPS
from harness.registry import rules_profile
from harness.results.metrics import GroupSummary, cost_text
from harness.run import RunConfig, RunOutcome, RunPlan, RunProgress

_PLAIN_INTERVAL_S = 10.0
_BAR_INTERVAL_S = 0.1
"""Seconds between updates of the live bar (rich redraws it ten times a second)."""
ENVIRONMENT_CAUSES_SHOWN = 10
"""Lines of (environment, cause) printed under the summary; the table counts every environment failure."""


def _status(progress: RunProgress) -> str:
    mean = f"{progress.mean_reward:.3f}" if progress.mean_reward is not None else "–"
    return (
        f"in flight {progress.in_flight} · errors {progress.infra_errors} · "
        f"environment failures {progress.environment_errors} · mean reward {mean} · "
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
        self._last_bar = 0.0
        self._latest: RunProgress | None = None

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
            if self._latest is not None:
                self._show(self._latest)  # the counts of the last update, which may have come between redraws
            self._progress.stop()
        elif self._latest is not None:
            # The last line is printed here, after the runner's final usage refresh, so its totals are final.
            self._print_line(self._latest)
            self._latest = None

    def update(self, progress: RunProgress) -> None:
        self._latest = progress
        now = time.monotonic()
        if self._progress is not None:
            # The bar is redrawn a few times a second: updating it for every episode would be work nobody sees.
            if now - self._last_bar >= _BAR_INTERVAL_S or progress.done >= progress.total:
                self._last_bar = now
                self._show(progress)
            return
        if now - self._last_line >= _PLAIN_INTERVAL_S and progress.done < progress.total:
            self._last_line = now
            self._print_line(progress)

    def _show(self, progress: RunProgress) -> None:
        assert self._progress is not None
        if self._task is None:
            self._task = self._progress.add_task("run", total=progress.total, status="")
        self._progress.update(self._task, completed=progress.done, status=_status(progress))

    def _print_line(self, progress: RunProgress) -> None:
        eta = f" · eta {progress.eta_seconds:.0f}s" if progress.eta_seconds is not None else ""
        self.console.print(f"{progress.done}/{progress.total} episodes · {_status(progress)}{eta}")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _row(group: GroupSummary, label: Text) -> list[str | Text]:
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
        cost_text(group.total_cost_usd, group.unpriced_requests),
        str(group.environment_errors),
        str(group.infra_errors),
    ]


LEGEND = (
    "scored: episodes with a reward (infrastructure errors are not) · state reward: share of a scenario's checks "
    "true at the end · delta reward: share of the checks false at reset that are true at the end · success: "
    "every check true · pass^k: chance that k trials of a task all succeed · steps, tool calls: mean per episode "
    "(steps are agent turns) · tokens, cost $: totals, all roles · env failures: episodes the environment failed "
    "(it could not be loaded, or its process died, stopped or exited on its own), scored as the rules say (harness: "
    "reward 0) and not re-run · infra errors: episodes ended by the infrastructure (a model endpoint, the sandbox, "
    "the harness), not scored"
)
BASELINE_LEGEND = (
    "reference actions (oracle): each scenario's reference actions replayed, the ceiling · do nothing: an agent "
    "that answers without acting, the floor"
)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def default_step_limit(rules: str) -> str:
    """The step limit a run without ``--max-steps`` has under ``rules``: the profile's own, else the modes'."""
    profile = rules_profile(rules)
    if profile.default_max_steps is not None:
        unit = "messages" if profile.step_unit == "message" else "agent turns"
        return f"{profile.default_max_steps} {unit} ({profile.name}'s default)"
    return f"default ({DEFAULT_MAX_STEPS['nonconv']} nonconv, {DEFAULT_MAX_STEPS['conv']} conv)"


def print_header(console: Console, config: RunConfig, plan: RunPlan) -> None:
    """What is about to run, before the first episode."""
    models = " · ".join(f"{markup_text(name)} → {markup_text(where)}" for name, where in plan.models.items())
    models = models or "none (this agent calls no model)"
    environments = markup_text(", ".join(plan.environments[:8]), multiline=False)
    environments += " …" if len(plan.environments) > 8 else ""
    steps = str(plan.max_steps) if plan.max_steps else default_step_limit(plan.rules)
    console.print(
        f"[bold]harness run[/bold] · agent {markup_text(config.agent_kind)} · model {models}"
        + _origin(plan, "user_model", "user model"),
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"  data {markup_text(config.envs or 'the bundled seed library')} · "
        f"{_plural(len(plan.environments), 'environment')} ({environments}) · {_plural(plan.scenarios, 'scenario')} · "
        f"modes {', '.join(plan.modes)}{_origin(plan, 'mode')} · "
        f"rules {markup_text(plan.rules)}{_origin(plan, 'rules')} · "
        f"{_plural(plan.trials, 'trial')} · step limit {steps}{_origin(plan, 'max_steps')}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"  {_plural(plan.episodes, 'episode')} planned, {plan.to_run} to run, {plan.recorded} already recorded · "
        f"{plan.in_flight} at a time · run folder {markup_text(plan.run_dir)}",
        highlight=False,
        soft_wrap=True,
    )


def _origin(plan: RunPlan, setting: str, label: str = "") -> str:
    """Where a setting the user did not give came from (the library's recommendation, the rules)."""
    source = plan.settings_from.get(setting)
    if source is None:
        return ""
    return f" ({label + ' ' if label else ''}from {markup_text(source)})"


def print_summary(console: Console, outcome: RunOutcome, baselines: dict[str, RunOutcome] | None = None) -> None:
    """The summary table (every episode recorded in the folder), the baselines' rows and a legend."""
    summary = outcome.summary
    title = (
        f"Run {summary.run_id}: {summary.overall.episodes} episodes recorded "
        f"({outcome.ran} run now, {outcome.skipped} already done)"
    )
    table = Table(title=outside(title, multiline=False))
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
        "env failures",
        "infra errors",
    ):
        table.add_column(column, justify="left" if column.startswith("env") else "right")
    for group in summary.groups:
        table.add_row(*_row(group, outside(group.label, multiline=False)))
    table.add_section()
    table.add_row(*_row(summary.overall, Text("all", style="bold")))
    if baselines:
        table.add_section()
        for label, baseline in baselines.items():
            table.add_row(*_row(baseline.summary.overall, Text(label, style="dim")))
    console.print(table)
    console.print(f"[dim]{LEGEND}[/dim]", highlight=False, soft_wrap=True)
    if baselines:
        console.print(f"[dim]{BASELINE_LEGEND}[/dim]", highlight=False, soft_wrap=True)
    terminations = ", ".join(f"{k} {v}" for k, v in sorted(summary.overall.terminations.items()))
    console.print(f"terminations: {markup_text(terminations or '–')}", highlight=False)
    if summary.overall.judge_requests:
        console.print(
            f"judge: {summary.overall.judge_requests} requests, cost $ {summary.overall.judge_cost_usd:.4f} (of the "
            "run's cost above)",
            highlight=False,
        )
    for environment, cause, count in outcome.environment_causes[:ENVIRONMENT_CAUSES_SHOWN]:
        console.print(
            f"[yellow]environment failure ×{count} ({markup_text(environment, multiline=False)}):[/yellow] "
            f"{markup_text(cause, multiline=False)}",
            highlight=False,
            soft_wrap=True,
        )
    if len(outcome.environment_causes) > ENVIRONMENT_CAUSES_SHOWN:
        others = len(outcome.environment_causes) - ENVIRONMENT_CAUSES_SHOWN
        console.print(f"[yellow]… and {others} other environment failures[/yellow]")
    for cause, count in outcome.infra_causes[:5]:
        console.print(
            f"[yellow]infra error ×{count}:[/yellow] {markup_text(cause, multiline=False)}",
            highlight=False,
            soft_wrap=True,
        )
    if len(outcome.infra_causes) > 5:
        console.print(f"[yellow]… and {len(outcome.infra_causes) - 5} other causes[/yellow]")
    if summary.versions is not None:
        from leaderboards.terminal import versions_line

        console.print(f"graded by: {markup_text(versions_line(summary.versions))}", highlight=False, soft_wrap=True)
    console.print(f"results: {markup_text(outcome.run_dir)}", highlight=False)


def print_exit_line(
    console: Console, outcome: RunOutcome, baselines: dict[str, RunOutcome], *, resume: str, retry: str
) -> int:
    """The last line: what the exit status means and, when something is left, the command that finishes it."""
    stopped_by = outcome.stopped_by or next((b.stopped_by for b in baselines.values() if b.stopped_by), None)
    if stopped_by is not None:
        name = signal.Signals(stopped_by).name
        status = exit_status_for_signal(stopped_by)
        console.print(
            f"[yellow]exit {status}: stopped by {name} with {outcome.summary.overall.episodes} of "
            f"{outcome.planned} episodes recorded; resume with: {markup_text(resume)}[/yellow]",
            highlight=False,
            soft_wrap=True,
        )
        return status
    if outcome.cost_limit is not None:
        stop = outcome.cost_limit
        console.print(
            f"[yellow]exit {EXIT_COST_LIMIT}: stopped by --cost-limit ${stop.limit_usd:.4f} "
            f"(spent ${stop.spent_usd:.4f}) with {outcome.summary.overall.episodes} of {outcome.planned} episodes "
            f"recorded and {stop.not_started} not started; continue, with a higher --cost-limit, by: "
            f"{markup_text(resume)}[/yellow]",
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_COST_LIMIT
    errors = outcome.summary.overall.infra_errors + sum(b.summary.overall.infra_errors for b in baselines.values())
    missing = outcome.missing
    if errors or missing:
        parts = []
        if errors:
            parts.append(f"{errors} of {outcome.planned} episodes ended in infrastructure errors and were not scored")
        if outcome.unretryable_errors:
            parts.append(
                f"{outcome.unretryable_errors} of them were refused in a way a retry alone cannot fix (see the causes "
                "above)"
            )
        if missing:
            parts.append(f"{missing} planned episodes have no result")
        console.print(
            f"[red]exit 1: {'; '.join(parts)}; re-run them with: {markup_text(retry)}[/red]",
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_FAILED
    extra = sum(b.summary.overall.scored for b in baselines.values())
    failed = outcome.summary.overall.environment_errors
    console.print(
        f"[green]exit 0: all {outcome.planned} episodes were scored"
        + (f" ({failed} failed by their environment)" if failed else "")
        + (f" (and {extra} baseline episodes)" if baselines else "")
        + "[/green]",
        highlight=False,
        soft_wrap=True,
    )
    return EXIT_OK
