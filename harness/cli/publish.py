"""``harness publish KIND SOURCE --repo ORG/NAME``: build a Hub-format dataset and upload it."""

from __future__ import annotations

import shutil
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.errors import RefusingCommand
from harness.console import console, err_console, labelled
from harness.errors import BadInput


class Kind(StrEnum):
    environments = "environments"
    scenarios = "scenarios"
    trajectories = "trajectories"
    sft = "sft"
    leaderboard = "leaderboard"


def _failed(prefix: str, message: object) -> typer.Exit:
    """A failed upload (not bad input): printed as outside text, exit status 1."""
    err_console.print(labelled(prefix, "bold red", message), soft_wrap=True)
    return typer.Exit(1)


def publish_command(
    kind: Annotated[Kind, typer.Argument(help="What SOURCE holds.", case_sensitive=False)],
    source: Annotated[
        str,
        typer.Argument(
            help="environments/scenarios: a library folder or Hub id; trajectories: a run folder "
            "(results.jsonl, manifest.json); sft: a folder of *.jsonl chat or ShareGPT files; "
            "leaderboard: a folder with leaderboard.jsonl and optional report.md."
        ),
    ],
    repo: Annotated[str, typer.Option("--repo", help="Hub dataset id ORG/NAME.")],
    private: Annotated[bool, typer.Option("--private", help="Create the repository as private.")] = False,
    revision: Annotated[
        str | None,
        typer.Option("--revision", "--branch", help="Branch to commit to (created if missing). Default: main."),
    ] = None,
    message: Annotated[str | None, typer.Option("--message", "-m", help="Commit message.")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Only build the Hub-format folder here; do not upload.")
    ] = None,
    license: Annotated[
        str | None,
        typer.Option(
            "--license", help="License identifier for the card. Default: the source card's license, else apache-2.0."
        ),
    ] = None,
    keep_build: Annotated[
        bool, typer.Option("--keep-build", help="Keep the built folder after a failed upload (it is removed).")
    ] = False,
) -> None:
    """Build SOURCE as a Parquet dataset with a card and publish it to the Hugging Face Hub.

    The token comes from HF_TOKEN or `hf auth login`. Publishing merges into the repository's card, so the
    other configs stay loadable. Re-running with unchanged content makes no commit. `--out` builds offline.
    """
    from harness.hub import PublishError, RepoIdError, SourceError, build_from_source, upload_built, validate_repo_id
    from harness.hub.load import HubLoadError

    if "@" in repo:
        raise BadInput("Bad --repo: give the branch with --revision, not @revision")
    try:
        repo_id = validate_repo_id(repo.strip())
    except RepoIdError as error:
        raise BadInput(f"Bad --repo: {error}") from error

    folder = out if out is not None else Path(tempfile.mkdtemp(prefix="harness-publish-"))
    try:
        built = build_from_source(kind.value, source, folder, repo_id, license=license)
    except (SourceError, HubLoadError, OSError, ValueError) as error:
        if out is None:
            shutil.rmtree(folder, ignore_errors=True)
        raise BadInput(f"Cannot build: {error}") from error
    summary = ", ".join(f"{c.name} ({c.num_rows} rows)" for c in built.configs)
    if out is not None:
        console.print(f"Built {kind.value} dataset for {repo_id} in {folder}: {summary}", markup=False)
        return
    try:
        result = upload_built(built, private=private, revision=revision, message=message, keep_build=keep_build)
    except PublishError as error:
        raise _failed("Publish failed:", error) from error
    finally:
        if not keep_build:
            shutil.rmtree(folder, ignore_errors=True)
    if result.made_private:
        console.print(f"{result.repo_id} was public; made it private as --private asked.", markup=False)
    if result.committed:
        console.print(
            f"Published {summary} to {result.url} ({result.revision}, commit {result.commit_sha})", markup=False
        )
    else:
        console.print(
            f"{result.repo_id}@{result.revision} already has this content (commit {result.commit_sha}); no commit made",
            markup=False,
        )


def register(app: typer.Typer) -> None:
    """Add ``publish`` to the ``harness`` command."""
    app.command("publish", cls=RefusingCommand)(publish_command)
