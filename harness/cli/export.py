"""``harness export atif`` and ``harness export leaderboard-json``: runs in formats other tools read (a benchmark's
own format is its ``harness export NAME``, from :mod:`harness.cli.interop`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.errors import RefusingCommand
from harness.console import console, outside


def export_atif_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for one ATIF-v1.4 JSON document per episode.")],
) -> None:
    """Every episode of a run as an Agent Trajectory Interchange Format (ATIF-v1.4) document."""
    from harness.errors import BadInput
    from harness.results.atif import UnsafeEpisodeId, write_atif
    from harness.results.metrics import open_run

    try:
        written = write_atif(open_run(run_dir).results, out)
    except (FileNotFoundError, ValueError, UnsafeEpisodeId) as error:
        raise BadInput(f"cannot export {run_dir}: {error}") from error
    console.print(outside(f"Wrote {written} ATIF documents to {out}"), soft_wrap=True)


def export_leaderboard_json_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder.")],
    out: Annotated[Path, typer.Option("--out", help="The JSON file to write.")],
) -> None:
    """A run's numbers per environment and mode (pass^1..k, mean reward, cost) with the versions they came from."""
    from harness.errors import BadInput
    from leaderboards.submission import export_submission

    try:
        submission = export_submission(run_dir, out)
    except (FileNotFoundError, ValueError) as error:
        raise BadInput(f"cannot export {run_dir}: {error}") from error
    console.print(
        outside(f"Wrote {len(submission.entries)} entries (environment × mode) of {submission.run_id} to {out}"),
        soft_wrap=True,
    )


def register(export_app: typer.Typer) -> None:
    export_app.command("atif", cls=RefusingCommand)(export_atif_command)
    export_app.command("leaderboard-json", cls=RefusingCommand)(export_leaderboard_json_command)
