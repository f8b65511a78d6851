"""``harness synth ...``: synthesis pipelines. ``synth_app`` is shared: each pipeline adds its command to it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from harness.cli.aio import run_to_end
from harness.cli.errors import EXIT_COST_LIMIT, RefusingCommand
from harness.cli.options import (
    EmbeddingModel,
    ModelRpm,
    NoCache,
    PriceModel,
    RequestTimeout,
    SandboxWorkers,
    SynthMaxRequests,
)
from harness.console import console, outside
from harness.errors import BadInput

if TYPE_CHECKING:
    from synth.costs import CostReport
    from synth.pipeline import SynthEnvsResult

synth_app = typer.Typer(help="Synthesize environments and scenarios with a model.", no_args_is_help=True)


@synth_app.command("envs", cls=RefusingCommand)
def envs_command(
    source: Annotated[
        str,
        typer.Option("--from", help="JSON Lines file of tasks (field 'task' or --column), or a Hub dataset id."),
    ],
    model: Annotated[str, typer.Option(help="Model alias or litellm model string that plays every role.")],
    out: Annotated[Path, typer.Option(help="Output folder; a run over an existing folder resumes it.")],
    column: Annotated[str | None, typer.Option(help="Field or column holding the task text.")] = None,
    rounds: Annotated[int, typer.Option(help="Dual-agent assessment rounds per environment.")] = 100,
    threshold: Annotated[float, typer.Option(help="Share of Pass + Warning rounds an environment needs.")] = 0.85,
    tests_per_tool: Annotated[
        int, typer.Option(help="Assessment rounds per tool at most; every tool must be exercised at least once.")
    ] = 10,
    similarity: Annotated[float, typer.Option(help="Cosine similarity at which descriptions are merged.")] = 0.9,
    max_envs: Annotated[int | None, typer.Option(help="Build at most this many environments (themes).")] = None,
    max_tasks: Annotated[int | None, typer.Option(help="Read at most this many tasks.")] = None,
    concurrency: Annotated[int, typer.Option(help="Environments built in flight.")] = 8,
    max_requests: SynthMaxRequests = 8,
    rpm: ModelRpm = None,
    repairs: Annotated[int, typer.Option(help="Repair rounds for methods the checker failed.")] = 3,
    method_attempts: Annotated[int, typer.Option(help="Tries per method before modeling gives up.")] = 3,
    embedding_model: EmbeddingModel = None,
    price_model: PriceModel = "gpt-4.1",
    temperature: Annotated[float, typer.Option(help="Sampling temperature of every role.")] = 0.0,
    workers: SandboxWorkers = 0,
    no_cache: NoCache = False,
    timeout: RequestTimeout = 120.0,
    ray: Annotated[
        str | None,
        typer.Option(
            help="Build each theme's environment on a Ray cluster: HOST:PORT or ray://HOST:PORT to join one, "
            "'auto' for the cluster this machine belongs to; alone, start a local one. This process still writes OUT."
        ),
    ] = None,
    cost_limit: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Start no task discovery or environment build once this invocation has spent this many USD (answers "
            "cached under OUT by an earlier one cost nothing when replayed). The model needs a price.",
        ),
    ] = None,
) -> None:
    """Build environments from a task set: discover, plan, model, assess and repair, validate."""
    from harness.cli.synth_scenarios import cluster_for
    from harness.sandbox.spec import CodeOrigin, JailSpec
    from synth.costs import UnknownPriceModel
    from synth.discovery import TaskSourceError
    from synth.pipeline import SynthEnvsConfig, synthesize_environments

    config = SynthEnvsConfig(
        source=source,
        model=model,
        out=out,
        column=column,
        rounds=rounds,
        threshold=threshold,
        tests_per_tool=tests_per_tool,
        similarity=similarity,
        max_envs=max_envs,
        max_tasks=max_tasks,
        concurrency=concurrency,
        max_requests=max_requests,
        rpm=rpm,
        repairs=repairs,
        method_attempts=method_attempts,
        embedding_model=embedding_model,
        price_model=price_model,
        temperature=temperature,
        sandbox_workers=workers or None,
        cache_answers=not no_cache,
        timeout=timeout,
        cost_limit=cost_limit,
    )
    # The environments are written by this run's model: code of this machine, under its jail.
    cluster = cluster_for(ray, JailSpec.for_code(CodeOrigin.LOCAL, workers=workers or None))

    async def run() -> SynthEnvsResult:
        try:
            return await synthesize_environments(config, cluster=cluster)
        finally:
            if cluster is not None:
                await cluster.close()

    try:
        result = run_to_end(run())
    except (TaskSourceError, UnknownPriceModel) as exc:
        raise BadInput(str(exc)) from exc
    print_envs_result(result, out)
    if result.not_started:
        console.print(
            f"[yellow]exit {EXIT_COST_LIMIT}: stopped by --cost-limit with {result.not_started} discoveries or builds "
            "not started; rerun with a higher --cost-limit to continue[/yellow]",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_COST_LIMIT)


@synth_app.command("report", cls=RefusingCommand)
def report_command(
    folder: Annotated[Path, typer.Argument(help="Output folder of 'harness synth envs', 'scenarios' or 'queries'.")],
    out: Annotated[Path | None, typer.Option(help="Folder for the report files (default: FOLDER).")] = None,
) -> None:
    """One page (Markdown and HTML) on a synthesis run: acceptance per stage, rejection reasons, coverage,
    solve rates, duplicates and cost per accepted item against the papers' figures."""
    from synth.report import ReportError, write_report

    if not folder.is_dir():
        raise BadInput(f"{folder} is not a folder")
    try:
        page, markdown, page_html = write_report(folder, out)
    except ReportError as exc:
        raise BadInput(str(exc)) from exc
    except (ValueError, KeyError) as exc:
        problem = " ".join(str(exc).split())
        raise BadInput(f"cannot read {folder}: {problem}") from exc
    table = Table(title=outside(f"Synthesis report ({page.kind})", multiline=False))
    for name in ("stage", "evaluated", "passed"):
        table.add_column(name, justify="left" if name == "stage" else "right")
    for stage in page.stages:
        table.add_row(outside(stage.stage, multiline=False), str(stage.evaluated), str(stage.passed))
    console.print(table)
    per = f"${page.usd_per_accepted:.4f}" if page.usd_per_accepted is not None else "n/a"
    console.print(
        f"{page.accepted} of {page.attempted} accepted; {per} per accepted item at {page.price_model} prices "
        f"({page.reference_label}: ${page.reference_usd:.2f})",
        markup=False,
    )
    console.print(f"written to {markdown} and {page_html}", markup=False)


