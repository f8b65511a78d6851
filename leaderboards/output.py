"""Writing a leaderboard to a folder: rows, Markdown, the HTML report and one page per linked episode."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from harness.files.outputs import OutputFolder
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


def write_leaderboard(leaderboard: Leaderboard, out_dir: Path | str, title: str = "Leaderboard") -> ReportFiles:
    """Write the rows, ``report.md``, ``report.html``, ``index.html`` (every episode, sortable and filterable)
    and ``episodes/<id>.html`` for every episode into ``out_dir`` (every file inside it: episode pages are named by
    :func:`leaderboards.page.episode_file_name`, and :class:`harness.files.outputs.OutputFolder` checks each path)."""
    out = OutputFolder(out_dir)
    pages = {episode_id: (EPISODES_FOLDER, episode_file_name(episode_id)) for episode_id in leaderboard.episodes}
    for parts in [(ROWS_FILE,), (MARKDOWN_FILE,), (HTML_FILE,), (INDEX_FILE,), *pages.values()]:
        out.path(*parts)  # every path is checked before anything is written
    rows_path = out.write_text(ROWS_FILE, "".join(row.model_dump_json() + "\n" for row in leaderboard.rows))
    markdown_path = out.write_text(MARKDOWN_FILE, render_markdown(leaderboard, title))
    html_path = out.write_text(HTML_FILE, render_html(leaderboard, title))
    index_path = out.write_text(
        INDEX_FILE, render_index(list(leaderboard.episodes.values()), f"{title}: every episode")
    )
    (out.root / EPISODES_FOLDER).mkdir(parents=True, exist_ok=True)
    episode_paths = []
    for episode_id, trajectory in leaderboard.episodes.items():
        scenario = leaderboard.scenarios.get(episode_id)
        page = render_trajectory_html(trajectory, scenario, back_link=f"../{HTML_FILE}")
        episode_paths.append(out.write_text(pages[episode_id], page))
    logger.info(
        "wrote %d leaderboard rows and %d episode pages to %s", len(leaderboard.rows), len(episode_paths), out.root
    )
    return ReportFiles(rows=rows_path, markdown=markdown_path, html=html_path, index=index_path, episodes=episode_paths)
