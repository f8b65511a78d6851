"""``harness rescore``: a stored run re-scored with a library's current checks, no model called (but the judge of
judged checks, when ``--judge-model`` asks for one)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.aio import run_to_end
from harness.cli.errors import RefusingCommand
from harness.cli.options import AllowWeakSandbox, SandboxWorkers
from harness.console import console, err_console, labelled, outside

MAX_REFUSALS_SHOWN = 20


def rescore(
    run_dir: Annotated[Path, typer.Argument(help="The run folder to re-score (it is only read).")],
    envs: Annotated[str, typer.Option("--envs", help="The library whose checks decide: a folder or a Hub id.")],
    out: Annotated[Path, typer.Option("--out", help="A new folder for the re-scored run.")],
    workers: SandboxWorkers = 0,
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes replayed at once.")] = 16,
    allow_weak_sandbox: AllowWeakSandbox = False,
    judge_model: Annotated[
        str | None,
        typer.Option(
            "--judge-model",
            help="Judge the scenarios' LLM-judged checks anew with this model (an alias). Default: replay the "
            "judge's replies stored with each episode, with no request.",
        ),
    ] = None,
) -> None:
    """Re-score RUN_DIR's episodes with the checks of --envs: each final state is rebuilt by replaying the recorded
    tool calls in the jail. Only recomputed verdicts reach --out: an episode that cannot be re-scored (a record that
    contradicts itself, an environment or scenario the library lacks or changed, a replay that differs, no final
    state) is listed with its reason and left out of the new results and summary. Exit 0 when every episode was
    re-scored, 1 when some were not (the new folder holds the others), 2 when nothing could start. LLM-judged checks
    replay the stored judge replies unless --judge-model names a judge to ask again."""
    from harness.episode.judging import Judge
    from harness.errors import BadInput
    from harness.library import load_library
    from harness.llm import LLMClient
    from harness.rescore import NotRescoredCause, RescoreReport, discard_output, plan_rescore, rescore_run

    try:
        library = load_library(envs)
    except BadInput:
        raise
    except (OSError, ValueError) as error:
        raise BadInput(f"cannot load {envs}: {error}") from error
    plan = plan_rescore(run_dir, library, out)
    if judge_model is not None:
        problem = LLMClient().route_problem(judge_model)
        if problem is not None:
            raise BadInput(f"--judge-model: {problem}")

    async def run() -> RescoreReport:
        client = LLMClient() if judge_model is not None else None
        try:
            if client is not None and judge_model is not None:
                plan.judge = Judge.of(client, judge_model, plan.seed)
            async with library.jail(allow_weak_sandbox=allow_weak_sandbox, workers=workers).pool() as pool:
                return await rescore_run(plan, pool, concurrency=concurrency)
        finally:
            if client is not None:
                await client.aclose()

    try:
        report = run_to_end(run())
    except BaseException:
        discard_output(out)
        raise
    for item in report.not_rescored[:MAX_REFUSALS_SHOWN]:
        label = "refused:" if item.cause is NotRescoredCause.CONTRADICTORY_RECORD else "not re-scored:"
        line = f"episode {item.episode_id} ({item.scenario_id}): {item.reason}"
        err_console.print(labelled(label, "red", line, multiline=False), soft_wrap=True)
    if len(report.not_rescored) > MAX_REFUSALS_SHOWN:
        more = len(report.not_rescored) - MAX_REFUSALS_SHOWN
        err_console.print(outside(f"… and {more} more episodes not re-scored (see rescore.json)"), soft_wrap=True)
    console.print(
        outside(
            f"Re-scored {report.rescored} episodes of {report.run_id} into {out} ({report.changed} changed verdict, "
            f"{report.by_rules} environment failures scored by the rules); {len(report.not_rescored)} of "
            f"{report.episodes} not re-scored and left out of the new folder"
        ),
        soft_wrap=True,
    )
    if report.judged or report.judge_replayed:
        console.print(
            outside(
                f"Judged checks: {report.judged} episodes judged anew by {judge_model}, {report.judge_replayed} "
                "decided by their stored judge replies (replayed, no request)"
            ),
            soft_wrap=True,
        )
    if not report.complete:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("rescore", cls=RefusingCommand)(rescore)
