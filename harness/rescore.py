"""Re-score a stored run with a library's current checks, without calling any model but a judge asked for.

Each episode's final state is rebuilt by replaying its recorded tool calls in the jail, from the scenario's initial
state, with the session the run used (the same rules, the same seed); every replayed result must equal the recorded
one. The library's checks then run on that state through the same verdict a run computes
(:func:`harness.episode.verdict.episode_verdict`). An episode whose environment failed (``environment_error``) is
scored by the rules alone (as a failure, or not at all), as a run scores it, when the environment's code is the
version that failed.

A scenario's LLM-judged checks are decided by the episode's stored judge replies, read again by the benchmark's
parse function (a replay: no request), or, given a judge (``--judge-model``), by asking it anew
(:mod:`harness.episode.judging`).

Only verdicts recomputed here reach the new folder. An episode that cannot be re-scored is listed with its reason
and left out of the new results and summary (never counted with its old verdict): its record contradicts itself
(:mod:`harness.results.contradictions`), the library lacks its environment or scenario, the environment's code or the
scenario changed since the run, a replayed result differs, or it ended without a final state to replay (an
infrastructure error).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from harness.episode.dispatch import open_tool_session
from harness.episode.judging import Judge, JudgeNotRecorded, judged_trajectory
from harness.episode.tool_messages import pass_through_tools
from harness.episode.verdict import EndedEpisode, episode_verdict
from harness.errors import BadInput
from harness.library import Library
from harness.records.versions import environment_hash, library_checks_hash, record_versions
from harness.registry import rules_profile
from harness.results.contradictions import contradictions
from harness.results.metrics import MANIFEST_FILE, RESULTS_FILE, open_run, write_summary
from harness.results.store import ResultStore, StoredResults
from harness.results.tally import SummaryTally
from harness.rules.profiles import DEFAULT_RULES, EpisodeRules, UnknownRules
from harness.sandbox import SandboxError, SandboxPool
from harness.schema import (
    DatasetRef,
    Environment,
    Observation,
    RescoredFrom,
    RunManifest,
    Scenario,
    Step,
    Trajectory,
)
from harness.scoring.checks import zero_reward
from harness.scoring.reward import CompositeWeights

logger = logging.getLogger(__name__)

REPORT_FILE = "rescore.json"
T = TypeVar("T")
Outcome = Literal["replayed", "rules"]


class RescoreRefused(BadInput):
    """The re-scoring cannot start: the run folder, the library or the output folder is unusable."""


class NotRescoredCause(StrEnum):
    """Why an episode was not re-scored."""

    CONTRADICTORY_RECORD = "contradictory_record"
    """Fields of its record contradict each other (it is refused)."""
    MISSING_ENVIRONMENT = "missing_environment"
    MISSING_SCENARIO = "missing_scenario"
    ENVIRONMENT_CHANGED = "environment_changed"
    SCENARIO_CHANGED = "scenario_changed"
    NO_FINAL_STATE = "no_final_state"
    """It ended without a final state that a replay could rebuild, and no rule scores it without one."""
    DUAL_CONTROL = "dual_control"
    REPLAY_DIFFERS = "replay_differs"
    JAIL = "jail"
    """The jail could not replay it."""
    JUDGE_NOT_RECORDED = "judge_not_recorded"
    """A judged check asks what its record holds no judge's reply to (and no judge was given to ask)."""
    JUDGE_FAILED = "judge_failed"
    """The judge given gave no verdict (no reply, or one the benchmark's evaluator cannot read)."""


class EpisodeRefused(Exception):
    """One episode cannot be re-scored; the message says why."""

    def __init__(self, cause: NotRescoredCause, reason: str) -> None:
        super().__init__(reason)
        self.cause = cause


class NotRescored(BaseModel):
    episode_id: str
    scenario_id: str
    cause: NotRescoredCause
    reason: str


