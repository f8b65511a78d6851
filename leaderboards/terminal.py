"""Rich renderables for a terminal view of a run summary and of one trajectory.

Model text is shown as plain ``Text`` (never parsed as rich markup), cleaned by the command line's output layer
(:func:`harness.console.terminal_text`: escape sequences and control characters removed), so nothing a model
wrote can restyle or take over the terminal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from harness.console import terminal_text
from harness.records.versions import VersionsSummary
from harness.results.metrics import (
    GroupSummary,
    StoredRun,
    assistant_turns,
    episode_cost,
    episode_tokens,
    open_run,
)
from harness.results.store import StoredResults
from harness.results.tally import SummaryTally
from harness.schema import DiffEntry, Scenario, Trajectory
from leaderboards.aggregate import LeaderboardTable, dataset_label
from leaderboards.judge_view import judge_views
from leaderboards.page import fmt_cost, fmt_float, fmt_percent, fmt_tokens, to_json_text
from leaderboards.verdicts import closed_gates

MAX_TEXT_CHARS = 2000
FAILED_EPISODES_LISTED = 10


def clean(value: object, limit: int = MAX_TEXT_CHARS) -> str:
    """Outside text safe for a terminal, cut to ``limit`` characters."""
    return terminal_text(value, limit=limit)


def plain(value: object, style: str = "", limit: int = MAX_TEXT_CHARS) -> Text:
    return Text(clean(value, limit), style=style)


WIDE_TERMINAL = 150
"""From this width on the run summary is one table; narrower terminals get one table per group of columns."""


def _summary_sections(max_k: int) -> list[tuple[str, list[str]]]:
    sections = [("Results", ["episodes", "scored", "env fail", "infra err", "state", "delta", "success"])]
    if max_k:
        sections.append(("pass^k", [f"pass^{k}" for k in range(1, max_k + 1)]))
    sections.append(("Effort", ["steps", "tool calls", "tokens/ep", "cost/ep", "cost"]))
    return sections


def _summary_values(summary: GroupSummary, max_k: int) -> dict[str, str]:
    values = {
        "episodes": str(summary.episodes),
        "scored": str(summary.scored),
        "env fail": str(summary.environment_errors),
        "infra err": str(summary.infra_errors),
        "state": fmt_float(summary.mean_state_reward),
        "delta": fmt_float(summary.mean_delta_reward),
        "success": fmt_percent(summary.success_rate),
        "steps": fmt_float(summary.mean_steps, 1),
        "tool calls": fmt_float(summary.mean_tool_calls, 1),
        "tokens/ep": fmt_tokens(summary.mean_tokens),
        "cost/ep": fmt_cost(summary.mean_cost_usd),
        "cost": "unpriced"
        if summary.unpriced_requests and not summary.total_cost_usd
        else fmt_cost(summary.total_cost_usd),
    }
    values.update({f"pass^{k}": fmt_float(summary.pass_hat_k.get(k)) for k in range(1, max_k + 1)})
    return values


SHORT_HEADERS = {
    "episodes": "eps",
    "env fail": "env",
    "infra err": "infra",
    "tool calls": "calls",
    "tokens/ep": "tok/ep",
}


def summary_table(
    groups: Sequence[GroupSummary],
    overall: GroupSummary,
    title: str,
    columns: Sequence[str] | None = None,
    compact: bool = False,
) -> Table:
    """Groups as rows; ``columns`` picks the metrics (default: all of them). ``compact`` saves width: no
    vertical rules, short headers, and group names that wrap rather than push numbers off the screen."""
    max_k = max((max(g.pass_hat_k, default=0) for g in [*groups, overall]), default=0)
    key_names = list(groups[0].key) if groups else []
    wanted = list(columns) if columns is not None else [c for _, cs in _summary_sections(max_k) for c in cs]
    if compact:
        table = Table(title=title, show_lines=False, box=box.SIMPLE_HEAD, pad_edge=False)
    else:
        table = Table(title=title, show_lines=False)
    for name in key_names:
        longest = max((len(clean(g.key[name], 60)) for g in groups), default=0)
        if compact:
            table.add_column(name.removesuffix("_id"), overflow="fold")
        else:
            table.add_column(name, no_wrap=True, min_width=min(max(longest, len(name)), 60))
    for name in wanted:
        table.add_column(SHORT_HEADERS.get(name, name) if compact else name, justify="right", no_wrap=True)

    def cells(summary: GroupSummary) -> list[Text]:
        values = _summary_values(summary, max_k)
        return [plain(values[name]) for name in wanted]

    for group in groups:
        error_style = "red" if group.infra_errors else "yellow" if group.environment_errors else ""
        table.add_row(*[plain(group.key[name]) for name in key_names], *cells(group), style=error_style)
    table.add_section()
    table.add_row(*[plain("all" if i == 0 else "") for i in range(len(key_names))], *cells(overall), style="bold")
    return table


def summary_tables(
    groups: Sequence[GroupSummary], overall: GroupSummary, title: str, width: int | None = None
) -> list[Table]:
    """The summary as one table on a wide terminal, or one table per group of columns (results, pass^k,
    effort) so that nothing is squeezed to "…" on a narrow one (80 columns)."""
    if width is None or width >= WIDE_TERMINAL:
        return [summary_table(groups, overall, title)]
    max_k = max((max(g.pass_hat_k, default=0) for g in [*groups, overall]), default=0)
    return [
        summary_table(
            groups, overall, f"{title}: {section.lower() if section != 'pass^k' else section}", columns, compact=True
        )
        for section, columns in _summary_sections(max_k)
    ]


def leaderboard_view(table: LeaderboardTable) -> Table:
    """One leaderboard table for a terminal: the headline columns (per-domain scores are in the reports)."""
    view = Table(title=plain(f"Leaderboard on {dataset_label(table.dataset)}", limit=200))
    headers = ["#", "model", "settings", "reward", "delta", "success"]
    headers += [f"pass^{k}" for k in range(1, table.max_k + 1)]
    headers += [mode for mode in table.modes]
    headers += ["tokens/ep", "cost/ep", "scored", "infra err"]
    for header in headers:
        view.add_column(header, justify="left" if header in {"model", "settings"} else "right", no_wrap=True)
    for row in table.rows:
        cells = [str(row.rank), row.model, row.settings_id]
        cells += [fmt_float(row.mean_state_reward), fmt_float(row.mean_delta_reward), fmt_percent(row.success_rate)]
        cells += [fmt_float(row.pass_hat_k.get(k)) for k in range(1, table.max_k + 1)]
        cells += [fmt_float(row.per_mode.get(mode)) for mode in table.modes]
        cells += [fmt_tokens(row.mean_tokens), fmt_cost(row.mean_cost_usd), f"{row.scored}/{row.episodes}"]
        cells.append(str(row.infra_errors))
        view.add_row(*[plain(cell, limit=80) for cell in cells])
    return view


def versions_line(versions: VersionsSummary) -> str:
    """Which checks, environment code, rules and package the numbers came from (short hashes)."""
    if versions.checks is None:
        return "versions not recorded (a run made before they were)"
    parts = [
        f"checks {versions.checks[:8]}",
        "environments "
        + ", ".join(v[:8] for v in versions.environments[:4])
        + (" …" if len(versions.environments) > 4 else ""),
        "rules " + ", ".join(versions.rules),
        "package " + ", ".join(versions.packages),
    ]
    if versions.unversioned_episodes:
        parts.append(f"{versions.unversioned_episodes} episodes without versions")
    return " · ".join(parts)


def is_failed(trajectory: Trajectory) -> bool:
    """An infrastructure or environment error, or a scored episode that did not succeed."""
    return (
        trajectory.infra_error
        or trajectory.environment_error
        or (trajectory.reward is not None and not trajectory.reward.success)
    )


class RunViewTally:
    """What :func:`run_view` shows of a run's records, counted as they are read (a
    :class:`harness.results.store.RecordListener`): the summary by environment and mode and by model, environment and
    mode, the models, and how many episodes failed."""

    def __init__(self) -> None:
        self.by_environment = SummaryTally()
        self.by_model = SummaryTally(("model", "environment_id", "mode"))
        self.models: Counter[str] = Counter()
        self.failed = 0

    def add(self, trajectory: Trajectory, position: int = 0) -> None:
        self._count(trajectory, 1)

    def remove(self, trajectory: Trajectory, position: int = 0) -> None:
        self._count(trajectory, -1)

    def _count(self, trajectory: Trajectory, times: int) -> None:
        self.by_environment.count(trajectory, times)
        self.by_model.count(trajectory, times)
        model = trajectory.agent.model.model
        self.models[model] += times
        if not self.models[model]:
            del self.models[model]
        self.failed += times * is_failed(trajectory)


def open_run_view(run_dir: Path | str) -> tuple[StoredRun, RunViewTally]:
    """A run folder opened for :func:`run_view`: its records counted as they are read (once)."""
    tally = RunViewTally()
    return open_run(run_dir, tally), tally


def run_view(run: StoredRun, tally: RunViewTally, width: int | None = None) -> list[RenderableType]:
    """The summary of a run (counted by ``tally`` as it was opened, see :func:`open_run_view`): what it ran on, one
    line per environment and mode, and its failed episodes (the first few are read again). ``width`` is the
    terminal's: below ``WIDE_TERMINAL`` the summary is split so every column stays legible."""
    manifest = run.manifest
    dataset = manifest.dataset
    models = sorted(tally.models)
    header = Table.grid(padding=(0, 2))
    header.add_row(Text("run", style="bold"), plain(manifest.run_id))
    header.add_row(Text("created", style="bold"), plain(manifest.created_at.isoformat(timespec="seconds")))
    header.add_row(
        Text("environment set", style="bold"),
        plain(f"{dataset.source} @ {dataset.revision or 'no revision'} ({dataset.fingerprint or '–'})"),
    )
    header.add_row(Text("models", style="bold"), plain(", ".join(models) or "–"))
    header.add_row(
        Text("episodes", style="bold"),
        plain(f"{len(run.results)} recorded of {manifest.episodes_planned} planned"),
    )
    overall = tally.by_environment.overall.summary()
    terminations = ", ".join(f"{reason} {count}" for reason, count in overall.terminations.items())
    header.add_row(Text("terminations", style="bold"), plain(terminations or "–"))
    header.add_row(
        Text("graded by", style="bold"), plain(versions_line(tally.by_environment.overall.versions.summary()))
    )
    views: list[RenderableType] = [Panel(header, title="Run", expand=False)]
    if len(models) > 1:
        groups = tally.by_model.group_summaries()
        views.extend(summary_tables(groups, overall, "By model, environment and mode", width))
    else:
        views.extend(summary_tables(tally.by_environment.group_summaries(), overall, "By environment and mode", width))
    if tally.failed:
        listing = Table(title=f"Failed episodes (first {min(tally.failed, FAILED_EPISODES_LISTED)} of {tally.failed})")
        for name in ("episode", "scenario", "mode", "trial", "termination", "reward"):
            listing.add_column(name)
        for trajectory in first_failed(run.results, FAILED_EPISODES_LISTED):
            reward = trajectory.reward.state_reward if trajectory.reward is not None else None
            listing.add_row(
                plain(trajectory.episode_id),
                plain(trajectory.scenario_id),
                plain(trajectory.mode),
                plain(trajectory.trial),
                plain(trajectory.termination.value),
                plain(fmt_float(reward)),
            )
        views.append(listing)
        views.append(Text("Show one with: harness show RUN_DIR --episode EPISODE_ID", style="dim"))
    return views


