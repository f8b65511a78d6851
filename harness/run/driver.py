"""A run from start to end: load → check → plan → folder → backend → summarize.

Episodes are bounded by ``concurrency``; model calls by the per-endpoint limits of ``harness.llm`` (``max_requests``,
``rpm``, ``tpm``); environment code runs in the sandbox's confined processes. Results are appended to
``results.jsonl`` as episodes finish; ``--resume`` runs only the episodes that have no result yet. This module alone
writes the run folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.collector import tuned_for_throughput
from harness.episode.judging import judged_check_problems
from harness.library import Library
from harness.llm import EndpointLimits, EndpointUnreachable, LLMClient, RequestRejected
from harness.results.metrics import RESULTS_FILE, write_summary
from harness.results.store import ResultStore
from harness.sandbox import SandboxLimits, SandboxPool
from harness.schema import RunManifest, Scenario, TerminationReason, Trajectory
from harness.scoring.checks import known_reset_results, prepared_checks

from .backend import EpisodeBackend, EpisodeJob
from .config import ModelUnavailable, RunConfig, RunRefused, agent_settings, models_in_use
from .episodes import AgentFactory, UserFactory
from .folder import (
    build_manifest,
    check_folder_usable,
    default_run_dir,
    resolution_line,
    resumed_manifest,
    write_manifest,
)
from .local import LocalBackend
from .plan import (
    EpisodeSpec,
    check_served_environments,
    drop_invalid,
    load_run_library,
    nothing_to_run,
    plan_episodes,
    resolve_settings,
    rules_mismatch,
    select_scenarios,
    selection_problems,
)
from .progress import (
    CostLimitStop,
    ProgressCallback,
    RunOutcome,
    RunPlan,
    RunProgress,
    RunTally,
    StartCallback,
    report_usage,
)
from .spending import SpendLimit, spend_limit_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunContext:
    """A planned run: what it runs, where it writes, and what its caller asked to be told."""

    config: RunConfig
    library: Library
    specs: list[EpisodeSpec]
    invalid: dict[str, str]
    run_dir: Path
    pool: SandboxPool
    client: LLMClient
    agent_factory: AgentFactory
    user_factory: UserFactory | None
    on_progress: ProgressCallback | None
    on_start: StartCallback | None
    stop_on_signals: bool
    backend: EpisodeBackend | None
    settings_from: dict[str, str] = field(default_factory=dict)
    """Where the settings not given came from (``resolve_settings``), for the run's header."""


CLUSTER_PACKAGE = "harness.distributed"
"""Where the Ray backend lives. That package builds on the run's layers, so the run imports it by name, and only
when a run asks for a cluster: a local run never loads Ray, and the layers depend one way."""


def cluster_backend(address: str) -> EpisodeBackend:
    """The backend that runs episodes on the Ray cluster at ``address`` (``RunConfig.ray``)."""
    backend: EpisodeBackend = importlib.import_module(CLUSTER_PACKAGE).RayBackend(address)
    return backend


