"""The async runner: many episodes in flight, throttled model traffic, resumable results, an honest summary.

Episodes are asyncio tasks bounded by ``concurrency``; model calls are bounded by the per-endpoint limits of
``harness.llm``; environment code runs in the sandbox's worker processes. Results are appended to
``results.jsonl`` as episodes finish; ``--resume`` runs only the episodes that have no result yet.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field

from harness import __version__
from harness.episode import EpisodeConfig, run_episode
from harness.library import Library, load_library
from harness.llm import EndpointLimits, LLMClient
from harness.metrics import MANIFEST_FILE, RESULTS_FILE, RunSummary, read_results, summarize_run, write_summary
from harness.protocols import AgentPolicy, UserPolicy
from harness.sandbox import SandboxLimits, SandboxPool
from harness.schema import (
    AgentSettings,
    ClusterInfo,
    DatasetRef,
    Mode,
    ModelSettings,
    RunManifest,
    Scenario,
    TerminationReason,
    Trajectory,
)
from harness.store import ResultStore

logger = logging.getLogger(__name__)

# Settings that change what an episode does: resuming with any of them different would mix two experiments.
RESULT_SETTINGS = (
    "model",
    "agent_kind",
    "mode",
    "user_model",
    "temperature",
    "max_tokens",
    "seed",
    "max_steps",
    "system_prompt_version",
    "mcp",
)


class RunConfig(BaseModel):
    """Everything ``harness run`` takes; each CLI flag has the keyword of the same name."""

    model_config = ConfigDict(extra="forbid")

    model: str = "local"
    agent_kind: str = Field(default="function_calling", description="function_calling, prompted or oracle.")
    envs: str | None = Field(default=None, description="Folder or Hub id; default the bundled seed library.")
    mode: Literal["nonconv", "conv", "both"] = "nonconv"
    user_model: str | None = Field(default=None, description="Simulated user's model; default the agent's.")
    trials: int = Field(default=1, ge=1)
    env: list[str] = Field(default_factory=list, description="Only these environment ids.")
    scenario: list[str] = Field(default_factory=list, description="Only these scenario ids.")
    limit: int | None = Field(default=None, ge=1, description="At most this many scenarios (after filters).")
    concurrency: int = Field(default=32, ge=1, description="Episodes in flight.")
    rpm: int | None = Field(default=None, ge=1, description="Requests per minute per endpoint.")
    tpm: int | None = Field(default=None, ge=1, description="Tokens per minute per endpoint.")
    temperature: float | None = 0.0
    max_tokens: int | None = None
    seed: int = 0
    max_steps: int | None = None
    system_prompt_version: str = "1"
    out: Path | None = Field(default=None, description="Run folder; default runs/<time>-<model>.")
    resume: bool = False
    retry_errors: bool = False
    workers: int | None = Field(default=None, description="Sandbox worker processes; default one per core.")
    cache_dir: Path | None = Field(default=None, description="Opt-in on-disk model response cache.")
    mcp: str | None = Field(
        default=None, description="Evaluate through an MCP server instead: a URL, or a command that serves on stdio."
    )
    ray: str | None = Field(
        default=None,
        description="Run episodes on a Ray cluster: an address (host:port or ray://...), 'auto', or 'local'.",
    )


class RunRefused(ValueError):
    """The run cannot start as asked (for example, resuming into a folder made with other settings)."""


@dataclass(frozen=True)
class EpisodeSpec:
    episode_id: str
    scenario: Scenario
    mode: Mode
    trial: int
    seed: int


@dataclass
class RunProgress:
    total: int
    done: int = 0
    in_flight: int = 0
    infra_errors: int = 0
    scored: int = 0
    reward_sum: float = 0.0
    successes: int = 0
    requests: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    started: float = field(default_factory=time.monotonic)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.scored if self.scored else None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        if not self.done:
            return None
        return self.elapsed / self.done * (self.total - self.done)


@dataclass
class RunOutcome:
    run_dir: Path
    manifest: RunManifest
    summary: RunSummary
    ran: int
    skipped: int


AgentFactory = Callable[[Scenario, LLMClient, AgentSettings], AgentPolicy]
UserFactory = Callable[[Scenario, LLMClient, AgentSettings], UserPolicy]
ProgressCallback = Callable[[RunProgress], None]


@dataclass(frozen=True)
class EpisodeJob:
    """What a backend needs to run this run's episodes elsewhere."""

    config: RunConfig
    library: Library
    client: LLMClient
    agent_factory: AgentFactory
    user_factory: UserFactory | None
    sandbox_limits: SandboxLimits | None


