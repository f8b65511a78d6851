"""Writing a leaderboard to a folder: rows, Markdown, the HTML report and one page per linked episode."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from leaderboards.aggregate import Leaderboard
from leaderboards.index_html import INDEX_FILE, render_index
from leaderboards.page import episode_file_name
from leaderboards.render import render_trajectory_html
from leaderboards.report_html import EPISODES_FOLDER, render_html
from leaderboards.report_md import render_markdown

logger = logging.getLogger(__name__)

ROWS_FILE = "leaderboard.jsonl"
MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"


@dataclass(frozen=True)
class ReportFiles:
    rows: Path
    markdown: Path
    html: Path
    index: Path
    episodes: list[Path]


def _write_text(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def write_leaderboard(leaderboard: Leaderboard, out_dir: Path | str, title: str = "Leaderboard") -> ReportFiles:
    """Write the rows, ``report.md``, ``report.html``, ``index.html`` (every episode, sortable and filterable)
    and ``episodes/<id>.html`` for every episode into ``out_dir``."""
    out = Path(out_dir)
    episodes_dir = out / EPISODES_FOLDER
    episodes_dir.mkdir(parents=True, exist_ok=True)

    rows_path = out / ROWS_FILE
    _write_text(rows_path, "".join(row.model_dump_json() + "\n" for row in leaderboard.rows))
    markdown_path = out / MARKDOWN_FILE
    _write_text(markdown_path, render_markdown(leaderboard, title))
    html_path = out / HTML_FILE
    _write_text(html_path, render_html(leaderboard, title))
    index_path = out / INDEX_FILE
    _write_text(index_path, render_index(list(leaderboard.episodes.values()), f"{title}: every episode"))

    episode_paths = []
    for episode_id, trajectory in leaderboard.episodes.items():
        path = episodes_dir / episode_file_name(episode_id)
        scenario = leaderboard.scenarios.get(episode_id)
        _write_text(path, render_trajectory_html(trajectory, scenario, back_link=f"../{HTML_FILE}"))
        episode_paths.append(path)
    logger.info("wrote %d leaderboard rows and %d episode pages to %s", len(leaderboard.rows), len(episode_paths), out)
    return ReportFiles(rows=rows_path, markdown=markdown_path, html=html_path, index=index_path, episodes=episode_paths)