def first_failed(results: StoredResults, count: int) -> list[Trajectory]:
    """The first ``count`` failed episodes, in the run's order (reading no further than the last of them)."""
    found: list[Trajectory] = []
    for trajectory in results:
        if is_failed(trajectory):
            found.append(trajectory)
            if len(found) == count:
                break
    return found


def find_episode(results: StoredResults, episode_id: str) -> Trajectory:
    """The trajectory whose id is ``episode_id`` or, failing that, the only one it is a prefix of (found by id,
    then read)."""
    position = results.position(episode_id)
    if position is None:
        matches = [known for known in results.ids() if known.startswith(episode_id)]
        if not matches:
            raise KeyError(f"no episode {episode_id!r} in this run")
        if len(matches) > 1:
            raise KeyError(f"{len(matches)} episodes start with {episode_id!r}; give more of the id")
        position = results.position(matches[0])
    trajectory = results.at(position) if position is not None else None
    if trajectory is None:
        raise KeyError(f"episode {episode_id!r} no longer reads back from this run")
    return trajectory


def _diff_lines(entries: Sequence[DiffEntry]) -> Text:
    text = Text()
    for entry in entries:
        path = ".".join(str(p) for p in entry.path)
        text.append(f"  {entry.op} ", style="magenta")
        text.append(clean(path, 200))
        before, after = to_json_text(entry.before, 200), to_json_text(entry.after, 200)
        text.append(f": {clean(before, 200)} → {clean(after, 200)}\n")
    text.rstrip()
    return text


