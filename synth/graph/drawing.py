"""The graph as a picture: a PNG with one panel per environment."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from synth.graph.records import ToolGraph

EDGE_STYLES: dict[str, tuple[str, Literal["solid", "dashed", "dotted"], str]] = {
    "embedding": ("tab:gray", "solid", "embedding similarity"),
    "name": ("tab:green", "dashed", "same identifier name"),
    "model": ("tab:purple", "dotted", "added by the model"),
}
PANEL_SIZE = (6.4, 4.8)


COLUMN_NAMES = ("entry points", "lookups", "state changes")


def _columns(graph: ToolGraph, environment_id: str) -> dict[str, int]:
    """Each tool's column: 0 for tools nothing in their environment feeds (where chains start), 1 for the
    other read tools, 2 for state-changing tools (where chains end)."""
    members = graph.tools_of(environment_id)
    inside = {t.id for t in members}
    fed = {e.target for e in graph.edges if e.source in inside and e.source != e.target}
    return {t.id: 2 if t.state_changing else (1 if t.id in fed else 0) for t in members}


def draw_graph(graph: ToolGraph, path: Path, *, environments: Sequence[str] | None = None) -> None:
    """A PNG with one panel per environment: tools in three columns (entry points, lookups, state changes; read
    tools blue, state-changing tools orange), edges styled by how they were found, and a legend. Edges between
    environments cannot be drawn across panels; each panel's title counts those that leave it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    chosen = list(environments) if environments else graph.environment_ids
    columns = max(1, math.ceil(math.sqrt(len(chosen))))
    rows = max(1, math.ceil(len(chosen) / columns))
    figure, grid = plt.subplots(
        rows, columns, figsize=(PANEL_SIZE[0] * columns, PANEL_SIZE[1] * rows + 0.8), squeeze=False
    )
    for axes in grid.flat:
        axes.set_axis_off()
    for axes, environment_id in zip(grid.flat, chosen, strict=False):
        column_of = _columns(graph, environment_id)
        by_column: dict[int, list[str]] = {}
        for tool_key in sorted(column_of):
            by_column.setdefault(column_of[tool_key], []).append(tool_key)
        tallest = max((len(m) for m in by_column.values()), default=1)
        positions: dict[str, tuple[float, float]] = {}
        for column, members in by_column.items():
            step = tallest / max(1, len(members))
            for row, tool_key in enumerate(members):
                positions[tool_key] = (float(column), -(row + 0.5) * step)
        leaving = 0
        for edge in graph.edges:
            if (edge.source in positions) != (edge.target in positions):
                leaving += 1
                continue
            if edge.source not in positions or edge.source == edge.target:
                continue
            color, style, _ = EDGE_STYLES[edge.via]
            axes.annotate(
                "",
                xy=positions[edge.target],
                xytext=positions[edge.source],
                arrowprops={
                    "arrowstyle": "-|>",
                    "color": color,
                    "linestyle": style,
                    "lw": 0.9,
                    "alpha": 0.7,
                    "shrinkA": 7,
                    "shrinkB": 7,
                    "connectionstyle": "arc3,rad=0.12",
                },
            )
        for tool_key, (x, y) in positions.items():
            tool = graph.tool(tool_key)
            axes.scatter([x], [y], s=60, color="tab:orange" if tool.state_changing else "tab:blue", zorder=3)
            side = {0: ("right", -0.06), 1: ("center", 0.0), 2: ("left", 0.06)}[column_of[tool_key]]
            offset = 0.0 if column_of[tool_key] != 1 else 0.25
            axes.text(x + side[1], y + offset, tool.name, fontsize=7, ha=side[0], va="center", zorder=4)
        for column, label in enumerate(COLUMN_NAMES):
            if column in by_column:
                axes.text(column, 0.45, label, fontsize=7, ha="center", color="dimgray", style="italic")
        title = f"{environment_id}: {len(positions)} tools"
        if leaving:
            title += f", {leaving} cross-environment edges (not drawn)"
        axes.set_title(title, fontsize=9)
        axes.set_xlim(-1.1, 3.1)
        axes.set_ylim(-tallest - 0.3, 0.8)
    handles = [
        Line2D([], [], marker="o", linestyle="", color="tab:blue", label="read tool"),
        Line2D([], [], marker="o", linestyle="", color="tab:orange", label="state-changing tool"),
        *(Line2D([], [], color=c, linestyle=ls, label=f"edge: {label}") for c, ls, label in EDGE_STYLES.values()),
    ]
    figure.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    figure.suptitle(
        f"Tool dependency graph: {sum(len(graph.tools_of(e)) for e in chosen)} tools, "
        f"embedding threshold {graph.threshold}",
        fontsize=10,
    )
    figure.tight_layout(rect=(0, 0.07, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(figure)
