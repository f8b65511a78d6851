"""The leaderboard as Markdown, for a dataset card or a README."""

from __future__ import annotations

from leaderboards.aggregate import Leaderboard, LeaderboardRow, LeaderboardTable, dataset_label
from leaderboards.page import fmt_cost, fmt_float, fmt_percent, fmt_tokens

ACCOUNTING_NOTE = (
    "Mean reward is the mean state_reward (checks passed / checks total) over scored episodes; delta reward "
    "counts only checks that were false at reset. Episodes that ended in an infrastructure error are counted "
    "in the infra errors column and kept out of every average. pass^k follows τ-bench: the chance that k "
    "trials of a task all succeed, counted over the trials of one run. Intervals are 95%: Wilson's for the "
    "success rate, the normal approximation for the mean reward, treating episodes as independent."
)


def fmt_interval(interval: list[float] | None, percent: bool = False) -> str:
    if not interval:
        return "–"
    low, high = interval
    return f"{100 * low:.1f}–{100 * high:.1f}%" if percent else f"{low:.3f}–{high:.3f}"


def md_cell(value: object) -> str:
    """Text safe inside a Markdown table cell: no pipes, no line breaks, no raw HTML."""
    text = "" if value is None else str(value)
    text = text.replace("\\", "\\\\").replace("\r", " ").replace("\n", " ")
    for special in "|`*[]":
        text = text.replace(special, "\\" + special)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def table_columns(table: LeaderboardTable) -> list[str]:
    columns = ["Rank", "Model", "Settings", "Mean reward", "Delta reward", "Success", "Reward 95% CI", "Success 95% CI"]
    columns += [f"pass^{k}" for k in range(1, table.max_k + 1)]
    columns += [f"domain: {domain}" for domain in table.domains]
    columns += [f"mode: {mode}" for mode in table.modes]
    columns += ["Tokens / ep", "Cost / ep", "Scored", "Infra errors"]
    return columns


def row_cells(table: LeaderboardTable, row: LeaderboardRow) -> list[str]:
    cells = [
        str(row.rank),
        row.model,
        f"{row.settings} [{row.settings_id}]",
        fmt_float(row.mean_state_reward),
        fmt_float(row.mean_delta_reward),
        fmt_percent(row.success_rate),
        fmt_interval(row.reward_ci95),
        fmt_interval(row.success_ci95, percent=True),
    ]
    cells += [fmt_float(row.pass_hat_k.get(k)) for k in range(1, table.max_k + 1)]
    cells += [fmt_float(row.per_domain.get(domain)) for domain in table.domains]
    cells += [fmt_float(row.per_mode.get(mode)) for mode in table.modes]
    cells += [
        fmt_tokens(row.mean_tokens),
        fmt_cost(row.mean_cost_usd),
        f"{row.scored}/{row.episodes}",
        str(row.infra_errors),
    ]
    return cells


def render_table_markdown(table: LeaderboardTable) -> str:
    columns = table_columns(table)
    lines = [
        "| " + " | ".join(md_cell(c) for c in columns) + " |",
        "|" + "|".join("---:" if c not in {"Model", "Settings"} else "---" for c in columns) + "|",
    ]
    lines += ["| " + " | ".join(md_cell(c) for c in row_cells(table, row)) + " |" for row in table.rows]
    return "\n".join(lines)


def render_markdown(leaderboard: Leaderboard, title: str = "Leaderboard") -> str:
    # No top-level heading: the text is meant to sit inside a dataset card's own section.
    parts = [f"**{md_cell(title)}**", ""]
    for table in leaderboard.tables:
        if len(leaderboard.tables) > 1:
            parts += [f"### Environment set {md_cell(dataset_label(table.dataset))}", ""]
        dataset = table.dataset
        parts.append(
            f"Environment set: **{md_cell(dataset.source)}**, "
            f"revision {md_cell(dataset.revision or 'none')}, "
            f"fingerprint {md_cell(dataset.fingerprint or 'none')}. "
            f"Runs: {', '.join(md_cell(run.run_id) for run in table.runs)}."
        )
        parts.append("")
        parts += [f"> **Note:** {md_cell(warning)}" for warning in table.warnings]
        if table.warnings:
            parts.append("")
        parts.append(render_table_markdown(table))
        parts.append("")
    parts.append(ACCOUNTING_NOTE)
    parts.append("")
    return "\n".join(parts)
