"""The async runner: many episodes in flight, throttled model traffic, resumable results, an honest summary.

Episodes are asyncio tasks bounded by ``concurrency``; model calls are bounded by the per-endpoint limits of
``harness.llm``; environment code runs in the sandbox's confined processes. Results are appended to
``results.jsonl`` as episodes finish; ``--resume`` runs only the episodes that have no result yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hashlib
import logging
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field

from harness import __version__
from harness.collector import tuned_for_throughput
from harness.episode import EpisodeConfig, run_episode
from harness.errors import BadInput, Unavailable
from harness.library import Library, LibraryError, load_library
from harness.llm import EndpointLimits, EndpointUnreachable, LLMClient, RequestRejected
from harness.llm.client import DEFAULT_TIMEOUT_S
from harness.llm.local_provider import LOCAL_PROVIDER
from harness.llm.python_models import PYTHON_PROVIDER
from harness.metrics import MANIFEST_FILE, RESULTS_FILE, RunSummary, read_results, summarize_run, write_summary
from harness.protocols import AgentPolicy, UserPolicy
from harness.rules import DEFAULT_RULES, RulesName
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
from harness.scoring import SharedResetResults, known_reset_results
from harness.store import ResultStore
from harness.validate import invalid_scenarios

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
    "rules",
)

# Agent kinds that call no model: their runs need no model endpoint (the reference-actions replayer and the
# do-nothing baseline).
MODEL_FREE_AGENT_KINDS = frozenset({"oracle", "do_nothing"})
IN_PROCESS_PROVIDERS = frozenset({LOCAL_PROVIDER, PYTHON_PROVIDER})


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
    workers: int | None = Field(default=None, description="Sandbox zygotes that fork the sandbox processes; default 1.")
    allow_weak_sandbox: bool = Field(
        default=False, description="Run Hub code even when a confinement layer is missing on this machine."
    )
    cache_dir: Path | None = Field(default=None, description="Opt-in on-disk model response cache.")
    mcp: str | None = Field(
        default=None, description="Evaluate through an MCP server instead: a URL, or a command that serves on stdio."
    )
    timeout: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, description="Seconds one model request may take.")
    skip_bad_records: bool = Field(
        default=False, description="Run without library records that do not load (listed in the manifest)."
    )
    rules: RulesName | None = Field(
        default=None,
        description="Episode rules (harness or envscaler); default the library's suggestion (EnvScaler imports "
        "suggest envscaler), else harness. The manifest records the rules used.",
    )
    include_invalid: bool = Field(
        default=False, description="Also run scenarios that the cheap part of `harness validate` finds invalid."
    )
    ray: str | None = Field(
        default=None,
        description="Run episodes on a Ray cluster: an address (host:port or ray://...), 'auto', or 'local'.",
    )


class RunRefused(BadInput):
    """The run cannot start as asked: bad input (one problem per line), or a folder made with other settings."""


class ModelUnavailable(Unavailable):
    """A model endpoint does not answer (probed once before the first episode): nothing could be measured."""


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
    environment_errors: int = 0
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
    """What a run did. ``summary`` covers every episode recorded in the folder; ``ran`` are those of this
    invocation, ``skipped`` the planned ones already recorded. ``stopped_by`` is the signal that stopped it."""

    run_dir: Path
    manifest: RunManifest
    summary: RunSummary
    ran: int
    skipped: int
    planned: int = 0
    stopped_by: int | None = None
    infra_causes: list[tuple[str, int]] = field(default_factory=list)
    environment_causes: list[tuple[str, str, int]] = field(default_factory=list)
    """(environment id, first line of the detail, count) of the environment failures, most frequent first."""

    @property
    def missing(self) -> int:
        """Planned episodes with no result (a run stopped by a signal)."""
        return max(self.planned - self.summary.overall.episodes, 0)


@dataclass(frozen=True)
class RunPlan:
    """What a run is about to do, known before the first episode (for a header)."""

    run_dir: Path
    environments: list[str]
    scenarios: int
    modes: list[str]
    trials: int
    max_steps: int | None
    episodes: int
    to_run: int
    recorded: int
    models: dict[str, str]
    in_flight: int


AgentFactory = Callable[[Scenario, LLMClient, AgentSettings], AgentPolicy]
UserFactory = Callable[[Scenario, LLMClient, AgentSettings], UserPolicy]
ProgressCallback = Callable[[RunProgress], None]
StartCallback = Callable[[RunPlan], None]


@dataclass(frozen=True)
class EpisodeJob:
    """What a backend needs to run this run's episodes elsewhere."""

    config: RunConfig
    library: Library
    client: LLMClient
    agent_factory: AgentFactory
    user_factory: UserFactory | None
    sandbox_limits: SandboxLimits | None
    reset_results: SharedResetResults = field(default_factory=dict)
    """What held at reset for each scenario, from this run's screening: executors start from it."""


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
    if config.rules not in (None, DEFAULT_RULES):
        # Only a non-default profile enters the key, so ids of runs made before profiles existed stay the same.
        key["rules"] = config.rules
    return hashlib.sha256(orjson.dumps(key, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20]


def select_scenarios(library: Library, config: RunConfig) -> list[Scenario]:
    chosen = []
    scripted = 0
    for scenario in library.scenarios:
        if config.env and scenario.environment_id not in config.env:
            continue
        if config.scenario and scenario.id not in config.scenario:
            continue
        if scenario.environment_id not in library.environments and config.mcp is None:
            logger.warning("scenario %s skipped: environment %s is missing", scenario.id, scenario.environment_id)
            continue
        if not scenario.checks and not scenario.turns:
            logger.warning("scenario %s skipped: it has no checks and cannot be scored", scenario.id)
            continue
        if scenario.turns and config.mode == "nonconv":
            scripted += 1
            continue
        chosen.append(scenario)
    if scripted:
        message = f"{scripted} scenarios have scripted user turns and run only with --mode conv"
        if not chosen:
            raise RunRefused(message)
        logger.warning("%s; skipped", message)
    if config.limit is not None:
        chosen = chosen[: config.limit]
    return chosen


def suggested_rules(library: Library, scenarios: list[Scenario]) -> RulesName:
    """The rules the scenarios' environments suggest (``provenance.details["suggested_rules"]``, set by the
    EnvScaler importer): a profile all of them suggest, else the default."""
    suggestions: set[Any] = set()
    for scenario in scenarios:
        environment = library.environments.get(scenario.environment_id)
        details = environment.provenance.details if environment is not None else {}
        suggestions.add(details.get("suggested_rules"))
    if len(suggestions) == 1:
        (only,) = suggestions
        if only in ("harness", "envscaler"):
            return only
    elif len(suggestions) > 1:
        logger.warning("the selected environments suggest different episode rules; using %s", DEFAULT_RULES)
    return DEFAULT_RULES


def resolve_rules(config: RunConfig, library: Library, scenarios: list[Scenario]) -> RunConfig:
    """``config`` with its rules decided: as asked, or the library's suggestion."""
    if config.rules is not None:
        return config
    return config.model_copy(update={"rules": suggested_rules(library, scenarios)})


async def drop_invalid(
    pool: SandboxPool, library: Library, scenarios: list[Scenario], config: RunConfig
) -> tuple[list[Scenario], dict[str, str]]:
    """The scenarios to run and the invalid ones left out (id → problems), by the cheap validation.

    With ``include_invalid`` nothing is left out (the invalid ones are still named). Refuses the run when
    nothing valid is left.
    """
    invalid = await invalid_scenarios(pool, library, scenarios)
    for scenario_id, problem in invalid.items():
        action = "running it anyway (--include-invalid)" if config.include_invalid else "left out"
        logger.warning("scenario %s is invalid, %s: %s", scenario_id, action, problem)
    if config.include_invalid or not invalid:
        return scenarios, invalid
    kept = [s for s in scenarios if s.id not in invalid]
    if not kept:
        names = ", ".join(sorted(invalid))
        raise RunRefused(f"every selected scenario is invalid ({names}); fix them or pass --include-invalid")
    return kept, invalid


def plan_episodes(scenarios: list[Scenario], config: RunConfig) -> list[EpisodeSpec]:
    modes: list[Mode] = ["nonconv", "conv"] if config.mode == "both" else [config.mode]
    agent = agent_settings(config)
    user = user_settings(config)
    specs = []
    for scenario in scenarios:
        for mode in modes:
            if scenario.turns and mode == "nonconv":
                continue  # scripted turns are a conversation
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


def build_manifest(
    config: RunConfig,
    run_id: str,
    library: Library,
    client: LLMClient,
    planned: int,
    invalid: dict[str, str] | None = None,
) -> RunManifest:
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
            "invalid_scenarios": dict(sorted((invalid or {}).items())),
        },
        model_resolution=resolution,
        episodes_planned=planned,
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


