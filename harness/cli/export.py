"""``harness export atif``, ``harness export leaderboard-json`` and ``harness export tau2``: runs in formats other
tools read."""

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
    from harness.atif import UnsafeEpisodeId, write_atif
    from harness.errors import BadInput
    from harness.metrics import open_run

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


def export_tau2_command(
    run_dir: Annotated[Path, typer.Argument(help="A run of a τ²-bench library (harness import tau2).")],
    out: Annotated[Path, typer.Option("--out", help="The Results JSON file to write.")],
    envs: Annotated[
        str | None, typer.Option("--envs", help="The library the run read (default: the one its manifest names).")
    ] = None,
) -> None:
    """A run under --rules tau2 as τ²-bench's Results file (tau2 evaluate-trajs, tau2 view)."""
    from harness.benchmarks.tau2.export import Tau2ExportError, plan_results, write_results
    from harness.errors import BadInput
    from harness.library import load_library
    from harness.metrics import open_run

    try:
        run = open_run(run_dir)
        library = load_library(envs or run.manifest.dataset.source)
        export = plan_results(run.manifest, run.results, library.environments, library.scenarios, run_dir)
        written = write_results(export, run.results, out)
    except (FileNotFoundError, ValueError) as error:
        message = str(error) if isinstance(error, Tau2ExportError) else f"cannot export {run_dir}: {error}"
        raise BadInput(message) from error
    console.print(
        outside(f"Wrote {written} simulations of {len(export.head.tasks)} τ² tasks to {out}"),
        soft_wrap=True,
    )


def register(export_app: typer.Typer) -> None:
    export_app.command("atif", cls=RefusingCommand)(export_atif_command)
    export_app.command("leaderboard-json", cls=RefusingCommand)(export_leaderboard_json_command)
    export_app.command("tau2", cls=RefusingCommand)(export_tau2_command)
