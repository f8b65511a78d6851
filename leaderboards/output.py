"""Writing a leaderboard to a folder: rows, Markdown, the HTML report and one page per linked episode."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from harness.files.outputs import OutputFolder
from leaderboards.aggregate import Leaderboard
from leaderboards.index_html import INDEX_FILE, IndexPage
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
    episodes: Path
    """The folder of the episode pages."""
    episode_pages: int


def write_leaderboard(leaderboard: Leaderboard, out_dir: Path | str, title: str = "Leaderboard") -> ReportFiles:
    """Write the rows, ``report.md``, ``report.html``, ``index.html`` (every episode, sortable and filterable)
    and ``episodes/<id>.html`` for every episode into ``out_dir`` (every file inside it: episode pages are named by
    :func:`leaderboards.page.episode_file_name`, and :class:`harness.files.outputs.OutputFolder` checks each path). Each
    episode is read from its run as its page is written."""
    out = OutputFolder(out_dir)
    for parts in [(ROWS_FILE,), (MARKDOWN_FILE,), (HTML_FILE,), (INDEX_FILE,)]:
        out.path(*parts)  # every path is checked before anything is written
    for episode_id in leaderboard.episodes.ids():
        out.path(EPISODES_FOLDER, episode_file_name(episode_id))
    rows_path = out.write_text(ROWS_FILE, "".join(row.model_dump_json() + "\n" for row in leaderboard.rows))
    markdown_path = out.write_text(MARKDOWN_FILE, render_markdown(leaderboard, title))
    html_path = out.write_text(HTML_FILE, render_html(leaderboard, title))
    (out.root / EPISODES_FOLDER).mkdir(parents=True, exist_ok=True)
    pages = 0
    with IndexPage() as index:
        for trajectory, scenario in leaderboard.episodes.records():
            page = render_trajectory_html(trajectory, scenario, back_link=f"../{HTML_FILE}")
            out.write_text((EPISODES_FOLDER, episode_file_name(trajectory.episode_id)), page)
            index.add(trajectory)
            pages += 1
        with out.writer(INDEX_FILE) as handle:
            index.write(handle, f"{title}: every episode")
    logger.info("wrote %d leaderboard rows and %d episode pages to %s", len(leaderboard.rows), pages, out.root)
    return ReportFiles(
        rows=rows_path,
        markdown=markdown_path,
        html=html_path,
        index=out.path(INDEX_FILE),
        episodes=out.path(EPISODES_FOLDER),
        episode_pages=pages,
    )