class RescoreReport(BaseModel):
    """What ``harness rescore`` did; written as ``rescore.json`` in the new folder."""

    run_id: str
    source_dir: str
    out_dir: str
    episodes: int = Field(default=0, description="Episodes of the run (one per episode id).")
    rescored: int = Field(default=0, description="Episodes whose verdict was recomputed: the new folder's episodes.")
    by_rules: int = Field(
        default=0, description="Of those, environment failures scored by the rules alone (no checks run)."
    )
    changed: int = Field(default=0, description="Re-scored episodes whose check results or reward changed.")
    judged: int = Field(default=0, description="Re-scored episodes whose judged checks the judge given decided anew.")
    judge_replayed: int = Field(
        default=0, description="Re-scored episodes whose judged checks were decided by their stored judge replies."
    )
    not_rescored: list[NotRescored] = Field(
        default_factory=list, description="Episodes left out of the new folder, each with its reason."
    )

    @model_serializer(mode="wrap")
    def _omit_an_absent_judge(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Reports of runs without judged checks read exactly as before the judge's counts existed.
        data: dict[str, Any] = handler(self)
        if not data.get("judged") and not data.get("judge_replayed"):
            data.pop("judged", None)
            data.pop("judge_replayed", None)
        return data

    @property
    def complete(self) -> bool:
        return not self.not_rescored


@dataclass
class RescorePlan:
    """A run folder checked against a library: what will be replayed with what (the run's records are read one at
    a time)."""

    run_dir: Path
    manifest: RunManifest
    trajectories: StoredResults
    library: Library
    rules: EpisodeRules
    seed: int
    out: Path
    scenarios: dict[tuple[str, str], Scenario] = field(default_factory=dict)
    judge: Judge | None = None
    """The judge that decides judged checks anew (``--judge-model``); None replays the stored replies."""


def plan_rescore(run_dir: Path, library: Library, out: Path) -> RescorePlan:
    """Read the run and check, before any work, that ``out`` is free and that the library holds the environment and
    scenario of at least one of the run's episodes. Raises :class:`RescoreRefused` with one line per problem."""
    try:
        run = open_run(run_dir)
    except FileNotFoundError as exc:
        raise RescoreRefused(str(exc)) from None
    except ValueError as exc:
        raise RescoreRefused(f"cannot read {run_dir}: {exc}") from None
    if out.exists() and any(out.iterdir()):
        raise RescoreRefused(f"{out} exists and is not empty; choose another --out")
    if out.resolve() == run_dir.resolve():
        raise RescoreRefused("--out must be a new folder, not the run folder itself")
    manifest, trajectories = run.manifest, run.results
    try:
        rules = rules_profile(str(manifest.config.get("rules") or DEFAULT_RULES))
    except UnknownRules as exc:
        raise RescoreRefused(f"{run_dir}: {exc}") from None
    if manifest.config.get("mcp"):
        raise RescoreRefused(
            f"{run_dir} ran its environments behind an MCP server: its tool results were not produced in this "
            "jail, so its final states cannot be rebuilt here"
        )
    scenarios = {(s.environment_id, s.id): s for s in library.scenarios}
    if len(trajectories) and not any((t.environment_id, t.scenario_id) in scenarios for t in trajectories):
        raise RescoreRefused(
            f"the library {library.source.source} holds none of the environments and scenarios of {run_dir}",
            *missing_ids(trajectories, library, scenarios),
        )
    seed = manifest.config.get("seed", 0)
    return RescorePlan(
        run_dir,
        manifest,
        trajectories,
        library,
        rules,
        seed if isinstance(seed, int) else 0,
        out,
        scenarios,
    )


def missing_ids(
    trajectories: Iterable[Trajectory], library: Library, scenarios: dict[tuple[str, str], Scenario]
) -> list[str]:
    """One line per environment or scenario id the run used and the library lacks, with its episode count."""
    missing_environments: dict[str, int] = {}
    missing_scenarios: dict[tuple[str, str], int] = {}
    for trajectory in trajectories:
        if trajectory.environment_id not in library.environments:
            missing_environments[trajectory.environment_id] = missing_environments.get(trajectory.environment_id, 0) + 1
        elif (trajectory.environment_id, trajectory.scenario_id) not in scenarios:
            key = (trajectory.environment_id, trajectory.scenario_id)
            missing_scenarios[key] = missing_scenarios.get(key, 0) + 1
    source = library.source.source
    lines = [
        f"the library {source} has no environment {env_id!r} ({count} episode{'s' * (count != 1)} of the run)"
        for env_id, count in sorted(missing_environments.items())
    ]
    lines += [
        f"the library {source} has no scenario {scenario_id!r} of environment {env_id!r} "
        f"({count} episode{'s' * (count != 1)} of the run)"
        for (env_id, scenario_id), count in sorted(missing_scenarios.items())
    ]
    return lines


def episode_seed(trajectory: Trajectory, run_seed: int) -> int:
    """The seed the run gave the episode's session (harness.run.plan: the episode id's first 32 bits ^ --seed)."""
    try:
        return int(trajectory.episode_id[:8], 16) ^ run_seed
    except ValueError:
        return run_seed


def _recorded(observation: Observation) -> list[Any]:
    return [observation.kind.value, observation.content, observation.error]


def _replayed_by_the_session(step: Step, rules: EpisodeRules, session_tools: set[str]) -> bool:
    # Under rules that answer a call to a state attribute themselves, that call never reached the environment.
    return not (rules.errors_as_user_messages and step.call.name not in session_tools)


async def replay_final_state(
    pool: SandboxPool, plan: RescorePlan, trajectory: Trajectory, environment: Environment, scenario: Scenario
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state at reset, final state) after replaying the trajectory's recorded calls in a fresh session."""
    session_environment = environment
    if plan.rules.pass_arguments_through:
        session_environment = environment.model_copy(update={"tools": pass_through_tools(environment)})
    session_tools = set(session_environment.tool_names)
    session = await open_tool_session(
        pool, session_environment, scenario.initial_state, seed=episode_seed(trajectory, plan.seed)
    )
    try:
        start_state = await session.state()
        for step in trajectory.steps:
            if not _replayed_by_the_session(step, plan.rules, session_tools):
                continue
            observation, _ = await session.call(step.call)
            if _recorded(observation) != _recorded(step.observation):
                raise EpisodeRefused(
                    NotRescoredCause.REPLAY_DIFFERS,
                    f"replaying call {step.index + 1} ({step.call.name}) gave another result than the recorded "
                    f"one: {_short(_recorded(observation))} now, {_short(_recorded(step.observation))} recorded",
                )
        return start_state, await session.state()
    finally:
        await session.close()


def _short(value: object, limit: int = 160) -> str:
    text = orjson.dumps(value, default=str).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def rescore_episode(pool: SandboxPool, plan: RescorePlan, trajectory: Trajectory) -> tuple[Outcome, Trajectory]:
    """The episode with the library's verdict: from a replay and the checks ("replayed"), or, for an environment
    failure, from the rules alone ("rules"). :class:`EpisodeRefused` when it cannot be re-scored."""
    found = contradictions(trajectory, plan.rules)
    if found:
        raise EpisodeRefused(
            NotRescoredCause.CONTRADICTORY_RECORD, "the record contradicts itself: " + "; ".join(found)
        )
    environment = plan.library.environments.get(trajectory.environment_id)
    if environment is None:
        raise EpisodeRefused(
            NotRescoredCause.MISSING_ENVIRONMENT,
            f"the library {plan.library.source.source} has no environment {trajectory.environment_id!r}",
        )
    scenario = plan.scenarios.get((trajectory.environment_id, trajectory.scenario_id))
    if scenario is None:
        raise EpisodeRefused(
            NotRescoredCause.MISSING_SCENARIO,
            f"the library {plan.library.source.source} has no scenario {trajectory.scenario_id!r} of environment "
            f"{trajectory.environment_id!r}",
        )
    versions = record_versions(environment, scenario, plan.rules.name)
    recorded = trajectory.versions
    if recorded is not None and recorded.environment is not None and recorded.environment != versions.environment:
        raise EpisodeRefused(
            NotRescoredCause.ENVIRONMENT_CHANGED,
            f"the environment's code changed since the run (version {recorded.environment} recorded, "
            f"{environment_hash(environment)} in the library)",
        )
    if recorded is not None and recorded.scenario != versions.scenario:
        raise EpisodeRefused(
            NotRescoredCause.SCENARIO_CHANGED,
            f"the scenario changed since the run (version {recorded.scenario} recorded, {versions.scenario} in the "
            "library): only its checks may differ",
        )
    update: dict[str, Any] = {"versions": versions, "rescored_from": trajectory.run_id, "run_id": plan_run_id(plan)}
    if trajectory.infra_error:
        raise EpisodeRefused(
            NotRescoredCause.NO_FINAL_STATE,
            "it ended in an infrastructure error: there is no final state to rebuild (re-run it with harness run "
            "--resume --retry-errors)",
        )
    if trajectory.environment_error:
        if recorded is None or recorded.environment is None:
            raise EpisodeRefused(
                NotRescoredCause.NO_FINAL_STATE,
                "its environment failed and the record does not say which version of the environment's code failed",
            )
        reward = zero_reward(scenario) if plan.rules.environment_failure == "scored_failed" else None
        return "rules", trajectory.model_copy(update={**update, "check_results": [], "reward": reward})
    if trajectory.user_steps:
        raise EpisodeRefused(
            NotRescoredCause.DUAL_CONTROL,
            "the simulated user called tools (dual control): the replay would leave out its calls",
        )
    try:
        start_state, final_state = await replay_final_state(pool, plan, trajectory, environment, scenario)
        ended = EndedEpisode(
            scenario=scenario,
            environment=environment,
            rules=plan.rules,
            termination=trajectory.termination,
            messages=trajectory.messages,
            calls=[step.call for step in trajectory.steps],
            seed=episode_seed(trajectory, plan.seed),
            scripted=bool(scenario.turns) and trajectory.mode == "conv",
            weights=CompositeWeights(),
        )
        check_results, reward = await episode_verdict(pool, ended, final_state, start_state)
    except SandboxError as exc:
        raise EpisodeRefused(NotRescoredCause.JAIL, f"the jail could not replay it: {exc}") from None
    update.update({"check_results": check_results, "reward": reward})
    rescored = trajectory.model_copy(update=update)
    if scenario.judged_checks:
        rescored = await judge_again(plan, rescored, scenario, environment)
    return "replayed", rescored


async def judge_again(
    plan: RescorePlan, rescored: Trajectory, scenario: Scenario, environment: Environment
) -> Trajectory:
    """The re-scored episode with its judged checks decided by the plan's judge, or by its stored replies."""
    try:
        judged = await judged_trajectory(
            rescored, scenario, environment, plan.rules, plan.judge, seed=episode_seed(rescored, plan.seed)
        )
    except JudgeNotRecorded as exc:
        raise EpisodeRefused(NotRescoredCause.JUDGE_NOT_RECORDED, str(exc)) from None
    if judged.infra_error:
        raise EpisodeRefused(NotRescoredCause.JUDGE_FAILED, f"the judge gave no verdict: {judged.termination_detail}")
    return judged


def plan_run_id(plan: RescorePlan) -> str:
    """The new folder's run id: its name, as for a run."""
    return plan.out.name


def verdict_of(trajectory: Trajectory) -> bytes:
    """The part of a record a re-scoring decides, as canonical bytes (to count changed verdicts)."""
    return orjson.dumps(
        [
            [r.model_dump(mode="json") for r in trajectory.check_results],
            trajectory.reward.model_dump(mode="json") if trajectory.reward else None,
        ],
        option=orjson.OPT_SORT_KEYS,
    )


async def rescore_run(plan: RescorePlan, pool: SandboxPool, *, concurrency: int = 16) -> RescoreReport:
    """Re-score every episode of ``plan`` into its new folder (manifest, results, summary, report). Episodes are
    read one at a time and written in the run's order as they are done: at most a window of them (four times
    ``concurrency``) is held, running or waiting for an earlier one to be written."""
    out = plan.out
    report = RescoreReport(
        run_id=plan.manifest.run_id, source_dir=str(plan.run_dir), out_dir=str(out), episodes=len(plan.trajectories)
    )
    out.mkdir(parents=True, exist_ok=True)
    library_ref = DatasetRef(
        source=plan.library.source.source,
        revision=plan.library.source.revision,
        fingerprint=plan.library.source.fingerprint,
    )
    pinned: dict[str, Any] = {}
    if plan.judge is not None:
        judge_model = plan.judge.settings.model
        pinned["config"] = {**plan.manifest.config, "judge_model": judge_model, "judge": plan.judge.pinned()}
        pinned["model_resolution"] = {
            **plan.manifest.model_resolution,
            judge_model: plan.judge.client.resolve(judge_model).model_dump(mode="json"),
        }
    manifest = plan.manifest.model_copy(
        update={
            **pinned,
            "run_id": plan_run_id(plan),
            "dataset": library_ref,
            "checks_version": library_checks_hash(plan.library.scenarios),
            "rescored_from": RescoredFrom(
                run_id=plan.manifest.run_id,
                run_dir=str(plan.run_dir),
                checks_version=plan.manifest.checks_version,
                dataset=plan.manifest.dataset,
            ),
        }
    )
    (out / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    store = ResultStore(out / RESULTS_FILE)
    # The summary counts only what was re-scored here: an episode left out never counts with its old verdict.
    summary = SummaryTally()
    limit = asyncio.Semaphore(max(1, concurrency))

    async def one(trajectory: Trajectory) -> Trajectory | None:
        try:
            async with limit:
                outcome, rescored = await rescore_episode(pool, plan, trajectory)
        except EpisodeRefused as refused:
            report.not_rescored.append(
                NotRescored(
                    episode_id=trajectory.episode_id,
                    scenario_id=trajectory.scenario_id,
                    cause=refused.cause,
                    reason=str(refused),
                )
            )
            return None
        report.rescored += 1
        report.by_rules += outcome == "rules"
        report.changed += verdict_of(rescored) != verdict_of(trajectory)
        if rescored.judge is not None and rescored.judge is not trajectory.judge:
            replayed = all(exchange.replayed for exchange in rescored.judge.exchanges)
            report.judge_replayed += replayed
            report.judged += not replayed
        summary.count(rescored)
        return rescored

    try:
        # Written in the original's order, so the two folders read side by side.
        async for rescored in in_order(map(one, plan.trajectories), window=4 * max(1, concurrency)):
            if rescored is not None:
                store.append(rescored)
    finally:
        store.close()
    report.not_rescored.sort(key=lambda r: r.episode_id)
    write_summary(out, summary.run_summary(manifest.run_id))
    (out / REPORT_FILE).write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return report


async def in_order(jobs: Iterator[Coroutine[Any, Any, T]], *, window: int) -> AsyncIterator[T]:
    """The results of ``jobs``, run at most ``window`` at a time, in the order the jobs come (a job is taken from
    ``jobs`` only when one of the window's is done and given back)."""
    pending: deque[asyncio.Task[T]] = deque()
    try:
        for job in jobs:
            pending.append(asyncio.ensure_future(job))
            if len(pending) >= window:
                yield await pending.popleft()
        while pending:
            yield await pending.popleft()
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def discard_output(out: Path) -> None:
    """Remove a folder this module started writing (an interrupted re-scoring leaves nothing half-written)."""
    shutil.rmtree(out, ignore_errors=True)