def print_envs_result(result: SynthEnvsResult, out: Path) -> None:
    kept = sum(1 for outcome in result.discovery if outcome.keep)
    console.print(
        f"tasks: {len(result.discovery)} read, {kept} kept; themes: {len(result.themes)}; "
        f"environments: [green]{len(result.accepted)} accepted[/green], [red]{len(result.rejected)} rejected[/red]"
    )
    if result.rejected:
        table = Table(title="Rejected")
        for name in ("theme", "name", "stage", "reason"):
            table.add_column(name)
        for rejection in result.rejected:
            table.add_row(
                outside(rejection.theme_id, multiline=False),
                outside(rejection.name or "", multiline=False),
                outside(rejection.stage, multiline=False),
                outside(rejection.reason, limit=200),
            )
        console.print(table)
    console.print(cost_table(result.costs))
    fresh = result.fresh_usage
    console.print(
        f"this invocation: {fresh.requests - fresh.cached_requests} model calls, {fresh.cached_requests} cached; "
        f"wall {result.wall_seconds:.1f}s"
    )
    console.print(f"written to {out}/environments, {out}/rejected.jsonl, {out}/costs.json", markup=False)


def cost_table(costs: CostReport) -> Table:
    input_price, output_price = costs.price_per_million
    table = Table(
        title=outside(
            f"Costs at {costs.price_model} prices (${input_price:.2f} / ${output_price:.2f} per 1M tokens)",
            multiline=False,
        )
    )
    for name in ("stage", "requests", "cached", "prompt tokens", "completion tokens", "USD"):
        table.add_column(name, justify="right" if name != "stage" else "left")
    for stage in [*costs.stages, costs.total]:
        table.add_row(
            outside(stage.stage, multiline=False),
            str(stage.requests),
            str(stage.cached_requests),
            f"{stage.prompt_tokens:,}",
            f"{stage.completion_tokens:,}",
            f"{stage.usd:.4f}",
        )
    per_env = f"{costs.usd_per_accepted:.4f}" if costs.usd_per_accepted is not None else "n/a (none accepted)"
    table.caption = (
        f"USD per accepted environment: {per_env} (whole run / {costs.accepted}); "
        f"skeleton paper: {costs.reference_usd_per_environment:.2f}"
    )
    return table


def register(app: typer.Typer) -> None:
    """Add ``synth`` (with every pipeline registered on ``synth_app``) to the ``harness`` command."""
    app.add_typer(synth_app, name="synth")
