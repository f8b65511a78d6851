"""Aggregation of stored runs into leaderboard tables.

One row per (agent model, settings) and environment set. Runs measured on different environment sets, or on
different revisions of one set, are never ranked together: ``build_leaderboard`` refuses them unless asked to
split the leaderboard into one table per environment set. Two runs share a set when their manifests carry the
same content fingerprint or, when a fingerprint is missing, the same source and revision.

An environment's domain is taken, in order, from the run manifest's ``config["environment_domains"]``
mapping (environment id → domain), from the environment's ``domain`` field when the environment set is a local
folder with the run's content (see ``leaderboards.catalog``), and otherwise from the environment id's prefix
before its first ``_``, ``-``, ``.`` or ``/``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from harness.results.metrics import (
    GroupSummary,
    deduplicate,
    load_run,
    pass_hat_k,
    summarize_group,
    task_key,
)
from harness.rules.profiles import DEFAULT_RULES
from harness.schema import AgentSettings, DatasetRef, RunManifest, Scenario, Trajectory
from leaderboards.catalog import Catalog, CatalogCache
from leaderboards.collisions import check_episode_collisions

logger = logging.getLogger(__name__)

FAILING_ENVIRONMENTS_PER_RUN = 5
FAILING_SCENARIOS_PER_ENVIRONMENT = 3


class DatasetMismatchError(ValueError):
    """Runs measured on different environment sets or revisions were asked to share one ranking."""


# --------------------------------------------------------------------------------------------------- records


class RunInfo(BaseModel):
    run_id: str
    run_dir: str
    dataset: DatasetRef
    package_version: str
    git_revision: str | None = None
    episodes: int


class LeaderboardRow(BaseModel):
    rank: int = 0
    model: str
    settings: str = Field(description="Readable summary of the agent (and user) settings.")
    settings_id: str = Field(description="Short hash of the full settings; one row per value.")
    agent: AgentSettings
    user: AgentSettings | None = None
    dataset_source: str
    dataset_revision: str | None = None
    dataset_fingerprint: str | None = None
    runs: list[str] = Field(default_factory=list)
    episodes: int
    scored: int
    infra_errors: int
    unscored: int = 0
    tasks: int = 0
    mean_state_reward: float | None = None
    mean_delta_reward: float | None = None
    success_rate: float | None = None
    reward_ci95: list[float] | None = Field(
        default=None, description="95% confidence interval of the mean state reward (normal approximation)."
    )
    success_ci95: list[float] | None = Field(
        default=None, description="95% confidence interval of the success rate (Wilson score interval)."
    )
    pass_hat_k: dict[int, float] = Field(default_factory=dict)
    per_domain: dict[str, float | None] = Field(default_factory=dict, description="Mean state reward.")
    per_mode: dict[str, float | None] = Field(default_factory=dict, description="Mean state reward.")
    mean_tokens: float | None = None
    mean_cost_usd: float | None = None
    total_cost_usd: float = 0.0
    terminations: dict[str, int] = Field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.model} ({self.settings_id})"


class ScenarioFailures(BaseModel):
    scenario_id: str
    mode: str
    scored: int
    failures: int
    mean_state_reward: float | None = None
    example_episode_id: str = Field(description="The failing episode with the lowest state reward.")
    failed_checks: list[str] = Field(default_factory=list, description="Checks the example failed.")


class EnvironmentFailures(BaseModel):
    environment_id: str
    domain: str
    scored: int
    failures: int
    success_rate: float | None = None
    mean_state_reward: float | None = None
    scenarios: list[ScenarioFailures] = Field(default_factory=list)


class RunFailures(BaseModel):
    run_id: str
    models: list[str]
    environments: list[EnvironmentFailures] = Field(default_factory=list)


class LeaderboardTable(BaseModel):
    """One ranking: every row was measured on the same environment set and revision."""

    dataset: DatasetRef
    rows: list[LeaderboardRow]
    runs: list[RunInfo]
    domains: list[str]
    modes: list[str]
    failures: list[RunFailures] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @property
    def max_k(self) -> int:
        return max((max(row.pass_hat_k, default=0) for row in self.rows), default=0)


@dataclass
class Leaderboard:
    tables: list[LeaderboardTable]
    episodes: dict[str, Trajectory] = field(default_factory=dict)
    """Every episode of the runs (de-duplicated), by episode id: each gets a page and a row in the index."""
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    """The scenarios of those trajectories, by episode id, when their environment set is at hand."""

    @property
    def rows(self) -> list[LeaderboardRow]:
        return [row for table in self.tables for row in table.rows]


@dataclass
class LoadedRun:
    run_dir: Path
    manifest: RunManifest
    trajectories: list[Trajectory]


# ------------------------------------------------------------------------------------------------- helpers


def dataset_label(dataset: DatasetRef) -> str:
    parts = [dataset.source]
    if dataset.revision:
        parts.append(f"@{dataset.revision}")
    if dataset.fingerprint:
        parts.append(f" [{dataset.fingerprint[:12]}]")
    return "".join(parts)


def _dataset_key(dataset: DatasetRef) -> tuple[str, ...]:
    """What makes two environment sets the same: their content fingerprint when known, else source and revision.

    A fingerprint is a hash of the environments and scenarios, so one set checked out in two folders (or
    published to the Hub) stays one set, and a set edited in place without a new revision does not.
    """
    if dataset.fingerprint:
        return ("fingerprint", dataset.fingerprint)
    return ("source", dataset.source, dataset.revision or "")


_PREFIX_SEPARATOR = re.compile(r"[_\-./]")


class DomainResolver:
    """Finds the domain of an environment of one run (see the module docstring for the order)."""

    def __init__(self, manifest: RunManifest, catalog: Catalog) -> None:
        configured = manifest.config.get("environment_domains")
        self._configured: dict[str, str] = (
            {str(k): str(v) for k, v in configured.items()} if isinstance(configured, dict) else {}
        )
        self._catalog = catalog

    def __call__(self, environment_id: str) -> str:
        if environment_id in self._configured:
            return self._configured[environment_id]
        if environment_id in self._catalog.domains:
            return self._catalog.domains[environment_id]
        return _PREFIX_SEPARATOR.split(environment_id, maxsplit=1)[0] or environment_id


def _without_seed(settings: AgentSettings | None) -> dict[str, object] | None:
    """Settings as a dict without the per-trial seed (trials differ in seed, not in settings)."""
    if settings is None:
        return None
    dumped = settings.model_dump(mode="json")
    dumped["model"].pop("seed", None)
    return dumped


def _seedless(settings: AgentSettings) -> AgentSettings:
    return settings.model_copy(update={"model": settings.model.model_copy(update={"seed": None})})


def _run_user(trajectories: Sequence[Trajectory]) -> AgentSettings | None:
    """The simulated user of a run's conversational episodes when they all share one, else None."""
    users = {
        settings_id({"user": _without_seed(t.user)}): t.user
        for t in trajectories
        if t.mode == "conv" and t.user is not None
    }
    return next(iter(users.values())) if len(users) == 1 else None


