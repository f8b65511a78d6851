"""The ``harness`` command line. The only module of ``harness`` that wires in the other folders."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.table import Table
from rich.text import Text

from harness.cli.errors import CommandLine
from harness.console import TerminalLogHandler, console, err_console, labelled, outside

if TYPE_CHECKING:
    from harness.runner import RunConfig, RunOutcome, RunPlan

app = typer.Typer(
    name="harness",
    help="Synthesize stateful tool environments, run agents on them, score final states, publish to the Hub.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
import_app = typer.Typer(help="Import other projects' releases into our records.", no_args_is_help=True)
app.add_typer(import_app, name="import")

command_line = CommandLine(app, err_console)

AllowWeakSandbox = Annotated[
    bool, typer.Option(help="Run Hub code even when a confinement layer is missing (see `harness doctor`).")
]
RequestTimeout = Annotated[float, typer.Option(help="Seconds one model request may take before it is retried.")]
SkipBadRecords = Annotated[
    bool, typer.Option(help="Run without library records that do not load (they are listed in the manifest).")
]

RAY_HELP = (
    "Run episodes on a Ray cluster: HOST:PORT or ray://HOST:PORT to join one, 'auto' for the cluster this machine "
    "belongs to; alone, start a local one."
)


@app.callback()
def _configure(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at debug level.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Print the traceback of an error.")] = False,
) -> None:
    from harness.redact import RedactingFilter

    command_line.debug = debug
    handler = TerminalLogHandler(console=err_console, show_path=False, rich_tracebacks=False)
    handler.addFilter(RedactingFilter())
    if not verbose:
        handler.addFilter(command_line.repeats)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(message)s", handlers=[handler], force=True
    )
    # Python's warnings would otherwise reach stderr uncleaned (a library's warning may quote outside text).
    logging.captureWarnings(True)
    for noisy in ("LiteLLM", "litellm", "httpx", "httpcore", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING if not verbose else logging.INFO)


@app.command()
def validate(
    path: Annotated[str, typer.Argument(help="A folder of environments and scenarios, or a Hub dataset id.")] = "",
    json_output: Annotated[bool, typer.Option("--json", help="Print a JSON report instead of a table.")] = False,
    workers: Annotated[int, typer.Option(help="Sandbox zygotes (fork servers; default 1).")] = 0,
    show_all: Annotated[bool, typer.Option("--all", help="List valid records too.")] = False,
    allow_weak_sandbox: AllowWeakSandbox = False,
    ray: Annotated[str | None, typer.Option(help=RAY_HELP)] = None,
) -> None:
    """Check that environments load and that scenarios are sound (solvable, not solved at reset)."""
    from harness.errors import BadInput
    from harness.library import load_library
    from harness.runner import RunRefused
    from harness.sandbox import SandboxPool
    from harness.validate import validate_library

    try:
        library = load_library(path or None)
    except BadInput:
        raise
    except (OSError, ValueError) as error:  # a bad folder, Hub id or revision: one line (--debug: traceback)
        raise BadInput(f"cannot load {path or 'the seed library'}: {error}") from error

    async def run() -> object:
        if ray is not None:
            from harness.distributed import validate_on_cluster

            return await validate_on_cluster(
                library, ray, workers=workers or None, allow_weak_sandbox=allow_weak_sandbox
            )
        async with SandboxPool(
            workers=workers or None, require_full_confinement=library.from_hub and not allow_weak_sandbox
        ) as pool:
            return await validate_library(library, pool)

    from harness.validate import ValidationReport

    try:
        report = asyncio.run(run())
    except RunRefused as exc:
        err_console.print(outside(exc, "red"), soft_wrap=True)
        raise typer.Exit(2) from None
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


@import_app.command("envscaler")
def import_envscaler_command(
    environments: Annotated[Path, typer.Option(help="EnvScaler environments file (JSON list or dict by env_id).")],
    out: Annotated[Path, typer.Option(help="Folder to write our records to.")],
    scenarios: Annotated[list[Path] | None, typer.Option(help="Scenario files (RL or SFT); repeatable.")] = None,
) -> None:
    """Import EnvScaler's released environments and scenarios."""
    from harness.importers import import_envscaler
    from harness.library import write_seed_layout

    report = import_envscaler(environments, list(scenarios or []))
    write_seed_layout(report.environments, report.scenarios, out)
    console.print(
        f"Imported {len(report.environments)} environments and {len(report.scenarios)} scenarios into {out}",
        markup=False,
        highlight=False,
    )
    for problem in report.problems:
        err_console.print(labelled("skipped", "yellow", problem), soft_wrap=True)
    raise typer.Exit(0 if report.environments or report.scenarios else 1)


