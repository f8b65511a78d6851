"""The leaderboard as one self-contained HTML file: tables, plots as inline PNG, and failure lists."""

from __future__ import annotations

import base64
from urllib.parse import quote

from leaderboards.aggregate import Leaderboard, LeaderboardTable, RunFailures, dataset_label
from leaderboards.page import episode_file_name, esc, fmt_float, fmt_percent, html_page
from leaderboards.plots import Plot, report_plots
from leaderboards.report_md import ACCOUNTING_NOTE, row_cells, table_columns

EPISODES_FOLDER = "episodes"

_TEXT_COLUMNS = {"Model", "Settings"}
_CELL_CLASSES = {"Model": "model", "Settings": ""}


def episode_href(episode_id: str) -> str:
    return f"{EPISODES_FOLDER}/{quote(episode_file_name(episode_id))}"


def _table_html(table: LeaderboardTable) -> str:
    columns = table_columns(table)
    header = "".join(f'<th class="{"" if column in _TEXT_COLUMNS else "num"}">{esc(column)}</th>' for column in columns)
    body = []
    for row in table.rows:
        cells = row_cells(table, row)
        body.append(
            "<tr>"
            + "".join(
                f'<td class="{_CELL_CLASSES.get(column, "num")}">{esc(cell)}</td>'
                for column, cell in zip(columns, cells, strict=True)
            )
            + "</tr>"
        )
    return f'<table class="leaderboard"><thead><tr>{header}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _plot_html(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    return (
        f'<figure><img alt="{esc(plot.title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{esc(plot.caption)}</figcaption></figure>"
    )


def _failures_html(failures: RunFailures) -> str:
    title = f"Run {failures.run_id} ({', '.join(failures.models)})"
    if not failures.environments:
        return f'<h3>{esc(title)}</h3><p class="meta">No scored episode failed.</p>'
    header = (
        '<tr><th>environment</th><th>domain</th><th class="num">success</th><th class="num">mean reward</th>'
        '<th>scenario (mode)</th><th class="num">failed trials</th><th>failed checks (example)</th>'
        "<th>example</th></tr>"
    )
    rows = []
    for environment in failures.environments:
        span = max(1, len(environment.scenarios))
        first = True
        for scenario in environment.scenarios:
            environment_cells = ""
            if first:
                environment_cells = (
                    f'<td rowspan="{span}">{esc(environment.environment_id)}</td>'
                    f'<td rowspan="{span}">{esc(environment.domain)}</td>'
                    f'<td rowspan="{span}" class="num">{esc(fmt_percent(environment.success_rate))} of '
                    f"{environment.scored}</td>"
                    f'<td rowspan="{span}" class="num">{esc(fmt_float(environment.mean_state_reward))}</td>'
                )
                first = False
            rows.append(
                f"<tr>{environment_cells}<td>{esc(scenario.scenario_id)} ({esc(scenario.mode)})</td>"
                f'<td class="num">{scenario.failures}/{scenario.scored}</td>'
                f"<td>{esc(', '.join(scenario.failed_checks) or '–')}</td>"
                f'<td><a href="{esc(episode_href(scenario.example_episode_id))}" '
                f'title="{esc(scenario.example_episode_id)}">{esc(scenario.example_episode_id[:16])}</a></td></tr>'
            )
    return f"<h3>{esc(title)}</h3><table>{header}{''.join(rows)}</table>"


def _section_html(table: LeaderboardTable, heading_level: int) -> str:
    dataset = table.dataset
    h = f"h{heading_level}"
    parts = [
        f"<{h}>Environment set {esc(dataset_label(dataset))}</{h}>" if heading_level > 1 else "",
        '<p class="meta">'
        f"Environment set <strong>{esc(dataset.source)}</strong>, "
        f"revision {esc(dataset.revision or 'none')}, "
        f"fingerprint {esc(dataset.fingerprint or 'none')}.<br>"
        "Runs: "
        + ", ".join(
            f"{esc(run.run_id)} ({run.episodes} episodes, package {esc(run.package_version)}"
            f"{', git ' + esc(run.git_revision[:12]) if run.git_revision else ''})"
            for run in table.runs
        )
        + "</p>",
    ]
    parts += [f'<div class="warning">{esc(warning)}</div>' for warning in table.warnings]
    if not table.rows:
        parts.append('<p class="meta">These runs hold no episodes yet.</p>')
        return "\n".join(parts)
    parts.append(_table_html(table))
    parts.append('<div class="plots">' + "".join(_plot_html(plot) for plot in report_plots(table)) + "</div>")
    parts.append("<h3>Where models fail most</h3>" if heading_level > 1 else "<h2>Where models fail most</h2>")
    parts.extend(_failures_html(failures) for failures in table.failures)
    return "\n".join(parts)


def render_html(leaderboard: Leaderboard, title: str = "Leaderboard") -> str:
    count = len(leaderboard.episodes)
    parts = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">{esc(ACCOUNTING_NOTE)}</p>',
        f'<p><a href="index.html">All {count} episodes</a>: sortable, filterable by environment, scenario, model, '
        "outcome and termination, each linked to its page.</p>",
    ]
    heading_level = 2 if len(leaderboard.tables) > 1 else 1
    parts.extend(_section_html(table, heading_level) for table in leaderboard.tables)
    return html_page(title, "\n".join(parts))