def _resolution_line(entry: Any) -> str:
    if not isinstance(entry, dict):
        return repr(entry)
    if "error" in entry:
        return f"unresolvable ({entry['error']})"
    provider_model = str(entry.get("provider_model"))
    if entry.get("api_base"):
        where = f" at {entry['api_base']}"
    elif provider_model.split("/", 1)[0] in IN_PROCESS_PROVIDERS:
        where = " (in this process)"
    else:
        where = ""
    return f"{provider_model}{where}"


def check_resumable(previous: RunManifest, current: RunManifest) -> None:
    """Refuse to mix results of different settings, models or data in one folder, naming what differs."""
    differences = []
    # Folders made before episode rules existed ran under the default rules.
    defaults = {"rules": DEFAULT_RULES}
    for key in RESULT_SETTINGS:
        before = previous.config.get(key, defaults.get(key))
        after = current.config.get(key, defaults.get(key))
        if before != after:
            differences.append(f"{key}: {before!r} in the folder, {after!r} now")
    for model, before in previous.model_resolution.items():
        after = current.model_resolution.get(model)
        if after is not None and _resolution_line(before) != _resolution_line(after):
            differences.append(
                f"model {model!r} resolves to {_resolution_line(after)} now, {_resolution_line(before)} in the folder"
            )
    if previous.dataset.fingerprint != current.dataset.fingerprint:
        differences.append(
            f"environment set: {previous.dataset.source}@{previous.dataset.fingerprint} in the folder, "
            f"{current.dataset.source}@{current.dataset.fingerprint} now"
        )
    if differences:
        raise RunRefused(
            "cannot resume: the run folder was made with other settings — "
            + "; ".join(differences)
            + " (run with the folder's settings, or choose another --out)"
        )


