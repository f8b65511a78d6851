"""``harness synth scenarios | graph | queries``: scenario synthesis, the tool dependency graph, chains to scenarios.

``register(synth_app)`` adds the three commands to the shared ``synth`` command group.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from harness.cli.aio import run_to_end
from harness.cli.errors import EXIT_COST_LIMIT, RefusingCommand
from harness.cli.options import (
    AllowWeakSandbox,
    DedupSimilarity,
    EmbeddingModel,
    ModelRpm,
    ModelTpm,
    NoCache,
    PriceModel,
    RequestTimeout,
    SandboxWorkers,
    SynthCostLimit,
    SynthMaxRequests,
)
from harness.console import console, markup_text, outside
from harness.errors import BadInput

if TYPE_CHECKING:
    from harness.library import Library
    from harness.llm import LLMClient
    from harness.sandbox.spec import JailSpec
    from synth.scenarios import SynthesisReport

DEFAULT_SIMILARITY = 0.92  # synth.dedup.DEFAULT_SIMILARITY, without importing synth at CLI start-up

RayOption = Annotated[
    str | None,
    typer.Option(
        help="Run the attempts on a Ray cluster: HOST:PORT or ray://HOST:PORT to join one, 'auto' for the cluster "
        "this machine belongs to; alone, start a local one. This process still writes OUT."
    ),
]

EnvsOption = Annotated[
    str | None, typer.Option("--envs", help="Environments: a folder or Hub id (default: seed library).")
]


def _client(
    out: Path, max_requests: int, rpm: int | None, tpm: int | None, cache: bool, timeout: float = 120.0
) -> LLMClient:
    from harness.llm import EndpointLimits, LLMClient

    return LLMClient(
        cache_dir=out / "llm_cache" if cache else None,
        default_limits=EndpointLimits(concurrency=max_requests, rpm=rpm, tpm=tpm),
        timeout=timeout,
    )


def _library(envs: str | None) -> Any:
    from harness.library import load_library

    return load_library(envs or None)


def _environments(envs: str | None, only: list[str] | None) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    return _environments_of(_library(envs), only)


def _environments_of(library: Any, only: list[str] | None) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    environments = [e for e in library.environments.values() if not only or e.id in only]
    samples: dict[str, dict[str, Any]] = {}
    for scenario in library.scenarios:
        samples.setdefault(scenario.environment_id, scenario.initial_state)
    if not environments:
        raise BadInput("no environments found")
    return environments, samples


def cluster_for(ray: str | None, jail: JailSpec) -> Any:
    """The cluster the attempts run on (joined now, before any work), its executors' pools made from ``jail``, or
    None for a local run."""
    if ray is None:
        return None
    from synth.distributed import RaySynthesis

    cluster = RaySynthesis(ray, jail=jail)
    cluster.connect()  # a cluster that cannot be joined refuses the command (ClusterUnavailable, status 2)
    return cluster


async def full_pool(jail: JailSpec) -> Any:
    """A started sandbox pool made from ``jail``; when the code comes from the Hub and a confinement layer is
    missing, one line and exit status 2 before any work (unless --allow-weak-sandbox)."""
    pool = jail.pool()
    await pool.start()  # WeakSandbox refuses the command
    return pool


def synthesis_jail(library: Library, allow_weak_sandbox: bool, workers: int) -> JailSpec:
    """The jail synthesis from ``library`` runs in: the trust rule applied to where the library came from; every
    optional module allowed (the checks and states a model writes may name modules the library's code does not)."""
    from harness.sandbox.spec import JailSpec

    return JailSpec.for_code(library.code_origin, allow_weak_sandbox=allow_weak_sandbox, workers=workers or None)


async def _synthesize(cluster: Any, work: Any) -> SynthesisReport:
    """Await ``work`` and close ``cluster`` after it (a refusal of the cluster refuses the command)."""
    try:
        report: SynthesisReport = await work
        return report
    finally:
        if cluster is not None:
            await cluster.close()


def print_report(report: SynthesisReport, out: Path, what: str) -> None:
    table = Table(title=f"Gates ({report.attempted} attempts)")
    for column in ("gate", "evaluated", "passed", "acceptance"):
        table.add_column(column, justify="left" if column == "gate" else "right")
    for gate, tally in report.gates.items():
        rate = f"{tally.rate:.0%}" if tally.rate is not None else "n/a"
        table.add_row(outside(gate, multiline=False), str(tally.evaluated), str(tally.passed), rate)
    console.print(table)
    if report.rejected_by:
        rejected_by = ", ".join(f"{g} {n}" for g, n in sorted(report.rejected_by.items()))
        console.print(f"rejected by: {rejected_by}", markup=False, soft_wrap=True)
    console.print(f"duplicates dropped: {report.duplicates} (by {report.dedup})", markup=False)
    per = f"${report.usd_per_accepted:.4f}" if report.usd_per_accepted is not None else "n/a (none accepted)"
    console.print(
        f"[green]{report.accepted} {what} accepted[/green] of {report.attempted}; "
        f"{report.usage.requests} model calls ({report.usage.cached_requests} cached), "
        f"{report.usage.prompt_tokens:,} + {report.usage.completion_tokens:,} tokens; "
        f"${report.usd_total:.4f} at {markup_text(report.price_model)} prices, {per} per accepted scenario "
        f"(skeleton paper: ${report.reference_usd_per_scenario:.2f})"
    )
    console.print(f"written to {out}/scenarios, {out}/rejected.jsonl, {out}/report.json", markup=False)
    if report.not_started:
        console.print(
            f"[yellow]exit {EXIT_COST_LIMIT}: stopped by --cost-limit with {report.not_started} attempts not started; "
            "rerun with a higher --cost-limit to continue[/yellow]",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_COST_LIMIT)


def register(synth_app: typer.Typer) -> None:
    @synth_app.command("scenarios", cls=RefusingCommand)
    def scenarios_command(
        model: Annotated[str, typer.Option(help="Model alias or litellm model string that writes the scenarios.")],
        out: Annotated[Path, typer.Option(help="Output folder; a run over an existing folder resumes it.")],
        envs: EnvsOption = None,
        per_env: Annotated[int, typer.Option("--per-env", help="Scenarios attempted per environment.")] = 3,
        solve_with: Annotated[
            str | None, typer.Option("--solve-with", help="Teacher model that must solve each scenario.")
        ] = None,
        attempts: Annotated[int, typer.Option(help="Teacher attempts per scenario.")] = 3,
        probes: Annotated[int, typer.Option(help="Single calls probed per scenario (0: no probing).")] = 8,
        env: Annotated[list[str] | None, typer.Option(help="Only this environment id; repeatable.")] = None,
        concurrency: Annotated[int, typer.Option(help="Scenarios in flight.")] = 4,
        max_requests: SynthMaxRequests = 4,
        rpm: ModelRpm = None,
        tpm: ModelTpm = None,
        temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
        price_model: PriceModel = "gpt-4.1",
        dedup_similarity: DedupSimilarity = DEFAULT_SIMILARITY,
        embedding_model: EmbeddingModel = None,
        workers: SandboxWorkers = 0,
        no_cache: NoCache = False,
        timeout: RequestTimeout = 120.0,
        ray: RayOption = None,
        allow_weak_sandbox: AllowWeakSandbox = False,
        cost_limit: SynthCostLimit = None,
    ) -> None:
        """Initial states, tasks, user profiles and check functions for each environment, gated."""
        from synth.scenarios import ScenarioSynthesisConfig, synthesize_scenarios

        library = _library(envs)
        jail = synthesis_jail(library, allow_weak_sandbox, workers)
        environments, _ = _environments_of(library, env)
        config = ScenarioSynthesisConfig(
            model=model,
            per_env=per_env,
            solve_with=solve_with,
            attempts=attempts,
            probes=probes,
            concurrency=concurrency,
            temperature=temperature,
            price_model=price_model,
            dedup_similarity=dedup_similarity or None,
            embedding_model=embedding_model,
            cost_limit=cost_limit,
        )

        cluster = cluster_for(ray, jail)

        async def run() -> SynthesisReport:
            # over Ray, answers are not cached: executors cannot write into OUT, whose one writer is this process
            pool = None if cluster is not None else await full_pool(jail)
            client = _client(out, max_requests, rpm, tpm, not no_cache and cluster is None, timeout)
            try:
                if cluster is not None:
                    work = synthesize_scenarios(environments, config, out, client=client, cluster=cluster)
                    return await _synthesize(cluster, work)
                assert pool is not None
                return await synthesize_scenarios(environments, config, out, client=client, pool=pool)
            finally:
                await client.aclose()
                if pool is not None:
                    await pool.close()

        print_report(run_to_end(run()), out, "scenarios")

    @synth_app.command("graph", cls=RefusingCommand)
    def graph_command(
        out: Annotated[Path, typer.Option(help="JSON file to write the graph to.")],
        envs: EnvsOption = None,
        threshold: Annotated[float, typer.Option(help="Cosine similarity above which an edge is added.")] = 0.85,
        picture: Annotated[Path | None, typer.Option(help="Also draw the graph to this PNG file.")] = None,
        model: Annotated[
            str | None, typer.Option(help="Model for the output-listing, input-classing and edge passes.")
        ] = None,
        embedding_model: EmbeddingModel = None,
        cross_env: Annotated[
            bool, typer.Option("--cross-env", help="Also add edges between environments (default: within each).")
        ] = False,
        prune: Annotated[
            bool, typer.Option("--prune", help="Let --model prune spurious embedding edges (needs --model).")
        ] = False,
        match_names: Annotated[
            bool, typer.Option("--match-names/--no-match-names", help="Also link same-name identifiers.")
        ] = True,
        env: Annotated[list[str] | None, typer.Option(help="Only this environment id; repeatable.")] = None,
        timeout: RequestTimeout = 120.0,
    ) -> None:
        """Build the tool dependency graph of a set of environments."""
        from harness.schema import ModelSettings, Usage
        from synth.answers import Asker
        from synth.graph import GraphModel, build_graph, draw_graph, model_graph_passes

        environments, samples = _environments(envs, env)
        if prune and not model:
            raise BadInput("--prune needs --model")

        async def run() -> Any:
            passes = GraphModel()
            client = None
            usage = Usage()
            if model:
                client = _client(out.parent, 8, None, None, True, timeout)
                passes = model_graph_passes(
                    Asker(client, ModelSettings(model=model, temperature=0.0)), usage, prune=prune
                )
            try:
                return await build_graph(
                    environments,
                    embedding_model=embedding_model,
                    threshold=threshold,
                    cross_environment=cross_env,
                    sample_states=samples,
                    model=passes,
                    match_names=match_names,
                ), usage
            finally:
                if client is not None:
                    await client.aclose()

        started = time.perf_counter()
        graph, usage = run_to_end(run())
        graph.details["build_seconds"] = round(time.perf_counter() - started, 2)
        graph.save(out)
        details = graph.details
        console.print(
            f"{details['tools']} tools, {details['parameters']} parameters, {details['edges']} edges "
            f"({', '.join(f'{k} {v}' for k, v in details['edges_by_rule'].items())}) "
            f"in {details['build_seconds']}s; outputs from {details['outputs_from']}",
            markup=False,
        )
        if model:
            console.print(f"model passes: {usage.requests} calls ({usage.cached_requests} cached)")
        if prune:
            console.print(f"pruned {len(details['pruned'])} spurious embedding edges")
        console.print(f"written to {out}", markup=False)
        if picture is not None:
            draw_graph(graph, picture)
            console.print(f"picture: {picture}", markup=False)

    @synth_app.command("queries", cls=RefusingCommand)
    def queries_command(
        graph: Annotated[Path, typer.Option(help="Tool graph JSON written by 'harness synth graph'.")],
        model: Annotated[str, typer.Option(help="Model that picks arguments and writes and refines requests.")],
        out: Annotated[Path, typer.Option(help="Output folder; a run over an existing folder resumes it.")],
        envs: EnvsOption = None,
        chains: Annotated[int, typer.Option(help="Chains to sample (one scenario each).")] = 10,
        seed: Annotated[int, typer.Option(help="Seed of the first chain; chain i uses seed + i.")] = 0,
        max_tools: Annotated[int, typer.Option(help="Tools per chain at most.")] = 6,
        turn_max_tools: Annotated[int, typer.Option(help="Tools per turn at most.")] = 5,
        p_skip_optional: Annotated[float, typer.Option(help="Chance an optional input is skipped.")] = 0.6,
        p_skip_satisfied: Annotated[float, typer.Option(help="Chance a satisfiable input gets no producer.")] = 0.9,
        max_depth: Annotated[int, typer.Option(help="Depth of producer resolution.")] = 5,
        solve_with: Annotated[
            str | None,
            typer.Option("--solve-with", help="Solver model: keep a scenario only if a rollout reaches its gold."),
        ] = None,
        rollouts: Annotated[int, typer.Option(help="Solver rollouts per scenario; the solve rate is recorded.")] = 3,
        env: Annotated[list[str] | None, typer.Option(help="Only this environment id; repeatable.")] = None,
        concurrency: Annotated[int, typer.Option(help="Chains in flight.")] = 4,
        max_requests: SynthMaxRequests = 4,
        rpm: ModelRpm = None,
        tpm: ModelTpm = None,
        temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
        price_model: PriceModel = "gpt-4.1",
        dedup_similarity: DedupSimilarity = DEFAULT_SIMILARITY,
        embedding_model: EmbeddingModel = None,
        workers: SandboxWorkers = 0,
        no_cache: NoCache = False,
        timeout: RequestTimeout = 120.0,
        ray: RayOption = None,
        allow_weak_sandbox: AllowWeakSandbox = False,
        cost_limit: SynthCostLimit = None,
    ) -> None:
        """Sample tool chains on the graph, execute them, and turn them into multi-turn natural requests."""
        from synth.graph import ToolGraph
        from synth.queries import QueryConfig, synthesize_queries
        from synth.sampling import SamplingParams

        library = _library(envs)
        jail = synthesis_jail(library, allow_weak_sandbox, workers)
        environments, _ = _environments_of(library, env)
        tool_graph = ToolGraph.load(graph)
        config = QueryConfig(
            model=model,
            chains=chains,
            seed=seed,
            turn_max_tools=turn_max_tools,
            solve_with=solve_with,
            rollouts=rollouts,
            concurrency=concurrency,
            temperature=temperature,
            price_model=price_model,
            dedup_similarity=dedup_similarity or None,
            embedding_model=embedding_model,
            cost_limit=cost_limit,
            sampling=SamplingParams(
                max_tools=max_tools,
                max_environments=1,
                p_skip_optional=p_skip_optional,
                p_skip_satisfied=p_skip_satisfied,
                max_depth=max_depth,
                environments=env or None,
            ),
        )

        cluster = cluster_for(ray, jail)

        async def run() -> SynthesisReport:
            # over Ray, answers are not cached: executors cannot write into OUT, whose one writer is this process
            pool = None if cluster is not None else await full_pool(jail)
            client = _client(out, max_requests, rpm, tpm, not no_cache and cluster is None, timeout)
            try:
                if cluster is not None:
                    work = synthesize_queries(environments, tool_graph, config, out, client=client, cluster=cluster)
                    return await _synthesize(cluster, work)
                assert pool is not None
                return await synthesize_queries(environments, tool_graph, config, out, client=client, pool=pool)
            finally:
                await client.aclose()
                if pool is not None:
                    await pool.close()

        print_report(run_to_end(run()), out, "scenarios")