async def run(
    config: RunConfig,
    *,
    agent_factory: AgentFactory,
    user_factory: UserFactory | None = None,
    on_progress: ProgressCallback | None = None,
    on_start: StartCallback | None = None,
    library: Library | None = None,
    client: LLMClient | None = None,
    sandbox_limits: SandboxLimits | None = None,
    stop_on_signals: bool = False,
    backend: EpisodeBackend | None = None,
) -> RunOutcome:
    """Run every planned episode that has no result yet, then write the summary.

    Inputs are checked before any work (:class:`RunRefused` lists every problem; no run folder is made): the
    selection, then the cheap part of `harness validate` on the selected scenarios in the run's own sandbox
    (invalid ones are left out and named unless ``include_invalid``). Each model endpoint is probed once
    (:class:`ModelUnavailable` when one does not answer). With ``stop_on_signals``, SIGINT or SIGTERM stops the
    run cleanly: episodes in flight are dropped (they run again on resume), the summary is written, and
    ``RunOutcome.stopped_by`` names the signal. Episodes run in this process, or through ``backend``; either way
    this process alone writes the run folder. With ``config.ray`` and no ``backend``, they run on that cluster
    (:func:`cluster_backend`).
    """
    if config.ray is not None and backend is None:
        backend = cluster_backend(config.ray)
    asyncio.get_running_loop().set_exception_handler(quiet_cancelled_callbacks)
    library = library or load_run_library(config)
    problems = selection_problems(library, config)
    if problems:
        raise RunRefused(*problems)
    if config.skip_bad_records and library.problems:
        logger.warning("running without %d record(s) that do not load", len(library.problems))
    config, settings_from = resolve_settings(config, library)
    scenarios = select_scenarios(library, config)
    mismatch = rules_mismatch(config, library, scenarios)
    if mismatch is not None:
        raise RunRefused(mismatch)
    # One pool screens the scenarios and runs the episodes, so the confinement it requires covers both.
    jail = library.jail(
        scenarios, allow_weak_sandbox=config.allow_weak_sandbox, workers=config.workers, limits=sandbox_limits
    )
    async with jail.pool(code_to_lint=code_of(library, scenarios)) as pool:
        with tuned_for_throughput():
            scenarios, invalid = await drop_invalid(pool, library, scenarios, config)
            specs = await checked_plan(config, library, scenarios, user_factory)
            run_dir = config.out or default_run_dir(config)
            check_folder_usable(run_dir, config.resume)
            async with model_client(config, client) as model:
                context = RunContext(
                    config=config,
                    library=library,
                    specs=specs,
                    invalid=invalid,
                    run_dir=run_dir,
                    pool=pool,
                    client=model,
                    agent_factory=agent_factory,
                    user_factory=user_factory,
                    on_progress=on_progress,
                    on_start=on_start,
                    stop_on_signals=stop_on_signals,
                    backend=backend,
                    settings_from=settings_from,
                )
                return await run_planned(context)


def code_of(library: Library, scenarios: list[Scenario]) -> list[str]:
    """The sources the run will execute: each selected scenario's environment (when the library has it) and
    checks (as sent to the sandbox), each once."""
    sources = dict.fromkeys(
        library.environments[s.environment_id].code for s in scenarios if s.environment_id in library.environments
    )
    sources.update(dict.fromkeys(check.source for s in scenarios for check in prepared_checks(s.checks)))
    return list(sources)


