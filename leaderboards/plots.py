"""The report's pictures, drawn with matplotlib's object API (no pyplot state) and returned as PNG bytes."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.schema import TerminationReason
from leaderboards.aggregate import LeaderboardRow, LeaderboardTable

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_LABEL_CHARS = 38
DPI = 100

TERMINATION_COLORS = {
    TerminationReason.AGENT_DONE.value: "#2da44e",
    TerminationReason.USER_STOP.value: "#54aeff",
    TerminationReason.MAX_STEPS.value: "#d4a72c",
    TerminationReason.TOO_MANY_ERRORS.value: "#e16f24",
    TerminationReason.CONTEXT_OVERFLOW.value: "#bf8700",
    TerminationReason.AGENT_ERROR.value: "#cf222e",
    TerminationReason.TOOL_EXCEPTION.value: "#8250df",
    TerminationReason.ENVIRONMENT_ERROR.value: "#a40e26",
    TerminationReason.INFRA_ERROR.value: "#6e7781",
}


@dataclass(frozen=True)
class Plot:
    title: str
    caption: str
    png: bytes


def plain(text: str) -> str:
    """Text matplotlib prints as is (a ``$`` would otherwise start mathtext)."""
    cut = text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"
    return cut.replace("$", r"\$")


def row_label(row: LeaderboardRow) -> str:
    return plain(f"#{row.rank} {row.model} ({row.settings_id[:6]})")


class PlottingUnavailable(ImportError):
    """matplotlib is not installed (it comes with the ``report`` extra)."""


def new_figure(width: float, height: float) -> Figure:
    """A figure of matplotlib's object API (no pyplot, so no global state and no GUI backend)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise PlottingUnavailable(
            "the HTML report draws its plots with matplotlib: pip install 'envharness[report]'"
        ) from error
    return Figure(figsize=(width, height))


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    return buffer.getvalue()


def _colors(count: int) -> list[str]:
    palette = [
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#d62728",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#17becf",
        "#bcbd22",
    ]
    return [palette[index % len(palette)] for index in range(count)]


def domain_scores(table: LeaderboardTable) -> Plot:
    rows, domains = table.rows, table.domains
    figure = new_figure(max(6.0, 1.1 * len(domains) * max(1, len(rows)) ** 0.5 + 3), 4.2)
    axes = figure.subplots()
    width = 0.8 / max(1, len(rows))
    for index, (row, color) in enumerate(zip(rows, _colors(len(rows)), strict=True)):
        positions = [d + (index - (len(rows) - 1) / 2) * width for d in range(len(domains))]
        heights = [row.per_domain.get(domain) or 0.0 for domain in domains]
        bars = axes.bar(positions, heights, width=width, color=color, label=row_label(row))
        if len(rows) * len(domains) <= 24:
            axes.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    axes.set_xticks(range(len(domains)), [plain(d) for d in domains], rotation=20 if len(domains) > 4 else 0)
    axes.set_ylim(0, 1.1)
    axes.set_ylabel("mean state reward")
    axes.set_title("Score by domain")
    axes.grid(axis="y", alpha=0.3)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return Plot("Score by domain", "Mean state reward per environment domain, one bar per model.", _png(figure))


def pass_k_curves(table: LeaderboardTable) -> Plot:
    figure = new_figure(6.4, 4.2)
    axes = figure.subplots()
    for row, color in zip(table.rows, _colors(len(table.rows)), strict=True):
        if not row.pass_hat_k:
            continue
        ks = sorted(row.pass_hat_k)
        axes.plot(ks, [row.pass_hat_k[k] for k in ks], marker="o", color=color, label=row_label(row))
    max_k = max(1, table.max_k)
    axes.set_xticks(range(1, max_k + 1))
    axes.set_xlim(0.8, max_k + 0.2)
    axes.set_ylim(-0.04, 1.08)
    axes.set_xlabel("k (trials that must all succeed)")
    axes.set_ylabel("pass^k")
    axes.set_title("pass^k")
    axes.grid(alpha=0.3)
    if any(row.pass_hat_k for row in table.rows):
        axes.legend(fontsize=8)
    return Plot(
        "pass^k",
        "τ-bench's pass^k: the chance that k independent trials of a task all succeed.",
        _png(figure),
    )


def cost_against_score(table: LeaderboardTable) -> Plot:
    figure = new_figure(6.4, 4.2)
    axes = figure.subplots()
    for row, color in zip(table.rows, _colors(len(table.rows)), strict=True):
        if row.mean_state_reward is None:
            continue
        cost = row.mean_cost_usd or 0.0
        axes.scatter([cost], [row.mean_state_reward], s=70, color=color, label=row_label(row), zorder=3)
        axes.annotate(f"#{row.rank}", (cost, row.mean_state_reward), textcoords="offset points", xytext=(6, 4))
    highest_cost = max((row.mean_cost_usd or 0.0 for row in table.rows), default=0.0)
    right = highest_cost * 1.2 if highest_cost > 0 else 1.0
    # a little room below zero so points at zero cost or zero reward are not cut by the axes
    axes.set_xlim(-0.04 * right, right)
    axes.set_ylim(-0.04, 1.08)
    axes.set_xlabel("mean cost per episode (USD)")
    axes.set_ylabel("mean state reward")
    axes.set_title("Cost against score")
    axes.grid(alpha=0.3)
    if any(row.mean_state_reward is not None for row in table.rows):
        axes.legend(fontsize=8)
    return Plot(
        "Cost against score",
        "Each point is one model: cost per episode against mean state reward.",
        _png(figure),
    )


def termination_reasons(table: LeaderboardTable) -> Plot:
    rows = table.rows
    figure = new_figure(7.0, max(2.4, 0.55 * len(rows) + 1.6))
    axes = figure.subplots()
    labels = [row_label(row) for row in rows]
    reasons = [reason.value for reason in TerminationReason]
    lefts = [0.0] * len(rows)
    for reason in reasons:
        shares = [row.terminations.get(reason, 0) / row.episodes if row.episodes else 0.0 for row in rows]
        if not any(shares):
            continue
        axes.barh(labels, shares, left=lefts, color=TERMINATION_COLORS[reason], label=reason)
        lefts = [left + share for left, share in zip(lefts, shares, strict=True)]
    axes.set_xlim(0, 1)
    axes.invert_yaxis()
    axes.set_xlabel("share of episodes")
    axes.set_title("How episodes ended")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return Plot(
        "How episodes ended",
        "Termination reasons as a share of all episodes, infrastructure errors included.",
        _png(figure),
    )


def report_plots(table: LeaderboardTable) -> list[Plot]:
    """The four pictures of a table (none for a table without rows)."""
    if not table.rows:
        return []
    plots = []
    if any(value is not None for row in table.rows for value in row.per_domain.values()):
        plots.append(domain_scores(table))
    if any(len(row.pass_hat_k) > 1 for row in table.rows):  # one point per model says nothing a table doesn't
        plots.append(pass_k_curves(table))
    if any((row.mean_cost_usd or 0.0) > 0 for row in table.rows):  # all free: every point on one vertical line
        plots.append(cost_against_score(table))
    plots.append(termination_reasons(table))
    return plots