def _unknown_ids(kind: str, asked: list[str], known: list[str]) -> list[str]:
    problems: list[str] = []
    for name in asked:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=3)
        if close:
            hint = "did you mean " + " or ".join(repr(c) for c in close) + "?"
        elif len(known) <= 12:
            hint = "known: " + ", ".join(known)
        else:
            hint = f"{len(known)} known, e.g. {', '.join(known[:3])}"
        problems.append(f"unknown {kind} {name!r} ({hint})")
    return problems


def selection_problems(library: Library, config: RunConfig) -> list[str]:
    """Everything wrong with what ``config`` asks of ``library``, one line each (empty when the run can go)."""
    problems: list[str] = []
    if library.problems and not config.skip_bad_records:
        problems.extend(f"{library.source.source}: {problem}" for problem in library.problems)
        problems.append(
            f"{len(library.problems)} record(s) of {library.source.source} do not load; fix them, or pass "
            f"--skip-bad-records to run without them"
        )
    if config.env:
        problems.extend(_unknown_ids("environment", config.env, sorted({s.environment_id for s in library.scenarios})))
    if config.scenario:
        problems.extend(_unknown_ids("scenario", config.scenario, [s.id for s in library.scenarios]))
    return problems


def models_in_use(config: RunConfig) -> list[str]:
    """The model strings this run will call: the agent's (unless it needs none) and the simulated user's."""
    models = []
    if config.agent_kind not in MODEL_FREE_AGENT_KINDS:
        models.append(config.model)
    if config.mode in ("conv", "both"):
        models.append(config.user_model or config.model)
    return list(dict.fromkeys(models))