def trajectory_view(trajectory: Trajectory, scenario: Scenario | None = None) -> list[RenderableType]:
    """One trajectory: outcome, task (given its scenario), checks, then the conversation with tool calls,
    observations and diffs."""
    reward = trajectory.reward
    overview = Table.grid(padding=(0, 2))
    rows: list[tuple[str, str]] = [
        ("episode", trajectory.episode_id),
        ("scenario", f"{trajectory.scenario_id} on {trajectory.environment_id}"),
        ("mode / trial", f"{trajectory.mode} / {trajectory.trial}"),
        ("agent", f"{trajectory.agent.model.model} ({trajectory.agent.kind})"),
        ("termination", trajectory.termination.value),
    ]
    if trajectory.termination_detail:
        rows[-1] = ("termination", f"{trajectory.termination.value}: {trajectory.termination_detail}")
    if trajectory.failure is not None:
        rows.append(("at fault", trajectory.failure.at_fault.value))
    if reward is None:
        rows.append(("reward", "not scored"))
    else:
        rows.append(
            (
                "reward",
                f"{'success' if reward.success else 'failure'}, state {fmt_float(reward.state_reward)} "
                f"({reward.checks_passed}/{reward.checks_total}), delta {fmt_float(reward.delta_reward)}",
            )
        )
    rows.append(
        (
            "effort",
            f"assistant turns {assistant_turns(trajectory)}, tool calls {trajectory.num_tool_calls}, "
            f"tokens {fmt_tokens(episode_tokens(trajectory))}, cost {fmt_cost(episode_cost(trajectory))}",
        )
    )
    for name, value in rows:
        overview.add_row(Text(name, style="bold"), plain(value))
    views: list[RenderableType] = [Panel(overview, title="Episode", expand=False)]
    if scenario is not None:
        views.append(Panel(plain(scenario.task), title="Task", title_align="left"))

    if trajectory.check_results:
        checks_of_scenario = scenario.checks if scenario else []
        statements = {check.id: check.statement for check in checks_of_scenario}
        statements.update({check.id: check.description for check in scenario.judged_checks} if scenario else {})
        checks = Table(title="Checks")
        for name in ("check", "what it verifies", "result", "held at reset", "returned / error"):
            checks.add_column(name)
        closed = closed_gates(trajectory.check_results, checks_of_scenario)
        for result in sorted(trajectory.check_results, key=lambda r: r.passed):
            at_reset = "–" if result.passed_at_reset is None else ("yes" if result.passed_at_reset else "no")
            if result.passed:
                verdict = Text("passed", style="green")
            elif result.check_id in closed:
                verdict = Text(f"not evaluated ({closed[result.check_id]} does not hold)", style="dim")
            else:
                verdict = Text("FAILED", style="bold red")
            checks.add_row(
                plain(result.check_id),
                plain(statements.get(result.check_id, ""), limit=300),
                verdict,
                plain(at_reset),
                plain(result.error or result.value or "", limit=300),
            )
        views.append(checks)

    if trajectory.judge is not None:
        views.extend(judge_views(trajectory.judge, scenario))

    steps = {step.call.id: step for step in trajectory.steps}
    role_styles = {"system": "dim", "user": "cyan", "assistant": "green", "tool": "magenta"}
    for message in trajectory.messages:
        role = str(message.get("role", "?"))
        body = Text()
        content = message.get("content")
        if content:
            body.append(clean(content if isinstance(content, str) else to_json_text(content)))
        for call in message.get("tool_calls") or []:
            function = _function_of(call)
            body.append("\n→ " if body else "→ ", style="bold")
            body.append(clean(function.get("name", ""), 200), style="bold")
            body.append(" " + clean(function.get("arguments", ""), 1000))
        title = role
        step = steps.get(str(message.get("tool_call_id", ""))) if role == "tool" else None
        if step is not None:
            kind = step.observation.kind.value
            title = f"tool {clean(step.call.name, 100)} [{kind}]"
            if step.state_diff:
                body.append("\nstate changes:\n", style="italic")
                body.append_text(_diff_lines(step.state_diff))
        body.rstrip()
        views.append(Panel(body, title=Text(title), title_align="left", border_style=role_styles.get(role, "")))

    if trajectory.final_state_diff:
        views.append(Panel(_diff_lines(trajectory.final_state_diff), title="Final state diff", title_align="left"))
    if trajectory.errors:
        views.append(Panel(plain("\n".join(trajectory.errors)), title="Errors", border_style="red"))
    return [Group(*views)]


def _function_of(call: Any) -> dict[str, Any]:
    """The ``function`` part of an OpenAI tool call, or {} when the call is malformed."""
    function = call.get("function") if isinstance(call, dict) else None
    return function if isinstance(function, dict) else {}
