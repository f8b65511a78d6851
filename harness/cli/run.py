"""``harness run`` and ``harness validate``: run agents on scenarios, check a library.

The flags of ``harness run`` are generated from :class:`harness.run.config.RunConfig` (see
:mod:`harness.cli.config_flags`): a new run setting is a new field there, with its description, and nothing here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.table import Table
from rich.text import Text

from harness.cli.aio import run_to_end
from harness.cli.config_flags import ConfigFlags
from harness.cli.errors import RefusingCommand
from harness.cli.options import AllowWeakSandbox, RayAddress, SandboxWorkers
from harness.console import console, outside
from harness.errors import BadInput
from harness.run.config import RunConfig

if TYPE_CHECKING:
    from harness.run import RunOutcome, RunPlan

RUN_FLAGS = ConfigFlags(RunConfig)


@RUN_FLAGS.options
def run(**values: Any) -> None:
    """Run an agent on scenarios, score the final states, and print a summary per environment and mode.

    With no arguments: the embedded local model on a small slice of the bundled seed library, offline.
    """
    settings = RUN_FLAGS.values(values)
    check_choices(
        mode=settings["mode"],
        agent=settings["agent_kind"],
        models={
            "--model": settings["model"],
            "--user-model": settings["user_model"],
            "--judge-model": settings["judge_model"],
        },
    )
    check_rules(settings["rules"])
    demo = (
        settings["model"] == "local"
        and settings["limit"] is None
        and not settings["scenario"]
        and not settings["env"]
        and settings["envs"] is None
    )
    if demo:
        # The offline demo: one scenario from each of four environments, about a minute on two cores.
        from harness.library import load_library

        firsts: dict[str, str] = {}
        for item in load_library().scenarios:
            firsts.setdefault(item.environment_id, item.id)
        settings["scenario"] = list(firsts.values())[:4]
        settings["max_steps"] = settings["max_steps"] or 8
    config = RUN_FLAGS.build(**settings)
    from harness.cli.progress import print_exit_line, print_summary

    outcome = run_with_progress(config)
    baselines: dict[str, RunOutcome] = {}
    if demo and outcome.stopped_by is None and config.agent_kind not in ("oracle", "do_nothing"):
        baselines = run_baselines(config, outcome.run_dir)
    print_summary(console, outcome, baselines)
    resume_command = rerun_command(["--resume", "--out", str(outcome.run_dir)])
    retry_flags = ["--resume", "--retry-errors", *(["--retry-unretryable"] if outcome.unretryable_errors else [])]
    retry_command = rerun_command([*retry_flags, "--out", str(outcome.run_dir)])
    raise typer.Exit(print_exit_line(console, outcome, baselines, resume=resume_command, retry=retry_command))


def rerun_command(extra: list[str]) -> str:
    """This command line again, with ``extra`` in place of any --resume, --retry-errors, --retry-unretryable and
    --out it had."""
    import shlex

    kept: list[str] = []
    arguments = iter(sys.argv[1:])
    for argument in arguments:
        if argument in (
            "--resume",
            "--retry-errors",
            "--retry-unretryable",
            "--no-resume",
            "--no-retry-errors",
            "--no-retry-unretryable",
        ):
            continue
        if argument == "--out":
            next(arguments, None)
            continue
        if argument.startswith("--out="):
            continue
        kept.append(argument)
    return shlex.join(["harness", *kept, *extra])


def check_choices(*, mode: str, agent: str, models: dict[str, str | None]) -> None:
    """Bad choices, one line each, before anything is loaded."""
    from agents.factory import AGENT_KINDS

    problems = []
    if mode is not None and mode not in ("nonconv", "conv", "both"):
        problems.append(f"--mode {mode!r}: use nonconv, conv or both")
    if agent not in AGENT_KINDS:
        problems.append(f"--agent {agent!r}: use one of {', '.join(AGENT_KINDS)}")
    for flag, name in models.items():
        # With --agent oracle the agent's model is never called, so naming it "oracle" confuses nobody.
        if name in AGENT_KINDS and not (flag in ("--model", "--teacher") and name == agent):
            problems.append(f"{flag} {name!r}: {name} is an agent, not a model: use --agent {name}")
    if problems:
        raise BadInput(*problems)


def check_rules(rules: str | None) -> None:
    from harness.registry import profile_names

    if rules is not None and rules not in profile_names():
        raise BadInput(f"--rules {rules!r}: use one of {', '.join(profile_names())}")


def run_baselines(config: RunConfig, run_dir: Path) -> dict[str, RunOutcome]:
    """The same scenarios with the reference actions replayed and with an agent that does nothing: the scale
    a model's score sits on (no model is called; each takes well under a second of episode time)."""
    from agents.run_adapters import agent_factory, user_factory
    from harness.run import run as run_episodes

    outcomes = {}
    for label, kind in (("reference actions (oracle)", "oracle"), ("do nothing", "do_nothing")):
        baseline = config.model_copy(
            # The default step limit: the reference actions are replayed in full, whatever limit the model had.
            update={
                "agent_kind": kind,
                "out": run_dir / "baselines" / kind,
                "resume": True,
                "mode": "nonconv",
                "max_steps": None,
            }
        )
        outcomes[label] = run_to_end(
            run_episodes(baseline, agent_factory=agent_factory, user_factory=user_factory, stop_on_signals=True)
        )
        if outcomes[label].stopped_by is not None:
            break
    return outcomes