@app.command()
def run(
    model: Annotated[
        str, typer.Option(help="Model alias (see harness/data/models.toml) or litellm model string.")
    ] = "local",
    envs: Annotated[
        str | None, typer.Option(help="Folder or Hub dataset id ORG/NAME[@REV]; default the seed library.")
    ] = None,
    mode: Annotated[str, typer.Option(help="nonconv, conv or both.")] = "nonconv",
    agent: Annotated[
        str, typer.Option("--agent", help="function_calling, prompted, oracle (reference actions) or do_nothing.")
    ] = "function_calling",
    user_model: Annotated[str | None, typer.Option(help="Simulated user's model (default: --model).")] = None,
    trials: Annotated[int, typer.Option(help="Trials per scenario and mode (for pass^k).")] = 1,
    env: Annotated[list[str] | None, typer.Option(help="Only this environment id; repeatable.")] = None,
    scenario: Annotated[list[str] | None, typer.Option(help="Only this scenario id; repeatable.")] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many scenarios.")] = None,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight (at most the model alias's max_episodes).")] = 32,
    rpm: Annotated[int | None, typer.Option(help="Requests per minute per endpoint.")] = None,
    tpm: Annotated[int | None, typer.Option(help="Tokens per minute per endpoint.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = 0.0,
    max_tokens: Annotated[int | None, typer.Option(help="Completion token cap per model call.")] = None,
    seed: Annotated[int, typer.Option(help="Base seed for models and sandboxes.")] = 0,
    max_steps: Annotated[
        int | None, typer.Option(help="Agent turns per episode (default 30 nonconv, 40 conv).")
    ] = None,
    rules: Annotated[
        str | None,
        typer.Option(help="Episode rules: harness or envscaler (default: the library's suggestion, else harness)."),
    ] = None,
    include_invalid: Annotated[
        bool, typer.Option(help="Also run scenarios that `harness validate` finds invalid (recorded in the manifest).")
    ] = False,
    out: Annotated[Path | None, typer.Option(help="Run folder (default runs/<time>-<model>).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in --out; only missing episodes run.")] = False,
    retry_errors: Annotated[bool, typer.Option(help="With --resume, also re-run infrastructure errors.")] = False,
    workers: Annotated[int | None, typer.Option(help="Sandbox zygotes (fork servers; default 1).")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="Cache model responses in this folder.")] = None,
    mcp: Annotated[
        str | None, typer.Option(help="Use the environment served over MCP at this URL, or by this stdio command.")
    ] = None,
    allow_weak_sandbox: AllowWeakSandbox = False,
    timeout: RequestTimeout = 120.0,
    skip_bad_records: SkipBadRecords = False,
    ray: Annotated[str | None, typer.Option(help=RAY_HELP)] = None,
) -> None:
    """Run an agent on scenarios, score the final states, and print a summary per environment and mode.

    With no arguments: the embedded local model on a small slice of the bundled seed library, offline.
    """
    from harness.runner import RunConfig

    _check_choices(mode=mode, agent=agent, models={"--model": model, "--user-model": user_model})
    _check_rules(rules)
    demo = model == "local" and limit is None and not scenario and not env and envs is None
    if demo:
        # The offline demo: one scenario from each of four environments, about a minute on two cores.
        from harness.library import load_library

        firsts: dict[str, str] = {}
        for item in load_library().scenarios:
            firsts.setdefault(item.environment_id, item.id)
        scenario = list(firsts.values())[:4]
        max_steps = max_steps or 8
    config = RunConfig(
        model=model,
        agent_kind=agent,
        envs=envs,
        mode=mode,  # type: ignore[arg-type]
        user_model=user_model,
        trials=trials,
        env=list(env or []),
        scenario=list(scenario or []),
        limit=limit,
        concurrency=concurrency,
        rpm=rpm,
        tpm=tpm,
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
        max_steps=max_steps,
        rules=rules,  # type: ignore[arg-type]
        include_invalid=include_invalid,
        out=out,
        resume=resume,
        retry_errors=retry_errors,
        workers=workers,
        cache_dir=cache_dir,
        mcp=mcp,
        allow_weak_sandbox=allow_weak_sandbox,
        timeout=timeout,
        skip_bad_records=skip_bad_records,
        ray=ray,
    )
    from harness.cli_progress import print_exit_line, print_summary

    outcome = _run_with_progress(config)
    baselines: dict[str, RunOutcome] = {}
    if demo and outcome.stopped_by is None and agent not in ("oracle", "do_nothing"):
        baselines = _run_baselines(config, outcome.run_dir)
    print_summary(console, outcome, baselines)
    resume_command = _rerun_command(["--resume", "--out", str(outcome.run_dir)])
    retry_command = _rerun_command(["--resume", "--retry-errors", "--out", str(outcome.run_dir)])
    raise typer.Exit(print_exit_line(console, outcome, baselines, resume=resume_command, retry=retry_command))


