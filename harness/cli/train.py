"""``harness train dataset SOURCE --out DIR [--repo ORG/NAME]``: the prompt dataset TRL trains on."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.console import console, err_console, labelled

if TYPE_CHECKING:
    from harness.schema import Mode

train_app = typer.Typer(help="Prepare training on our environments (TRL, verl).", no_args_is_help=True)


def _fail(prefix: str, message: object, code: int) -> typer.Exit:
    err_console.print(labelled(prefix, "bold red", " ".join(str(message).split())), soft_wrap=True)
    return typer.Exit(code)


@train_app.command("dataset")
def dataset_command(
    source: Annotated[str, typer.Argument(help="A library folder or Hub dataset id (org/name[@revision]).")],
    out: Annotated[Path | None, typer.Option("--out", help="Write the Hub-format prompt dataset here.")] = None,
    repo: Annotated[str | None, typer.Option("--repo", help="Publish it to this Hub dataset id ORG/NAME.")] = None,
    mode: Annotated[str, typer.Option("--mode", help="nonconv, or conv (a simulated user speaks first).")] = "nonconv",
    rules: Annotated[
        str,
        typer.Option(
            "--rules", help="Episode rules the rollouts are scored with (a profile of `harness run --rules`)."
        ),
    ] = "harness",
    environment: Annotated[
        list[str] | None, typer.Option("--environment", "-e", help="Only these environments (repeatable).")
    ] = None,
    private: Annotated[bool, typer.Option("--private", help="Create the Hub repository as private.")] = False,
    data_format: Annotated[
        str,
        typer.Option("--format", help="trl (a Hub-format folder) or verl (OUT/train.parquet for verl's RLHFDataset)."),
    ] = "trl",
) -> None:
    """Write one row per scenario: a conversational `prompt` (system prompt, opening user message) and its
    `scenario_id` and `environment`, for `GRPOTrainer` with harness.train.trl's environment factory; with
    `--format verl`, verl's row layout (`prompt`, `agent_name`, `extra_info`, ...) for the `harness` agent loop."""
    from harness.errors import BadInput
    from harness.hub import PublishError, RepoIdError, validate_repo_id
    from harness.library import LibraryError
    from harness.registry import profile_names
    from harness.train.trl_dataset import prompt_dataset, publish_prompt_dataset, write_prompt_dataset

    if out is None and repo is None:
        raise _fail("Bad input:", "give --out DIR, --repo ORG/NAME, or both", 2)
    modes: tuple[Mode, ...] = ("nonconv", "conv")
    if mode not in modes:
        raise _fail("Bad --mode:", f"{mode!r} is not nonconv or conv", 2)
    if rules not in profile_names():
        raise _fail("Bad --rules:", f"{rules!r} is not one of {', '.join(profile_names())}", 2)
    if data_format not in ("trl", "verl"):
        raise _fail("Bad --format:", f"{data_format!r} is not trl or verl", 2)
    if data_format == "verl":
        if repo is not None or out is None:
            raise _fail("Bad input:", "--format verl writes a local Parquet file: give --out DIR and no --repo", 2)
        _write_verl(source, out, rules, mode, environment)
        return
    repo_id = None
    if repo is not None:
        try:
            repo_id = validate_repo_id(repo.strip())
        except RepoIdError as error:
            raise _fail("Bad --repo:", error, 2) from error
    try:
        dataset = prompt_dataset(source, mode=mode, rules=rules, environments=environment)
    except (LibraryError, BadInput, ValueError) as error:
        raise _fail("Cannot build:", error, 2) from error
    if out is not None:
        write_prompt_dataset(dataset, out, repo_id=repo_id)
        console.print(f"Wrote {len(dataset)} prompts to {out}", markup=False)
    if repo_id is None:
        return
    folder = Path(tempfile.mkdtemp(prefix="harness-prompts-"))
    try:
        result = publish_prompt_dataset(dataset, folder, repo_id, private=private)
    except PublishError as error:
        raise _fail("Publish failed:", error, 1) from error
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    console.print(f"Published {len(dataset)} prompts to {result.url} (commit {result.commit_sha})", markup=False)


def _write_verl(source: str, out: Path, rules: str, mode: Mode, environments: list[str] | None) -> None:
    from harness.errors import BadInput
    from harness.library import LibraryError
    from harness.registry import rules_profile
    from harness.train.verl_dataset import verl_rows, write_verl_dataset

    try:
        rows = verl_rows(source, rules=rules_profile(rules).name, mode=mode, environments=environments)
    except (LibraryError, BadInput, ValueError) as error:
        raise _fail("Cannot build:", error, 2) from error
    target = write_verl_dataset(rows, out)
    console.print(f"Wrote {len(rows)} verl rows to {target}", markup=False)


def register(app: typer.Typer) -> None:
    """Add ``train`` to the ``harness`` command."""
    app.add_typer(train_app, name="train")
