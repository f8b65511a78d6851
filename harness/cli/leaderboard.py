"""``harness leaderboard build|publish`` and ``harness show``: tables, reports and terminal views of runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.errors import RefusingCommand
from harness.console import console, err_console, labelled
from harness.errors import BadInput


def _failed(prefix: str, message: object) -> typer.Exit:
    """Print a failure that is not bad input (as outside text: messages may hold brackets and control
    characters) and give exit status 1."""
    err_console.print(labelled(prefix, "bold red", message), soft_wrap=True)
    return typer.Exit(1)


leaderboard_app = typer.Typer(help="Rank stored runs and publish the leaderboard.", no_args_is_help=True)


@leaderboard_app.command("build", cls=RefusingCommand)
def build(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders (each with manifest.json and results.jsonl).")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write the leaderboard and reports into.")],
    split_by_dataset: Annotated[
        bool,
        typer.Option(
            "--split-by-dataset",
            help="Build one table per environment set and revision instead of refusing to mix them.",
        ),
    ] = False,
    title: Annotated[str, typer.Option(help="Title of the reports.")] = "Leaderboard",
) -> None:
    """Rank runs: one row per model and settings, one table per environment set and revision."""
    from leaderboards import DatasetMismatchError, build_leaderboard, write_leaderboard
    from leaderboards.terminal import leaderboard_view

    try:
        leaderboard = build_leaderboard(run_dirs, split_by_dataset=split_by_dataset)
    except DatasetMismatchError as error:
        raise BadInput(f"Refusing to merge: {error}") from error
    except (FileNotFoundError, ValueError) as error:
        raise BadInput(f"Cannot build the leaderboard: {error}") from error
    try:
        files = write_leaderboard(leaderboard, out, title=title)
    except ImportError as error:
        raise _failed("Cannot write the report:", error) from error
    for table in leaderboard.tables:
        console.print(leaderboard_view(table))
        for warning in table.warnings:
            err_console.print(labelled("warning:", "yellow", warning), soft_wrap=True)
    console.print(
        f"Wrote {len(leaderboard.rows)} rows in {len(leaderboard.tables)} table(s): {files.rows}, "
        f"{files.markdown}, {files.html}, {files.index} (every episode) and {files.episode_pages} episode pages.",
        markup=False,
        highlight=False,
    )


@leaderboard_app.command("publish", cls=RefusingCommand)
def publish(
    folder: Annotated[Path, typer.Argument(help="A folder written by `harness leaderboard build`.")],
    repo: Annotated[str, typer.Option("--repo", help="Hub dataset repository, ORG/NAME.")],
    private: Annotated[bool, typer.Option(help="Create the repository as private.")] = False,
    revision: Annotated[str | None, typer.Option(help="Branch to publish to (default main).")] = None,
    message: Annotated[str | None, typer.Option(help="Commit message.")] = None,
) -> None:
    """Publish a built leaderboard as a Hub dataset config, with the table on its card."""
    from harness.hub import PublishError, SourceError
    from harness.hub import publish as publish_to_hub

    try:
        result = publish_to_hub("leaderboard", folder, repo, private=private, revision=revision, message=message)
    except SourceError as error:
        raise BadInput(f"Cannot publish: {error}") from error
    except PublishError as error:
        raise _failed("Cannot publish:", error) from error
    outcome = f"commit {result.commit_sha}" if result.committed else "no change: the Hub already had these files"
    console.print(
        f"Published {folder} to {result.repo_id}@{result.revision} ({outcome}): {result.url}",
        markup=False,
        highlight=False,
    )


def show(
    run_dirs: Annotated[list[Path], typer.Argument(help="A run folder (two with --diff: OLD NEW).")],
    episode: Annotated[
        str | None, typer.Option("--episode", help="Show this episode (its id or a unique prefix of it).")
    ] = None,
    diff: Annotated[
        bool,
        typer.Option(
            "--diff",
            help="Compare two runs of the same episodes: the episodes whose verdict changed and the summaries.",
        ),
    ] = False,
) -> None:
    """Show a run's summary, or one of its episodes, in the terminal; or what changed between two runs."""
    from harness.errors import BadInput
    from harness.results.metrics import open_run
    from leaderboards.catalog import load_catalog
    from leaderboards.terminal import find_episode, open_run_view, run_view, trajectory_view

    if diff:
        if len(run_dirs) != 2 or episode is not None:
            raise BadInput("--diff takes exactly two run folders, OLD and NEW, and no --episode")
        from leaderboards.run_diff import diff_runs, diff_view

        try:
            compared = diff_runs(run_dirs[0], run_dirs[1])
        except (FileNotFoundError, ValueError) as error:
            raise BadInput(f"Cannot read the run: {error}") from error
        for view in diff_view(compared):
            console.print(view)
        return
    if len(run_dirs) != 1:
        raise BadInput(f"show takes one run folder ({len(run_dirs)} given; --diff compares two)")
    run_dir = run_dirs[0]
    try:
        if episode is None:
            run, tally = open_run_view(run_dir)
        else:
            run = open_run(run_dir)
    except (FileNotFoundError, ValueError) as error:
        raise BadInput(f"Cannot read the run: {error}") from error
    if episode is None:
        views = run_view(run, tally, width=console.width)
    else:
        try:
            trajectory = find_episode(run.results, episode)
        except KeyError as error:
            raise BadInput(f"Cannot show the episode: {error.args[0]}") from error
        scenario = load_catalog(run.manifest).scenarios.get(trajectory.scenario_id)
        views = trajectory_view(trajectory, scenario)
    for view in views:
        console.print(view)


def register(app: typer.Typer) -> None:
    """Add ``leaderboard build``, ``leaderboard publish`` and ``show`` to the ``harness`` command."""
    app.add_typer(leaderboard_app, name="leaderboard")
    app.command("show", cls=RefusingCommand)(show)