def _rerun_command(extra: list[str]) -> str:
    """This command line again, with ``extra`` in place of any --resume, --retry-errors and --out it had."""
    import shlex

    kept: list[str] = []
    arguments = iter(sys.argv[1:])
    for argument in arguments:
        if argument in ("--resume", "--retry-errors", "--no-resume", "--no-retry-errors"):
            continue
        if argument == "--out":
            next(arguments, None)
            continue
        if argument.startswith("--out="):
            continue
        kept.append(argument)
    return shlex.join(["harness", *kept, *extra])


def _check_choices(*, mode: str, agent: str, models: dict[str, str | None]) -> None:
    """Bad choices, one line each, before anything is loaded."""
    from agents.factory import AGENT_KINDS
    from harness.errors import BadInput

    problems = []
    if mode not in ("nonconv", "conv", "both"):
        problems.append(f"--mode {mode!r}: use nonconv, conv or both")
    if agent not in AGENT_KINDS:
        problems.append(f"--agent {agent!r}: use one of {', '.join(AGENT_KINDS)}")
    for flag, name in models.items():
        # With --agent oracle the agent's model is never called, so naming it "oracle" confuses nobody.
        if name in AGENT_KINDS and not (flag in ("--model", "--teacher") and name == agent):
            problems.append(f"{flag} {name!r}: {name} is an agent, not a model: use --agent {name}")
    if problems:
        raise BadInput(*problems)


def _sft_config(**values: Any) -> RunConfig:
    """The run settings of ``harness sft``; a bad value is named by the sft flag that set it."""
    from pydantic import ValidationError

    from harness.cli.errors import validation_lines
    from harness.errors import BadInput
    from harness.runner import RunConfig

    try:
        return RunConfig(**values)
    except ValidationError as error:
        flags = {"trials": "--attempts", "model": "--teacher", "agent_kind": "--agent"}
        raise BadInput(*validation_lines(error, flags)) from None


def _run_baselines(config: RunConfig, run_dir: Path) -> dict[str, RunOutcome]:
    """The same scenarios with the reference actions replayed and with an agent that does nothing: the scale
    a model's score sits on (no model is called; each takes well under a second of episode time)."""
    from agents.run_adapters import agent_factory, user_factory
    from harness.runner import run as run_episodes

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
        outcomes[label] = asyncio.run(
            run_episodes(baseline, agent_factory=agent_factory, user_factory=user_factory, stop_on_signals=True)
        )
        if outcomes[label].stopped_by is not None:
            break
    return outcomes


def _check_rules(rules: str | None) -> None:
    from harness.rules import RULES_NAMES

    if rules is not None and rules not in RULES_NAMES:
        raise typer.BadParameter(f"--rules must be one of: {', '.join(RULES_NAMES)}")