def _load_library(config: RunConfig) -> Library:
    try:
        return load_library(config.envs)
    except LibraryError as exc:
        raise RunRefused(str(exc)) from None
    except ValueError as error:  # a bad Hub id or revision, or records that do not validate
        raise RunRefused(f"cannot load --envs {config.envs}: {error}") from None


async def _check_models(config: RunConfig, client: LLMClient) -> None:
    problems = [p for p in (client.route_problem(m) for m in models_in_use(config)) if p is not None]
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


def _check_agent(config: RunConfig, scenario: Scenario, client: LLMClient, agent_factory: AgentFactory) -> None:
    """Build one policy before any episode: an unknown agent kind is bad input, not an error per episode."""
    try:
        agent_factory(scenario, client, agent_settings(config))
    except ValueError as exc:
        raise RunRefused(f"--agent {config.agent_kind}: {exc}") from None


@contextlib.contextmanager
def _stop_on_signals(enabled: bool, on_signal: Callable[[int], None]) -> Iterator[None]:
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
    ``RunOutcome.stopped_by`` names the signal. Episodes run in this process, or through ``backend`` (by default
    a Ray cluster when ``config.ray`` is set); either way this process alone writes the run folder.
    """
    library = library or _load_library(config)
    problems = selection_problems(library, config)
    if problems:
        raise RunRefused(*problems)
    if config.skip_bad_records and library.problems:
        logger.warning("running without %d record(s) that do not load", len(library.problems))
    scenarios = select_scenarios(library, config)
    config = resolve_rules(config, library, scenarios)
    # One pool screens the scenarios and runs the episodes, so the confinement it requires covers both.
    async with SandboxPool(
        workers=config.workers,
        limits=sandbox_limits,
        require_full_confinement=library.from_hub and not config.allow_weak_sandbox,
    ) as pool:
        scenarios, invalid = await drop_invalid(pool, library, scenarios, config)
        with tuned_for_throughput():
            return await _plan_and_run(
                config,
                library,
                scenarios,
                invalid,
                pool,
                client,
                agent_factory,
                user_factory,
                on_progress,
                on_start,
                stop_on_signals,
                backend,
            )


async def _plan_and_run(
    config: RunConfig,
    library: Library,
    scenarios: list[Scenario],
    invalid: dict[str, str],
    pool: SandboxPool,
    client: LLMClient | None,
    agent_factory: AgentFactory,
    user_factory: UserFactory | None,
    on_progress: ProgressCallback | None,
    on_start: StartCallback | None,
    stop_on_signals: bool,
    backend: EpisodeBackend | None,
) -> RunOutcome:
    specs = plan_episodes(scenarios, config)
    if not specs:
        raise RunRefused(
            f"no episodes to run: no scenario of {library.source.source} with checks matches "
            + (" ".join(f"--env {e}" for e in config.env) + " " if config.env else "")
            + (" ".join(f"--scenario {s}" for s in config.scenario) + " " if config.scenario else "")
            + (f"--limit {config.limit}" if config.limit is not None else "")
            + " (harness validate shows what the library holds)"
        )
    if config.mcp is not None:
        from harness.mcp import EnvironmentMismatch, McpConnectionError, check_served_environment

        try:
            await check_served_environment(config.mcp, {s.environment_id for s in scenarios})
        except EnvironmentMismatch as error:
            raise RunRefused(str(error)) from error
        except McpConnectionError as error:
            raise RunRefused(f"cannot use --mcp {config.mcp}: {error}") from error
    if any(spec.mode == "conv" for spec in specs) and user_factory is None:
        raise RunRefused("conversational mode needs a simulated user (user_factory)")
    run_dir = config.out or default_run_dir(config)
    manifest_path = run_dir / MANIFEST_FILE
    results_path = run_dir / RESULTS_FILE
    if manifest_path.exists() and not config.resume:
        raise RunRefused(f"{run_dir} already holds a run; pass --resume to continue it, or choose another --out")
    if not manifest_path.exists() and results_path.exists() and results_path.stat().st_size:
        raise RunRefused(f"{run_dir} holds results but no manifest; choose another --out")
    owns_client = client is None
    if client is None:
        client = LLMClient(
            cache_dir=config.cache_dir,
            default_limits=EndpointLimits(concurrency=config.concurrency, rpm=config.rpm, tpm=config.tpm),
            timeout=config.timeout,
        )
    try:
        return await _run_planned(
            config,
            library,
            specs,
            run_dir,
            client,
            agent_factory,
            user_factory,
            on_progress,
            on_start,
            pool,
            invalid,
            stop_on_signals,
            backend,
        )
    finally:
        if owns_client:
            await client.aclose()


async def _run_planned(
    config: RunConfig,
    library: Library,
    specs: list[EpisodeSpec],
    run_dir: Path,
    client: LLMClient,
    agent_factory: AgentFactory,
    user_factory: UserFactory | None,
    on_progress: ProgressCallback | None,
    on_start: StartCallback | None,
    pool: SandboxPool,
    invalid: dict[str, str],
    stop_on_signals: bool,
    backend: EpisodeBackend | None,
) -> RunOutcome:
    _check_agent(config, specs[0].scenario, client, agent_factory)
    manifest = build_manifest(config, run_dir.name, library, client, len(specs), invalid)
    manifest_path = run_dir / MANIFEST_FILE
    results_path = run_dir / RESULTS_FILE
    if manifest_path.exists():
        try:
            previous = RunManifest.model_validate_json(manifest_path.read_bytes())
        except ValueError as exc:
            raise RunRefused(
                f"{manifest_path} is not a run manifest ({exc.__class__.__name__}); choose another --out"
            ) from None
        check_resumable(previous, manifest)
        manifest = manifest.model_copy(update={"run_id": previous.run_id, "created_at": previous.created_at})
    store = ResultStore(results_path)
    await _check_models(config, client)
    planned_ids = {spec.episode_id for spec in specs}
    covered = planned_ids | set(store.terminations)
    manifest = manifest.model_copy(update={"episodes_planned": len(covered)})
    if config.skip_bad_records and library.problems:
        manifest.config["skipped_records"] = list(library.problems)
    run_dir.mkdir(parents=True, exist_ok=True)
    if backend is None and config.ray is not None:
        from harness.distributed import RayBackend

        backend = RayBackend(config.ray)
    if backend is not None:
        try:
            job = EpisodeJob(
                config,
                library,
                client,
                agent_factory,
                user_factory,
                pool.limits,
                reset_results=known_reset_results(pool, (spec.scenario for spec in specs)),
            )
            cluster = await backend.start(job)
        except BaseException:
            store.close()
            await backend.close()
            raise
        manifest = manifest.model_copy(update={"cluster": cluster})
    _write_atomically(manifest_path, orjson.dumps(manifest.model_dump(mode="json"), option=orjson.OPT_INDENT_2))

    in_flight = episodes_in_flight(config, client)
    finished = store.finished(retry_errors=config.retry_errors)
    todo = [spec for spec in specs if spec.episode_id not in finished]
    if on_start is not None:
        on_start(
            RunPlan(
                run_dir=run_dir,
                environments=sorted({spec.scenario.environment_id for spec in specs}),
                scenarios=len({spec.scenario.id for spec in specs}),
                modes=sorted({spec.mode for spec in specs}),
                trials=config.trials,
                max_steps=config.max_steps,
                episodes=len(specs),
                to_run=len(todo),
                recorded=len(set(store.terminations)),
                models={m: _resolution_line(manifest.model_resolution.get(m)) for m in models_in_use(config)},
                in_flight=min(in_flight, max(len(todo), 1)),
            )
        )
    progress = RunProgress(total=len(todo))
    agent = agent_settings(config)
    user = user_settings(config)
    queue: asyncio.Queue[EpisodeSpec] = asyncio.Queue()
    for spec in todo:
        queue.put_nowait(spec)
    stopped_by: list[int] = []
    workers: list[asyncio.Task[None]] = []

    def request_stop(number: int) -> None:
        stopped_by.append(number)
        logger.warning(
            "stopping: %s received; episodes in flight are dropped and run again on resume", signal.Signals(number).name
        )
        for task in workers:
            task.cancel()

    def record(trajectory: Trajectory) -> None:
        store.append(trajectory)
        _account(progress, trajectory)
        if on_progress is not None:
            on_progress(progress)

    async def episode_worker(pool: SandboxPool) -> None:
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
            if stopped_by and trajectory.termination is TerminationReason.INFRA_ERROR:
                continue  # most likely the stop itself
            record(trajectory)

    try:
        with _stop_on_signals(stop_on_signals, request_stop):
            if not stopped_by and backend is not None:
                workers.append(
                    asyncio.create_task(
                        backend.execute(todo, run_id=manifest.run_id, in_flight=in_flight, on_result=record)
                    )
                )
            elif not stopped_by:
                workers.extend(asyncio.create_task(episode_worker(pool)) for _ in range(min(in_flight, len(todo))))
            reporter = asyncio.create_task(_report_usage(progress, client, on_progress))
            try:
                await asyncio.gather(*workers)
            except asyncio.CancelledError:
                if not stopped_by:
                    raise
            finally:
                reporter.cancel()
                for task in workers:
                    task.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
    finally:
        store.close()
        if backend is not None:
            await backend.close()
    _refresh_usage(progress, client)
    if on_progress is not None:
        on_progress(progress)
    results = read_results(results_path)
    summary = summarize_run(results, run_id=manifest.run_id)
    write_summary(run_dir, summary)
    return RunOutcome(
        run_dir,
        manifest,
        summary,
        ran=progress.done,
        skipped=len(specs) - len(todo),
        planned=len(covered),
        stopped_by=stopped_by[0] if stopped_by else None,
        infra_causes=infra_error_causes(results),
        environment_causes=environment_error_causes(results),
    )


def infra_error_causes(results: list[Trajectory]) -> list[tuple[str, int]]:
    """What ended episodes in infrastructure errors, each cause once with its count, most frequent first."""
    counts: Counter[str] = Counter()
    for trajectory in results:
        if trajectory.termination is TerminationReason.INFRA_ERROR:
            detail = (trajectory.termination_detail or "").strip().splitlines()
            counts[detail[0][:400] if detail else "no detail recorded"] += 1
    return counts.most_common()


def environment_error_causes(results: list[Trajectory]) -> list[tuple[str, str, int]]:
    """Which environments failed their episodes and how, each (environment, cause) once with its count."""
    counts: Counter[tuple[str, str]] = Counter()
    for trajectory in results:
        if trajectory.termination is TerminationReason.ENVIRONMENT_ERROR:
            detail = (trajectory.termination_detail or "").strip().splitlines()
            counts[(trajectory.environment_id, detail[0][:400] if detail else "no detail recorded")] += 1
    return [(environment, cause, count) for (environment, cause), count in counts.most_common()]


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
        mode=spec.mode,
        max_steps=config.max_steps,
        seed=spec.seed,
        trial=spec.trial,
        run_id=run_id,
        rules=config.rules or DEFAULT_RULES,
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
    if trajectory.termination is TerminationReason.ENVIRONMENT_ERROR:
        progress.environment_errors += 1
    if trajectory.termination is TerminationReason.INFRA_ERROR:
        progress.infra_errors += 1
    elif trajectory.reward is not None:
        progress.scored += 1
        progress.reward_sum += trajectory.reward.state_reward
        progress.successes += trajectory.reward.success


def _refresh_usage(progress: RunProgress, client: LLMClient) -> None:
    usage = client.usage_by_role()
    progress.requests = sum(u.requests - u.cached_requests for u in usage.values())
    progress.tokens = sum(u.total_tokens for u in usage.values())
    progress.cost_usd = sum(u.cost_usd for u in usage.values())


async def _report_usage(progress: RunProgress, client: LLMClient, on_progress: ProgressCallback | None) -> None:
    """Refresh request, token and cost totals a few times a second, and tell the caller."""
    while True:
        await asyncio.sleep(0.5)
        _refresh_usage(progress, client)
        if on_progress is not None:
            on_progress(progress)