def settings_id(identity: dict[str, object]) -> str:
    encoded = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:10]


def run_settings(manifest: RunManifest) -> dict[str, object]:
    """The run-level settings that change what an episode does or how it is graded besides the agent's and user's
    own: how tools were served (the sandbox or an MCP server), the step limit, the episode rules and the version of
    the checks. Empty for a run of defaults made before check versions were recorded, so its settings id does not
    change."""
    config = manifest.config
    settings: dict[str, object] = {}
    if config.get("mcp"):
        settings["transport"] = "mcp"
    if config.get("max_steps") is not None:
        settings["max_steps"] = config["max_steps"]
    if config.get("rules", DEFAULT_RULES) != DEFAULT_RULES:
        settings["rules"] = config["rules"]
    # Verdicts of different checks are never one row (runs made before check versions were recorded have none).
    if manifest.checks_version is not None:
        settings["checks"] = manifest.checks_version
    return settings


def settings_label(agent: AgentSettings, user: AgentSettings | None, run: dict[str, object] | None = None) -> str:
    model = agent.model
    parts = [agent.kind]
    for name, value in (("T", model.temperature), ("top_p", model.top_p), ("max_tokens", model.max_tokens)):
        if value is not None:
            parts.append(f"{name}={value}")
    if model.extra:
        parts.append("extra=" + json.dumps(model.extra, sort_keys=True, separators=(",", ":")))
    parts.append(f"prompt v{agent.system_prompt_version}")
    if user is not None:
        parts.append(f"user={user.model.model}")
    if run:
        if run.get("transport") == "mcp":
            parts.append("via MCP")
        if run.get("max_steps") is not None:
            parts.append(f"max_steps={run['max_steps']}")
        if run.get("rules") is not None:
            parts.append(f"rules={run['rules']}")
        if run.get("checks") is not None:
            parts.append(f"checks {str(run['checks'])[:8]}")
    return ", ".join(parts)


Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int) -> list[float] | None:
    """95% Wilson score interval of a proportion (sound at 0%, 100% and small n, unlike the normal one)."""
    if n < 1:
        return None
    p = successes / n
    denominator = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denominator
    return [max(0.0, centre - half), min(1.0, centre + half)]