def _run_with_progress(config: RunConfig) -> RunOutcome:
    """Run with a header, the progress view and the stock agents."""
    from agents.run_adapters import agent_factory, user_factory
    from harness.cli_progress import ProgressView, print_header
    from harness.runner import run as run_episodes

    view = ProgressView(console)

    def start(plan: RunPlan) -> None:
        print_header(console, config, plan)
        view.__enter__()

    try:
        return asyncio.run(
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


@app.command()
def doctor(
    json_output: Annotated[bool, typer.Option("--json", help="Print the layers as JSON.")] = False,
) -> None:
    """Show which sandbox confinement layers are active on this machine, and why any is missing."""
    from harness.cli.doctor import doctor as run_doctor

    raise typer.Exit(run_doctor(console, json_output=json_output))


@app.command()
def sft(
    teacher: Annotated[str, typer.Option(help="The teacher model (alias or litellm string).")],
    out: Annotated[Path, typer.Option(help="Output folder: rollouts/ plus the SFT files.")],
    envs: Annotated[str | None, typer.Option(help="Folder or Hub dataset id; default the seed library.")] = None,
    mode: Annotated[str, typer.Option(help="nonconv, conv or both.")] = "both",
    attempts: Annotated[int, typer.Option(help="Teacher attempts per scenario and mode.")] = 2,
    min_reward: Annotated[
        float | None, typer.Option(help="Keep episodes with state reward ≥ this (default: success only).")
    ] = None,
    allow_errors: Annotated[bool, typer.Option(help="Keep episodes that recorded agent errors.")] = False,
    keep_reasoning: Annotated[bool, typer.Option(help="Keep reasoning content in assistant turns.")] = True,
    split_turns: Annotated[bool, typer.Option(help="Also write one ShareGPT sample per assistant turn.")] = False,
    agent: Annotated[str, typer.Option("--agent", help="function_calling, prompted or oracle.")] = "function_calling",
    user_model: Annotated[str | None, typer.Option(help="Simulated user's model (default: the teacher).")] = None,
    env: Annotated[list[str] | None, typer.Option(help="Only this environment id; repeatable.")] = None,
    scenario: Annotated[list[str] | None, typer.Option(help="Only this scenario id; repeatable.")] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many scenarios.")] = None,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight.")] = 32,
    rpm: Annotated[int | None, typer.Option(help="Requests per minute per endpoint.")] = None,
    tpm: Annotated[int | None, typer.Option(help="Tokens per minute per endpoint.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Teacher sampling temperature.")] = 0.7,
    rules: Annotated[
        str | None,
        typer.Option(help="Episode rules: harness or envscaler (default: the library's suggestion, else harness)."),
    ] = None,
    include_invalid: Annotated[
        bool, typer.Option(help="Also roll out scenarios that `harness validate` finds invalid.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Base seed.")] = 0,
    cache_dir: Annotated[Path | None, typer.Option(help="Cache model responses in this folder.")] = None,
    allow_weak_sandbox: AllowWeakSandbox = False,
    timeout: RequestTimeout = 120.0,
    skip_bad_records: SkipBadRecords = False,
    ray: Annotated[str | None, typer.Option(help=RAY_HELP)] = None,
) -> None:
    """Roll out a teacher (resumable), keep the episodes that reach the bar, export SFT datasets."""
    from harness.metrics import read_results
    from harness.sft import SelectionRule, export

    _check_choices(mode=mode, agent=agent, models={"--teacher": teacher, "--user-model": user_model})
    _check_rules(rules)
    rollouts = out / "rollouts"
    config = _sft_config(
        model=teacher,
        agent_kind=agent,
        envs=envs,
        mode=mode,
        user_model=user_model,
        trials=attempts,
        env=list(env or []),
        scenario=list(scenario or []),
        limit=limit,
        concurrency=concurrency,
        rpm=rpm,
        tpm=tpm,
        temperature=temperature,
        rules=rules,
        include_invalid=include_invalid,
        seed=seed,
        out=rollouts,
        resume=(rollouts / "manifest.json").exists(),
        retry_errors=True,
        cache_dir=cache_dir,
        allow_weak_sandbox=allow_weak_sandbox,
        timeout=timeout,
        skip_bad_records=skip_bad_records,
        ray=ray,
    )
    from harness.cli_progress import print_exit_line

    outcome = _run_with_progress(config)
    again = _rerun_command(["--out", str(out)])
    if outcome.stopped_by is not None:
        raise typer.Exit(print_exit_line(console, outcome, {}, resume=again, retry=again))
    trajectories = read_results(outcome.run_dir / "results.jsonl")
    stats = export(
        trajectories,
        out,
        rule=SelectionRule(min_reward=min_reward, allow_errors=allow_errors),
        keep_reasoning=keep_reasoning,
        split=split_turns,
    )
    table = Table(title=outside(f"SFT data in {out}", multiline=False))
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("teacher episodes", str(stats.episodes))
    table.add_row("kept", str(stats.kept))
    for reason, count in sorted(stats.dropped.items()):
        table.add_row(outside(f"dropped: {reason}"), str(count))
    for stem, count in stats.samples.items():
        table.add_row(outside(f"rows in {stem}.jsonl"), str(count))
    for label, figures in (("turns", stats.turns), ("tool calls", stats.tool_calls), ("tokens", stats.tokens)):
        if figures:
            table.add_row(f"{label} per sample (mean / max)", f"{figures['mean']:.1f} / {figures['max']:.0f}")
    console.print(table)
    raise typer.Exit(print_exit_line(console, outcome, {}, resume=again, retry=again))


def _register_subcommands() -> None:
    from harness.cli import interop as cli_bfcl, leaderboard as cli_leaderboard, publish as cli_publish, serve as cli_serve, synth as cli_synth, synth_scenarios as cli_synth_scenarios

    cli_bfcl.register(app, import_app)
    cli_publish.register(app)
    cli_leaderboard.register(app)
    cli_serve.register(app)
    cli_synth_scenarios.register(cli_synth.synth_app)
    cli_synth.register(app)


_register_subcommands()


def with_default_ray_address(argv: list[str]) -> list[str]:
    """``--ray`` given without an address means a local cluster: typer options always take a value."""
    result = list(argv)
    for index, argument in enumerate(result):
        if argument == "--ray" and (index + 1 == len(result) or result[index + 1].startswith("-")):
            result.insert(index + 1, "local")
    return result


def main() -> None:
    sys.argv[1:] = with_default_ray_address(sys.argv[1:])
    sys.exit(command_line())


if __name__ == "__main__":
    main()