class EpisodeBackend(Protocol):
    """Runs planned episodes outside this process (``harness.distributed.RayBackend``); the runner keeps
    planning and stays the only writer of the run folder."""

    async def start(self, job: EpisodeJob) -> ClusterInfo:
        """Connect and check every place episodes will run; raise ``RunRefused`` with one line if one cannot."""
        ...

    async def execute(
        self, specs: list[EpisodeSpec], *, run_id: str, in_flight: int, on_result: Callable[[Trajectory], None]
    ) -> None:
        """Run each spec and call ``on_result`` exactly once per spec, with at most ``in_flight`` running."""
        ...

    async def close(self) -> None: ...


def agent_settings(config: RunConfig) -> AgentSettings:
    return AgentSettings(
        kind=config.agent_kind,
        role="agent",
        model=ModelSettings(
            model=config.model, temperature=config.temperature, max_tokens=config.max_tokens, seed=config.seed
        ),
        system_prompt_version=config.system_prompt_version,
    )


def user_settings(config: RunConfig) -> AgentSettings:
    return AgentSettings(
        kind="simulated_user",
        role="user",
        model=ModelSettings(model=config.user_model or config.model, temperature=config.temperature, seed=config.seed),
        system_prompt_version=config.system_prompt_version,
    )


def episode_id(
    scenario: Scenario, mode: str, agent: AgentSettings, user: AgentSettings | None, trial: int, config: RunConfig
) -> str:
    """A content hash of what produces the episode: the same inputs always get the same id."""
    key = {
        "scenario": scenario.id,
        "environment": scenario.environment_id,
        "mode": mode,
        "agent": agent.model_dump(mode="json"),
        "user": user.model_dump(mode="json") if user is not None else None,
        "max_steps": config.max_steps,
        "trial": trial,
        "mcp": config.mcp,
    }
    return hashlib.sha256(orjson.dumps(key, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20]


def select_scenarios(library: Library, config: RunConfig) -> list[Scenario]:
    chosen = []
    for scenario in library.scenarios:
        if config.env and scenario.environment_id not in config.env:
            continue
        if config.scenario and scenario.id not in config.scenario:
            continue
        if scenario.environment_id not in library.environments and config.mcp is None:
            logger.warning("scenario %s skipped: environment %s is missing", scenario.id, scenario.environment_id)
            continue
        if not scenario.checks:
            logger.warning("scenario %s skipped: it has no checks and cannot be scored", scenario.id)
            continue
        chosen.append(scenario)
    if config.limit is not None:
        chosen = chosen[: config.limit]
    return chosen


def plan_episodes(scenarios: list[Scenario], config: RunConfig) -> list[EpisodeSpec]:
    modes: list[Mode] = ["nonconv", "conv"] if config.mode == "both" else [config.mode]
    agent = agent_settings(config)
    user = user_settings(config)
    specs = []
    for scenario in scenarios:
        for mode in modes:
            for trial in range(config.trials):
                identifier = episode_id(scenario, mode, agent, user if mode == "conv" else None, trial, config)
                seed = int(identifier[:8], 16) ^ config.seed
                specs.append(EpisodeSpec(identifier, scenario, mode, trial, seed))
    return specs


def _git_revision() -> str | None:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    temporary.replace(path)


def default_run_dir(config: RunConfig) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    model = "".join(c if c.isalnum() or c in "-_." else "-" for c in config.model)
    return Path("runs") / f"{stamp}-{model}"


def build_manifest(config: RunConfig, run_id: str, library: Library, client: LLMClient, planned: int) -> RunManifest:
    resolution: dict[str, Any] = {}
    for model in {config.model, config.user_model or config.model}:
        try:
            resolution[model] = client.resolve(model).model_dump(mode="json")
        except Exception as exc:
            resolution[model] = {"error": str(exc)}
    return RunManifest(
        run_id=run_id,
        package_version=__version__,
        git_revision=_git_revision(),
        dataset=DatasetRef(
            source=library.source.source, revision=library.source.revision, fingerprint=library.source.fingerprint
        ),
        config={
            **config.model_dump(mode="json"),
            "environment_domains": {env_id: env.domain for env_id, env in library.environments.items() if env.domain},
        },
        model_resolution=resolution,
        episodes_planned=planned,
    )


def episodes_in_flight(config: RunConfig, client: LLMClient) -> int:
    """``config.concurrency``, bounded by what the agent's and user's models are worth (alias ``max_episodes``)."""
    bounds = [config.concurrency]
    for model in {config.model, config.user_model or config.model}:
        try:
            bound = client.resolve(model).max_episodes
        except Exception:  # an unresolvable model fails later, with the model call's own error
            continue
        if bound is not None:
            bounds.append(bound)
    if min(bounds) < config.concurrency:
        logger.info("running %d episodes at a time: the model serves no more usefully", min(bounds))
    return min(bounds)


def check_resumable(previous: RunManifest, current: RunManifest) -> None:
    """Refuse to mix results of different settings or data in one folder, naming what differs."""
    differences = []
    for key in RESULT_SETTINGS:
        before, after = previous.config.get(key), current.config.get(key)
        if before != after:
            differences.append(f"{key}: {before!r} in the folder, {after!r} now")
    if previous.dataset.fingerprint != current.dataset.fingerprint:
        differences.append(
            f"environment set: {previous.dataset.source}@{previous.dataset.fingerprint} in the folder, "
            f"{current.dataset.source}@{current.dataset.fingerprint} now"
        )
    if differences:
        raise RunRefused("cannot resume: the run folder was made with other settings — " + "; ".join(differences))


async def run(
    config: RunConfig,
    *,
    agent_factory: AgentFactory,
    user_factory: UserFactory | None = None,
    on_progress: ProgressCallback | None = None,
    library: Library | None = None,
    client: LLMClient | None = None,
    sandbox_limits: SandboxLimits | None = None,
    backend: EpisodeBackend | None = None,
) -> RunOutcome:
    """Run every planned episode that has no result yet, then write the summary.

    Episodes run in this process, or through ``backend`` (by default a Ray cluster when ``config.ray`` is set).
    """
    library = library or load_library(config.envs)
    scenarios = select_scenarios(library, config)
    specs = plan_episodes(scenarios, config)
    if any(spec.mode == "conv" for spec in specs) and user_factory is None:
        raise RunRefused("conversational mode needs a simulated user (user_factory)")
    run_dir = config.out or default_run_dir(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = run_dir / MANIFEST_FILE
    results_path = run_dir / RESULTS_FILE
    owns_client = client is None
    if client is None:
        client = LLMClient(
            cache_dir=config.cache_dir,
            default_limits=EndpointLimits(concurrency=config.concurrency, rpm=config.rpm, tpm=config.tpm),
        )
    run_id = run_dir.name
    manifest = build_manifest(config, run_id, library, client, len(specs))
    if manifest_path.exists():
        previous = RunManifest.model_validate_json(manifest_path.read_bytes())
        if not config.resume:
            raise RunRefused(f"{run_dir} already holds a run; pass --resume to continue it, or choose another --out")
        check_resumable(previous, manifest)
        manifest = manifest.model_copy(update={"run_id": previous.run_id, "created_at": previous.created_at})
    elif results_path.exists() and results_path.stat().st_size:
        raise RunRefused(f"{run_dir} holds results but no manifest; choose another --out")
    if backend is None and config.ray is not None:
        from harness.distributed import RayBackend

        backend = RayBackend(config.ray)
    if backend is not None:
        try:
            job = EpisodeJob(config, library, client, agent_factory, user_factory, sandbox_limits)
            cluster = await backend.start(job)
        except BaseException:
            await backend.close()
            if owns_client:
                await client.aclose()
            raise
        manifest = manifest.model_copy(update={"cluster": cluster})
    _write_atomically(manifest_path, orjson.dumps(manifest.model_dump(mode="json"), option=orjson.OPT_INDENT_2))

    in_flight = episodes_in_flight(config, client)
    store = ResultStore(results_path)
    finished = store.finished(retry_errors=config.retry_errors)
    todo = [spec for spec in specs if spec.episode_id not in finished]
    progress = RunProgress(total=len(todo))
    agent = agent_settings(config)
    user = user_settings(config)
    queue: asyncio.Queue[EpisodeSpec] = asyncio.Queue()
    for spec in todo:
        queue.put_nowait(spec)

    def record(trajectory: Trajectory) -> None:
        store.append(trajectory)
        _account(progress, trajectory)
        if on_progress is not None:
            on_progress(progress)

    async def episode_worker(pool: SandboxPool) -> None:
        assert client is not None
        while True:
            try:
                spec = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            progress.in_flight += 1
            try:
                trajectory = await _run_one(
                    spec, pool, client, agent, user, config, manifest.run_id, agent_factory, user_factory, library
                )
            finally:
                progress.in_flight -= 1
            record(trajectory)

    try:
        if backend is not None:
            await backend.execute(todo, run_id=manifest.run_id, in_flight=in_flight, on_result=record)
        else:
            async with SandboxPool(workers=config.workers, limits=sandbox_limits) as pool:
                workers = [asyncio.create_task(episode_worker(pool)) for _ in range(min(in_flight, len(todo)))]
                reporter = asyncio.create_task(_report_usage(progress, client, on_progress))
                try:
                    await asyncio.gather(*workers)
                finally:
                    reporter.cancel()
                    for task in workers:
                        task.cancel()
    finally:
        store.close()
        if backend is not None:
            await backend.close()
        if owns_client:
            await client.aclose()
    planned_ids = {spec.episode_id for spec in specs}
    results = [t for t in read_results(results_path) if t.episode_id in planned_ids]
    summary = summarize_run(results, run_id=manifest.run_id)
    write_summary(run_dir, summary)
    return RunOutcome(run_dir, manifest, summary, ran=len(todo), skipped=len(specs) - len(todo))


async def _run_one(
    spec: EpisodeSpec,
    pool: SandboxPool,
    client: LLMClient,
    agent: AgentSettings,
    user: AgentSettings,
    config: RunConfig,
    run_id: str,
    agent_factory: AgentFactory,
    user_factory: UserFactory | None,
    library: Library,
) -> Trajectory:
    policy = agent_factory(spec.scenario, client, agent)
    simulated_user = user_factory(spec.scenario, client, user) if spec.mode == "conv" and user_factory else None
    episode_config = EpisodeConfig(
        mode=spec.mode, max_steps=config.max_steps, seed=spec.seed, trial=spec.trial, run_id=run_id
    )
    if config.mcp is not None:
        from harness.mcp import run_mcp_episode

        return await run_mcp_episode(
            spec.scenario,
            config.mcp,
            pool=pool,
            agent=policy,
            user=simulated_user,
            config=episode_config,
            episode_id=spec.episode_id,
            environment=library.environments.get(spec.scenario.environment_id),
        )
    environment = library.environments[spec.scenario.environment_id]
    return await run_episode(
        spec.scenario,
        environment,
        pool=pool,
        agent=policy,
        user=simulated_user,
        config=episode_config,
        episode_id=spec.episode_id,
    )


def _account(progress: RunProgress, trajectory: Trajectory) -> None:
    progress.done += 1
    if trajectory.termination is TerminationReason.INFRA_ERROR:
        progress.infra_errors += 1
    elif trajectory.reward is not None:
        progress.scored += 1
        progress.reward_sum += trajectory.reward.state_reward
        progress.successes += trajectory.reward.success


async def _report_usage(progress: RunProgress, client: LLMClient, on_progress: ProgressCallback | None) -> None:
    """Refresh request, token and cost totals a few times a second, and tell the caller."""
    while True:
        await asyncio.sleep(0.5)
        usage = client.usage_by_role()
        progress.requests = sum(u.requests - u.cached_requests for u in usage.values())
        progress.tokens = sum(u.total_tokens for u in usage.values())
        progress.cost_usd = sum(u.cost_usd for u in usage.values())
        if on_progress is not None:
            on_progress(progress)
