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
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from harness.results.metrics import (
    open_run,
)
from harness.results.store import StoredResults
from harness.rules.profiles import DEFAULT_RULES
from harness.schema import AgentSettings, DatasetRef, RunManifest
from leaderboards.catalog import Catalog, CatalogCache
from leaderboards.collisions import check_episode_collisions
from leaderboards.pages import EpisodePages
from leaderboards.row_tally import FailureTally, RowTally, interval_of_counts, wilson_interval
from leaderboards.standing import RunOwners, standing_records

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
    episodes: EpisodePages
    """Every episode of the runs (de-duplicated): each gets a page and a row in the index, read from its run when
    the page is written."""

    @property
    def rows(self) -> list[LeaderboardRow]:
        return [row for table in self.tables for row in table.rows]


@dataclass
class LoadedRun:
    """A run folder opened for the leaderboard: its manifest and its records, read one at a time."""

    run_dir: Path
    manifest: RunManifest
    results: StoredResults


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


class RunPass:
    """What one pass over a run's own records finds: the environments of its episodes (in order), the simulated
    users of its conversational episodes, and where its scored episodes failed."""

    def __init__(self, results: StoredResults) -> None:
        self.environments: dict[str, None] = {}
        self.users: dict[str, AgentSettings] = {}
        self.failures = FailureTally()
        for trajectory in results:
            self.environments.setdefault(trajectory.environment_id)
            if trajectory.mode == "conv" and trajectory.user is not None:
                key = settings_id({"user": _without_seed(trajectory.user)})
                if key in self.users or len(self.users) < 2:  # two are enough to know there is no one user
                    self.users[key] = trajectory.user
            self.failures.add(trajectory)

    @property
    def user(self) -> AgentSettings | None:
        """The simulated user of the run's conversational episodes when they all share one, else None."""
        return next(iter(self.users.values())) if len(self.users) == 1 else None


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
        run = open_run(run_dir)
        runs.append(LoadedRun(run_dir=Path(run_dir), manifest=run.manifest, results=run.results))
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
    """Rank ``runs``, reading their records a few times over (the standing ones, each run's own) and holding none:
    per episode only its id and which runs hold it."""
    if not split_by_dataset:
        check_same_dataset(runs)
    owners = RunOwners([run.results for run in runs])
    check_episode_collisions(
        [(run.run_dir, run.manifest) for run in runs],
        owners,
        run_settings,
        lambda manifest: _dataset_key(manifest.dataset),
    )
    by_dataset: dict[tuple[str, ...], list[LoadedRun]] = {}
    for run in runs:
        by_dataset.setdefault(_dataset_key(run.manifest.dataset), []).append(run)
    catalogs = CatalogCache()
    pages = EpisodePages(owners, [catalogs.for_run(run.manifest) for run in runs])
    index_of = {id(run): index for index, run in enumerate(runs)}
    tables = [
        _build_table(dataset_runs, [index_of[id(run)] for run in dataset_runs], pages, catalogs)
        for dataset_runs in by_dataset.values()
    ]
    return Leaderboard(tables=tables, episodes=pages)


def _build_table(
    runs: Sequence[LoadedRun], indexes: list[int], pages: EpisodePages, catalogs: CatalogCache
) -> LeaderboardTable:
    # The same episode id in two runs is the same episode re-run: the run given later wins.
    owners = RunOwners([run.results for run in runs])
    resolvers = [DomainResolver(run.manifest, catalogs.for_run(run.manifest)) for run in runs]
    settings = [run_settings(run.manifest) for run in runs]
    passes = [RunPass(run.results) for run in runs]
    # A row is one agent setting and one simulated user: a run's non-conversational episodes join the row of
    # its conversational ones, so one model run in both modes makes one row with a score per mode.
    run_users = [one.user for one in passes]
    domain_of: dict[str, str] = {}
    for index, one in enumerate(passes):
        for environment_id in one.environments:
            domain_of.setdefault(environment_id, resolvers[index](environment_id))

    # Runs join one row only when every setting is equal, run-level ones (transport, step limit) included.
    entries: dict[str, RowTally] = {}
    modes: set[str] = set()
    for owner, trajectory in standing_records(owners):
        run_user = run_users[owner]
        user = run_user if run_user is not None else trajectory.user
        identity: dict[str, object] = {"agent": _without_seed(trajectory.agent), "user": _without_seed(user)}
        if settings[owner]:
            identity["run"] = settings[owner]
        key = settings_id(identity)
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = RowTally(trajectory.agent, user, settings[owner])
        entry.add(trajectory, runs[owner].manifest.run_id, domain_of[trajectory.environment_id])
        modes.add(str(trajectory.mode))

    dataset = runs[0].manifest.dataset
    domains = sorted({domain for tally in entries.values() for domain in tally.per_domain})
    ordered_modes = sorted(modes)
    rows = [_build_row(key, tally, dataset, domains, ordered_modes) for key, tally in entries.items()]
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
                episodes=len(run.results),
            )
            for run in runs
        ],
        domains=domains,
        modes=ordered_modes,
        failures=[
            _run_failures(run, one.failures, index, domain_of, pages)
            for run, one, index in zip(runs, passes, indexes, strict=True)
        ],
        warnings=_coverage_warnings(rows, entries),
    )