def mean_interval(values: Sequence[float]) -> list[float] | None:
    """95% interval of a mean of values in [0, 1] (normal approximation, clipped); None below two values."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = Z95 * math.sqrt(variance / n)
    return [max(0.0, mean - half), min(1.0, mean + half)]


def pass_hat_k_within_runs(members: Sequence[Trajectory], run_of: dict[str, str]) -> dict[int, float]:
    """pass^k for k = 1..K where the trials of a task are those of one run: runs of one setting add tasks to
    the average, never trials to a task (separate runs may differ in ways their settings do not record)."""
    outcomes: dict[tuple[str, str, str, str], list[bool]] = {}
    for trajectory in members:
        if trajectory.reward is None or trajectory.infra_error:
            continue
        outcomes.setdefault((run_of[trajectory.episode_id], *task_key(trajectory)), []).append(
            trajectory.reward.success
        )
    if not outcomes:
        return {}
    max_k = min(len(results) for results in outcomes.values())
    return {
        k: math.fsum(pass_hat_k(len(r), sum(r), k) for r in outcomes.values()) / len(outcomes)
        for k in range(1, max_k + 1)
    }


def _mean_reward(trajectories: Iterable[Trajectory]) -> float | None:
    rewards = [t.reward.state_reward for t in trajectories if t.reward is not None and not t.infra_error]
    return sum(rewards) / len(rewards) if rewards else None


def _rank_key(row: LeaderboardRow) -> tuple[bool, float, float, str, str]:
    return (
        row.mean_state_reward is None,
        -(row.mean_state_reward or 0.0),
        -(row.success_rate or 0.0),
        row.model,
        row.settings_id,
    )


# -------------------------------------------------------------------------------------------------- loading


def load_runs(run_dirs: Sequence[Path | str]) -> list[LoadedRun]:
    runs = []
    for run_dir in run_dirs:
        manifest, trajectories = load_run(run_dir)
        runs.append(LoadedRun(run_dir=Path(run_dir), manifest=manifest, trajectories=trajectories))
    return runs


def check_same_dataset(runs: Sequence[LoadedRun]) -> None:
    """Raise ``DatasetMismatchError`` naming each run and its environment set when they differ."""
    keys = {_dataset_key(run.manifest.dataset) for run in runs}
    if len(keys) <= 1:
        return
    listing = "; ".join(
        f"{run.manifest.run_id} ({run.run_dir}) on {dataset_label(run.manifest.dataset)}" for run in runs
    )
    raise DatasetMismatchError(
        f"These runs were measured on {len(keys)} different environment sets or revisions and cannot share "
        f"one ranking: {listing}. Build one leaderboard per environment set, or pass --split-by-dataset "
        "for one table per set."
    )


# -------------------------------------------------------------------------------------------------- building


def build_leaderboard(run_dirs: Sequence[Path | str], split_by_dataset: bool = False) -> Leaderboard:
    """Load run folders and rank them. Raises ``DatasetMismatchError`` when environment sets differ."""
    if not run_dirs:
        raise ValueError("no run folders given")
    return build_leaderboard_from_runs(load_runs(run_dirs), split_by_dataset=split_by_dataset)


def build_leaderboard_from_runs(runs: Sequence[LoadedRun], split_by_dataset: bool = False) -> Leaderboard:
    if not split_by_dataset:
        check_same_dataset(runs)
    check_episode_collisions(
        [(run.run_dir, run.manifest, run.trajectories) for run in runs],
        run_settings,
        lambda manifest: _dataset_key(manifest.dataset),
    )
    by_dataset: dict[tuple[str, ...], list[LoadedRun]] = {}
    for run in runs:
        by_dataset.setdefault(_dataset_key(run.manifest.dataset), []).append(run)
    leaderboard = Leaderboard(tables=[])
    catalogs = CatalogCache()
    for dataset_runs in by_dataset.values():
        leaderboard.tables.append(_build_table(dataset_runs, leaderboard.episodes, catalogs))
    # Every episode gets a page and a row in the index, not only the failure lists' examples.
    for trajectory in deduplicate(t for run in runs for t in run.trajectories):
        leaderboard.episodes.setdefault(trajectory.episode_id, trajectory)
    for run in runs:
        catalog = catalogs.for_run(run.manifest)
        for trajectory in run.trajectories:
            scenario = catalog.scenarios.get(trajectory.scenario_id)
            if trajectory.episode_id in leaderboard.episodes and scenario is not None:
                leaderboard.scenarios[trajectory.episode_id] = scenario
    return leaderboard


def _build_table(
    runs: Sequence[LoadedRun], examples: dict[str, Trajectory], catalogs: CatalogCache
) -> LeaderboardTable:
    domain_of: dict[str, str] = {}
    run_of: dict[str, str] = {}
    run_settings_of: dict[str, dict[str, object]] = {}
    for run in runs:
        resolve = DomainResolver(run.manifest, catalogs.for_run(run.manifest))
        settings = run_settings(run.manifest)
        for trajectory in run.trajectories:
            domain_of.setdefault(trajectory.environment_id, resolve(trajectory.environment_id))
            run_of[trajectory.episode_id] = run.manifest.run_id
            run_settings_of[trajectory.episode_id] = settings

    # The same episode id in two runs is the same episode re-run: the run given later wins.
    trajectories = deduplicate(t for run in runs for t in run.trajectories)
    # A row is one agent setting and one simulated user: a run's non-conversational episodes join the row of
    # its conversational ones, so one model run in both modes makes one row with a score per mode.
    user_of: dict[str, AgentSettings | None] = {}
    for run in runs:
        run_user = _run_user(run.trajectories)
        for trajectory in run.trajectories:
            user_of[trajectory.episode_id] = run_user if run_user is not None else trajectory.user
    # Runs join one row only when every setting is equal, run-level ones (transport, step limit) included.
    entries: dict[str, list[Trajectory]] = {}
    row_user: dict[str, AgentSettings | None] = {}
    row_run: dict[str, dict[str, object]] = {}
    for trajectory in trajectories:
        user = user_of[trajectory.episode_id]
        identity: dict[str, object] = {"agent": _without_seed(trajectory.agent), "user": _without_seed(user)}
        if run_settings_of[trajectory.episode_id]:
            identity["run"] = run_settings_of[trajectory.episode_id]
        key = settings_id(identity)
        row_user.setdefault(key, user)
        row_run.setdefault(key, run_settings_of[trajectory.episode_id])
        entries.setdefault(key, []).append(trajectory)

    dataset = runs[0].manifest.dataset
    domains = sorted({domain_of[t.environment_id] for t in trajectories})
    modes: list[str] = sorted({str(t.mode) for t in trajectories})
    rows = [
        _build_row(key, members, row_user[key], row_run[key], dataset, domains, modes, domain_of, run_of)
        for key, members in entries.items()
    ]
    rows.sort(key=_rank_key)
    for rank, row in enumerate(rows, start=1):
        row.rank = rank

    return LeaderboardTable(
        dataset=dataset,
        rows=rows,
        runs=[
            RunInfo(
                run_id=run.manifest.run_id,
                run_dir=str(run.run_dir),
                dataset=run.manifest.dataset,
                package_version=run.manifest.package_version,
                git_revision=run.manifest.git_revision,
                episodes=len(run.trajectories),
            )
            for run in runs
        ],
        domains=domains,
        modes=modes,
        failures=[_run_failures(run, domain_of, examples) for run in runs],
        warnings=_coverage_warnings(rows, entries),
    )


def _build_row(
    key: str,
    members: list[Trajectory],
    user: AgentSettings | None,
    run: dict[str, object],
    dataset: DatasetRef,
    domains: list[str],
    modes: list[str],
    domain_of: dict[str, str],
    run_of: dict[str, str],
) -> LeaderboardRow:
    summary: GroupSummary = summarize_group(members)
    first = members[0]
    return LeaderboardRow(
        model=first.agent.model.model,
        settings=settings_label(first.agent, user, run),
        settings_id=key,
        agent=_seedless(first.agent),
        user=_seedless(user) if user is not None else None,
        dataset_source=dataset.source,
        dataset_revision=dataset.revision,
        dataset_fingerprint=dataset.fingerprint,
        runs=sorted({run_of[t.episode_id] for t in members}),
        episodes=summary.episodes,
        scored=summary.scored,
        infra_errors=summary.infra_errors,
        unscored=summary.unscored,
        tasks=summary.tasks,
        mean_state_reward=summary.mean_state_reward,
        mean_delta_reward=summary.mean_delta_reward,
        success_rate=summary.success_rate,
        reward_ci95=mean_interval(
            [t.reward.state_reward for t in members if t.reward is not None and not t.infra_error]
        ),
        success_ci95=wilson_interval(
            sum(1 for t in members if t.reward is not None and not t.infra_error and t.reward.success),
            sum(1 for t in members if t.reward is not None and not t.infra_error),
        ),
        pass_hat_k=pass_hat_k_within_runs(members, run_of),
        per_domain={d: _mean_reward(t for t in members if domain_of[t.environment_id] == d) for d in domains},
        per_mode={m: _mean_reward(t for t in members if t.mode == m) for m in modes},
        mean_tokens=summary.mean_tokens,
        mean_cost_usd=summary.mean_cost_usd,
        total_cost_usd=summary.total_cost_usd,
        terminations=summary.terminations,
    )


def _coverage_warnings(rows: list[LeaderboardRow], entries: dict[str, list[Trajectory]]) -> list[str]:
    task_sets = {
        row.settings_id: {task_key(t) for t in entries[row.settings_id] if t.reward is not None and not t.infra_error}
        for row in rows
    }
    if len({frozenset(tasks) for tasks in task_sets.values()}) <= 1:
        return []
    every = set().union(*task_sets.values())
    partial = [f"{row.label}: {len(task_sets[row.settings_id])}/{len(every)}" for row in rows]
    return [
        "Rows were scored on different sets of scenarios (scored tasks per row: "
        + ", ".join(partial)
        + "); compare them with care."
    ]


def _run_failures(run: LoadedRun, domain_of: dict[str, str], examples: dict[str, Trajectory]) -> RunFailures:
    scored = [t for t in run.trajectories if t.reward is not None and not t.infra_error]
    by_environment: dict[str, list[Trajectory]] = {}
    for trajectory in scored:
        by_environment.setdefault(trajectory.environment_id, []).append(trajectory)

    environments: list[EnvironmentFailures] = []
    for environment_id, members in by_environment.items():
        failing = [t for t in members if t.reward is not None and not t.reward.success]
        if not failing:
            continue
        environments.append(
            EnvironmentFailures(
                environment_id=environment_id,
                domain=domain_of[environment_id],
                scored=len(members),
                failures=len(failing),
                success_rate=1 - len(failing) / len(members),
                mean_state_reward=_mean_reward(members),
                scenarios=_scenario_failures(members, examples),
            )
        )
    environments.sort(key=lambda e: (-e.failures / e.scored, e.mean_state_reward or 0.0, e.environment_id))
    return RunFailures(
        run_id=run.manifest.run_id,
        models=sorted({t.agent.model.model for t in run.trajectories}),
        environments=environments[:FAILING_ENVIRONMENTS_PER_RUN],
    )


def _state_reward(trajectory: Trajectory) -> float:
    return trajectory.reward.state_reward if trajectory.reward is not None else 0.0


def _scenario_failures(members: list[Trajectory], examples: dict[str, Trajectory]) -> list[ScenarioFailures]:
    by_scenario: dict[tuple[str, str], list[Trajectory]] = {}
    for trajectory in members:
        by_scenario.setdefault((trajectory.scenario_id, trajectory.mode), []).append(trajectory)
    found: list[ScenarioFailures] = []
    for (scenario_id, mode), trials in by_scenario.items():
        failing = [t for t in trials if t.reward is not None and not t.reward.success]
        if not failing:
            continue
        example = min(failing, key=lambda t: (_state_reward(t), t.episode_id))
        examples[example.episode_id] = example
        found.append(
            ScenarioFailures(
                scenario_id=scenario_id,
                mode=mode,
                scored=len(trials),
                failures=len(failing),
                mean_state_reward=_mean_reward(trials),
                example_episode_id=example.episode_id,
                failed_checks=[r.check_id for r in example.check_results if not r.passed],
            )
        )
    found.sort(key=lambda s: (-s.failures / s.scored, s.mean_state_reward or 0.0, s.scenario_id, s.mode))
    return found[:FAILING_SCENARIOS_PER_ENVIRONMENT]