def run_with_progress(config: RunConfig) -> RunOutcome:
    """Run with a header, the progress view and the stock agents."""
    from agents.run_adapters import agent_factory, user_factory
    from harness.cli.progress import ProgressView, print_header
    from harness.run import run as run_episodes

    view = ProgressView(console)

    def start(plan: RunPlan) -> None:
        print_header(console, config, plan)
        view.__enter__()

    try:
        return run_to_end(
            run_episodes(
                config,
                agent_factory=agent_factory,
                user_factory=user_factory,
                on_progress=view.update,
                on_start=start,
                stop_on_signals=True,
            )
        )
    finally:
        view.__exit__(None, None, None)


def validate(
    path: Annotated[str, typer.Argument(help="A folder of environments and scenarios, or a Hub dataset id.")] = "",
    json_output: Annotated[bool, typer.Option("--json", help="Print a JSON report instead of a table.")] = False,
    workers: SandboxWorkers = 0,
    show_all: Annotated[bool, typer.Option("--all", help="List valid records too.")] = False,
    allow_weak_sandbox: AllowWeakSandbox = False,
    ray: RayAddress = None,
) -> None:
    """Check that environments load and that scenarios are sound (solvable, not solved at reset)."""
    from harness.library import load_library
    from harness.validate import ValidationReport, validate_library

    try:
        library = load_library(path or None)
    except BadInput:
        raise
    except (OSError, ValueError) as error:  # a bad folder, Hub id or revision: one line (--debug: traceback)
        raise BadInput(f"cannot load {path or 'the seed library'}: {error}") from error

    async def check() -> object:
        if ray is not None:
            from harness.distributed import validate_on_cluster

            return await validate_on_cluster(
                library, ray, workers=workers or None, allow_weak_sandbox=allow_weak_sandbox
            )
        async with library.jail(allow_weak_sandbox=allow_weak_sandbox, workers=workers).pool() as pool:
            return await validate_library(library, pool)

    report = run_to_end(check())
    assert isinstance(report, ValidationReport)
    if json_output:
        payload = {
            "source": report.source,
            "ok": report.ok,
            "records": [{**r.model_dump(mode="json"), "ok": r.ok} for r in report.records],
        }
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        table = Table(title=outside(f"Validation of {report.source}", multiline=False))
        for column in ("kind", "id", "status", "problems / warnings"):
            table.add_column(column, overflow="fold")
        for record in report.records:
            if record.ok and not show_all and not record.warnings:
                continue
            status = "[green]ok[/green]" if record.ok else "[red]invalid[/red]"
            notes = Text("\n").join(
                [*(outside(p) for p in record.problems), *(outside(w, "yellow") for w in record.warnings)]
            )
            table.add_row(record.kind, outside(record.id, multiline=False), status, notes)
        environments = sum(r.kind == "environment" for r in report.records)
        scenarios = sum(r.kind == "scenario" for r in report.records)
        if table.row_count:
            console.print(table)
        console.print(
            f"{environments} environments, {scenarios} scenarios: "
            + ("[green]all valid[/green]" if report.ok else f"[red]{len(report.invalid)} invalid[/red]")
        )
    raise typer.Exit(0 if report.ok else 1)


def register(app: typer.Typer) -> None:
    """Add ``validate`` and ``run`` to the ``harness`` command."""
    app.command(cls=RefusingCommand)(validate)
    app.command(cls=RefusingCommand)(run)
