"""Leaderboards: aggregation of stored runs into ranked tables, reports, plots and episode pages."""

from leaderboards.aggregate import (
    DatasetMismatchError,
    EnvironmentFailures,
    Leaderboard,
    LeaderboardRow,
    LeaderboardTable,
    RunFailures,
    RunInfo,
    ScenarioFailures,
    build_leaderboard,
    build_leaderboard_from_runs,
    check_same_dataset,
    load_runs,
)
from leaderboards.collisions import EpisodeCollisionError, check_episode_collisions
from leaderboards.output import ReportFiles, write_leaderboard
from leaderboards.render import render_trajectory_html
from leaderboards.report_html import render_html
from leaderboards.report_md import render_markdown

__all__ = [
    "DatasetMismatchError",
    "EnvironmentFailures",
    "EpisodeCollisionError",
    "Leaderboard",
    "LeaderboardRow",
    "LeaderboardTable",
    "ReportFiles",
    "RunFailures",
    "RunInfo",
    "ScenarioFailures",
    "build_leaderboard",
    "build_leaderboard_from_runs",
    "check_episode_collisions",
    "check_same_dataset",
    "load_runs",
    "render_html",
    "render_markdown",
    "render_trajectory_html",
    "write_leaderboard",
]