def _build_row(key: str, tally: RowTally, dataset: DatasetRef, domains: list[str], modes: list[str]) -> LeaderboardRow:
    summary = tally.summary.summary()
    return LeaderboardRow(
        model=tally.agent.model.model,
        settings=settings_label(tally.agent, tally.user, tally.run),
        settings_id=key,
        agent=_seedless(tally.agent),
        user=_seedless(tally.user) if tally.user is not None else None,
        dataset_source=dataset.source,
        dataset_revision=dataset.revision,
        dataset_fingerprint=dataset.fingerprint,
        runs=sorted(tally.runs),
        episodes=summary.episodes,
        scored=summary.scored,
        infra_errors=summary.infra_errors,
        unscored=summary.unscored,
        tasks=summary.tasks,
        mean_state_reward=summary.mean_state_reward,
        mean_delta_reward=summary.mean_delta_reward,
        success_rate=summary.success_rate,
        reward_ci95=interval_of_counts(tally.rewards),
        success_ci95=wilson_interval(tally.successes, summary.scored),
        pass_hat_k=tally.pass_hat_k(),
        per_domain={d: mean.value if (mean := tally.per_domain.get(d)) is not None else None for d in domains},
        per_mode={m: mean.value if (mean := tally.per_mode.get(m)) is not None else None for m in modes},
        mean_tokens=summary.mean_tokens,
        mean_cost_usd=summary.mean_cost_usd,
        total_cost_usd=summary.total_cost_usd,
        terminations=summary.terminations,
    )


def _coverage_warnings(rows: list[LeaderboardRow], entries: dict[str, RowTally]) -> list[str]:
    task_sets = {row.settings_id: entries[row.settings_id].scored_tasks for row in rows}
    if len({frozenset(tasks) for tasks in task_sets.values()}) <= 1:
        return []
    every = set().union(*task_sets.values())
    partial = [f"{row.label}: {len(task_sets[row.settings_id])}/{len(every)}" for row in rows]
    return [
        "Rows were scored on different sets of scenarios (scored tasks per row: "
        + ", ".join(partial)
        + "); compare them with care."
    ]


def _run_failures(
    run: LoadedRun, tally: FailureTally, index: int, domain_of: dict[str, str], pages: EpisodePages
) -> RunFailures:
    """Where the run's own records (not those of later runs) failed; each failing scenario's example is noted for
    its page, as this run recorded it."""
    environments: list[EnvironmentFailures] = []
    for environment_id, environment in tally.environments.items():
        if not environment.failures:
            continue
        scenarios: list[ScenarioFailures] = []
        for (scenario_id, mode), scenario in environment.scenarios.items():
            if scenario.example is None:
                continue
            example_id = scenario.example[1]
            pages.note_example(example_id, index)
            scenarios.append(
                ScenarioFailures(
                    scenario_id=scenario_id,
                    mode=mode,
                    scored=scenario.scored,
                    failures=scenario.failures,
                    mean_state_reward=scenario.rewards.value,
                    example_episode_id=example_id,
                    failed_checks=scenario.failed_checks,
                )
            )
        scenarios.sort(key=lambda s: (-s.failures / s.scored, s.mean_state_reward or 0.0, s.scenario_id, s.mode))
        environments.append(
            EnvironmentFailures(
                environment_id=environment_id,
                domain=domain_of[environment_id],
                scored=environment.scored,
                failures=environment.failures,
                success_rate=1 - environment.failures / environment.scored,
                mean_state_reward=environment.rewards.value,
                scenarios=scenarios[:FAILING_SCENARIOS_PER_ENVIRONMENT],
            )
        )
    environments.sort(key=lambda e: (-e.failures / e.scored, e.mean_state_reward or 0.0, e.environment_id))
    return RunFailures(
        run_id=run.manifest.run_id,
        models=sorted(tally.models),
        environments=environments[:FAILING_ENVIRONMENTS_PER_RUN],
    )