def quiet_cancelled_callbacks(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A socket callback that completes a future a stop already cancelled (Ctrl-C while a model endpoint is being
    connected to) is the stop itself, not an error: logged at debug level, not printed."""
    if isinstance(context.get("exception"), asyncio.InvalidStateError):
        logger.debug("a callback raced a cancellation: %s", context.get("message"))
        return
    loop.default_exception_handler(context)


async def checked_plan(
    config: RunConfig, library: Library, scenarios: list[Scenario], user_factory: UserFactory | None
) -> list[EpisodeSpec]:
    """The episodes to run, refused when there are none or when they need what the run was not given."""
    specs = plan_episodes(scenarios, config)
    if not specs:
        raise nothing_to_run(library, config)
    await check_served_environments(config, scenarios)
    judged = judged_check_problems([spec.scenario for spec in specs], config.judge_model)
    if judged:
        raise RunRefused(*judged)
    if any(spec.mode == "conv" for spec in specs) and user_factory is None:
        raise RunRefused("conversational mode needs a simulated user (user_factory)")
    return specs


@contextlib.asynccontextmanager
async def model_client(config: RunConfig, client: LLMClient | None) -> AsyncIterator[LLMClient]:
    """The caller's client, or one made from the run's limits (and closed at the end)."""
    if client is not None:
        yield client
        return
    owned = LLMClient(
        cache_dir=config.cache_dir,
        default_limits=EndpointLimits(concurrency=config.max_requests, rpm=config.rpm, tpm=config.tpm),
        timeout=config.timeout,
    )
    try:
        yield owned
    finally:
        await owned.aclose()


async def run_planned(context: RunContext) -> RunOutcome:
    config, client, specs, run_dir = context.config, context.client, context.specs, context.run_dir
    check_agent(config, specs[0].scenario, client, context.agent_factory)
    manifest = build_manifest(config, run_dir.name, context.library, client, len(specs), context.invalid)
    manifest = resumed_manifest(run_dir, manifest)
    tally = RunTally()
    store = ResultStore(run_dir / RESULTS_FILE, listener=tally)
    await check_models(config, client)
    covered = {spec.episode_id for spec in specs}
    covered.update(store.episode_ids())
    manifest = manifest.model_copy(update={"episodes_planned": len(covered)})
    if config.skip_bad_records and context.library.problems:
        manifest.config["skipped_records"] = list(context.library.problems)
    run_dir.mkdir(parents=True, exist_ok=True)
    spend_limit = spend_limit_for(config, client, tally.recorded_usd)
    job = EpisodeJob(
        config,
        context.library,
        client,
        context.agent_factory,
        context.user_factory,
        context.pool.limits,
        reset_results=known_reset_results(context.pool, (spec.scenario for spec in specs)),
        spend_limit=spend_limit,
    )
    if context.backend is not None:
        try:
            cluster = await context.backend.start(job)
        except BaseException:
            store.close()
            await context.backend.close()
            raise
        manifest = manifest.model_copy(update={"cluster": cluster})
    write_manifest(run_dir, manifest)

    in_flight = episodes_in_flight(config, client)
    finished = store.finished(retry_errors=config.retry_errors, retry_unretryable=config.retry_unretryable)
    todo = [spec for spec in specs if spec.episode_id not in finished]
    if context.on_start is not None:
        context.on_start(
            RunPlan(
                run_dir=run_dir,
                environments=sorted({spec.scenario.environment_id for spec in specs}),
                scenarios=len({spec.scenario.id for spec in specs}),
                modes=sorted({spec.mode for spec in specs}),
                trials=config.trials,
                max_steps=config.max_steps,
                episodes=len(specs),
                to_run=len(todo),
                recorded=len(store),
                models={m: resolution_line(manifest.model_resolution.get(m)) for m in models_in_use(config)},
                in_flight=min(in_flight, max(len(todo), 1)),
                rules=str(config.rules),
                settings_from=dict(context.settings_from),
            )
        )
    progress = RunProgress(total=len(todo))
    backend = context.backend
    if backend is None:
        backend = LocalBackend(context.pool, progress)
        await backend.start(job)
    stopped_by = await execute(context, backend, manifest, todo, in_flight, store, progress, spend_limit)
    progress.refresh_usage(client)
    if context.on_progress is not None:
        context.on_progress(progress)
    skipped = len(specs) - len(todo)
    outcome = summarize(
        context, manifest, progress, tally, skipped=skipped, planned=len(covered), stopped_by=stopped_by
    )
    if spend_limit is not None and spend_limit.not_started:
        outcome.cost_limit = CostLimitStop(spend_limit.limit_usd, spend_limit.spent_usd, spend_limit.not_started)
    return outcome


async def execute(
    context: RunContext,
    backend: EpisodeBackend,
    manifest: RunManifest,
    todo: list[EpisodeSpec],
    in_flight: int,
    store: ResultStore,
    progress: RunProgress,
    spend_limit: SpendLimit | None = None,
) -> int | None:
    """Run ``todo`` on ``backend``, recording each result as it comes; returns the signal that stopped the run."""
    stopped_by: list[int] = []
    tasks: list[asyncio.Task[None]] = []

    def request_stop(number: int) -> None:
        stopped_by.append(number)
        logger.warning(
            "stopping: %s received; episodes in flight are dropped and run again on resume", signal.Signals(number).name
        )
        for task in tasks:
            task.cancel()

    def record(trajectory: Trajectory) -> None:
        if stopped_by and trajectory.termination is TerminationReason.INFRA_ERROR:
            return  # most likely the stop itself
        store.append(trajectory)
        if spend_limit is not None:
            spend_limit.add(trajectory)
        progress.count(trajectory)
        if context.on_progress is not None:
            context.on_progress(progress)

    try:
        with stop_on_signals(context.stop_on_signals, request_stop):
            if not stopped_by:
                tasks.append(
                    asyncio.create_task(
                        backend.execute(todo, run_id=manifest.run_id, in_flight=in_flight, on_result=record)
                    )
                )
            reporter = asyncio.create_task(report_usage(progress, context.client, context.on_progress))
            try:
                await asyncio.gather(*tasks)
            except asyncio.CancelledError:
                if not stopped_by:
                    raise
            finally:
                reporter.cancel()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        store.close()
        await backend.close()
    return stopped_by[0] if stopped_by else None


def summarize(
    context: RunContext,
    manifest: RunManifest,
    progress: RunProgress,
    tally: RunTally,
    *,
    skipped: int,
    planned: int,
    stopped_by: int | None,
) -> RunOutcome:
    """Write the summary of every result in the folder, as the run's tally counted them (each record as it was read
    at the start or appended since), and say what this invocation did."""
    summary = tally.summary.run_summary(manifest.run_id)
    write_summary(context.run_dir, summary)
    return RunOutcome(
        context.run_dir,
        manifest,
        summary,
        ran=progress.done,
        skipped=skipped,
        planned=planned,
        stopped_by=stopped_by,
        infra_causes=tally.infra_causes(),
        unretryable_errors=tally.unretryable_errors,
        environment_causes=tally.environment_causes(),
    )


def episodes_in_flight(config: RunConfig, client: LLMClient) -> int:
    """``config.concurrency``, bounded by what the agent's and user's models are worth (alias ``max_episodes``)."""
    bounds = [config.concurrency]
    for model in models_in_use(config):
        try:
            bound = client.resolve(model).max_episodes
        except Exception:  # an unresolvable model fails later, with the model call's own error
            continue
        if bound is not None:
            bounds.append(bound)
    if min(bounds) < config.concurrency:
        logger.info("running %d episodes at a time: the model serves no more usefully", min(bounds))
    return min(bounds)


def check_agent(config: RunConfig, scenario: Scenario, client: LLMClient, agent_factory: AgentFactory) -> None:
    """Build one policy before any episode: an unknown agent kind is bad input, not an error per episode."""
    try:
        agent_factory(scenario, client, agent_settings(config))
    except ValueError as exc:
        raise RunRefused(f"--agent {config.agent_kind}: {exc}") from None


async def check_models(config: RunConfig, client: LLMClient) -> None:
    """Every model the run calls has a route and answers one probe per endpoint."""
    # The judge is routed here but not probed: a judge that is down makes infrastructure errors, re-run later.
    routed = [*models_in_use(config), *([config.judge_model] if config.judge_model else [])]
    problems = [p for p in (client.route_problem(m) for m in routed) if p is not None]
    if problems:
        raise RunRefused(*problems)
    probed: set[str] = set()
    for model in models_in_use(config):
        endpoint = client.resolve(model).endpoint
        if endpoint in probed:
            continue
        probed.add(endpoint)
        try:
            await client.probe(model)
        except RequestRejected as exc:
            raise RunRefused(str(exc)) from None
        except EndpointUnreachable as exc:
            raise ModelUnavailable(str(exc)) from None


@contextlib.contextmanager
def stop_on_signals(enabled: bool, on_signal: Callable[[int], None]) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM call ``on_signal`` once; a second one acts as usual."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def handle(number: int) -> None:
        for other in signals:
            loop.remove_signal_handler(other)
        on_signal(number)

    for number in signals:
        loop.add_signal_handler(number, handle, number)
    try:
        yield
    finally:
        for number in signals:
            loop.remove_signal_handler(number)
