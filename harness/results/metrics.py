"""Metrics over trajectories: the numbers a run summary and a leaderboard show (counted one record at a time by
:mod:`harness.results.tally`), and the readers of a run folder's files.

Accounting rules:
- An episode that ended in an infrastructure error (``termination == infra_error``) is counted and reported,
  and kept out of every average: it is neither scored as 0 nor silently dropped.
- An episode without a reward that did not end in an infrastructure error is counted as ``unscored`` and is
  likewise kept out of the reward averages (it still counts in the step, token and cost averages: it ran).
- An episode whose environment failed (``termination == environment_error``: it could not be loaded, or its
  process died, stopped or exited on its own) is counted as ``environment_errors``; it is scored as its rules
  say (``environment_failure``: a failed episode with reward 0, in every average, or unscored), never dropped.
- When a run's ``results.jsonl`` holds several lines for one ``episode_id`` (a retry), the last line wins.
- pass^k as agent benchmarks define it: per task with ``n`` scored trials of which ``c`` succeeded, C(c, k) / C(n, k),
  averaged over tasks; k runs from 1 to the smallest ``n`` over the group's tasks. A task is one scenario in
  one mode; trials are told apart by the trajectory's ``trial`` field.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from harness.errors import BadInput
from harness.files import RUN_FOLDER_BUDGET, ReadBudget
from harness.records.versions import VersionsSummary
from harness.results.store import RecordListener, StoredResults, folder_tree, run_file_exists
from harness.schema import RunManifest, Trajectory

logger = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"

DEFAULT_GROUP_BY: tuple[str, ...] = ("environment_id", "mode")

RUN_FILE_BUDGET = ReadBudget(
    max_bytes=RUN_FOLDER_BUDGET.line_bytes,
    max_values=RUN_FOLDER_BUDGET.line_values,
    max_depth=RUN_FOLDER_BUDGET.max_depth,
)
"""A run folder's whole-JSON files (``manifest.json``): held to what one line of ``results.jsonl`` may hold."""


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one task, as agent benchmarks define it: the chance that k trials drawn from n (c successes) all
    succeed."""
    if n < 1 or k < 1 or k > n or c < 0 or c > n:
        raise ValueError(f"pass^k needs 1 <= k <= n and 0 <= c <= n (got n={n}, c={c}, k={k})")
    return math.comb(c, k) / math.comb(n, k)


# ------------------------------------------------------------------------------------------------ grouping


def _agent_model(trajectory: Trajectory) -> str:
    return trajectory.agent.model.model


def _user_model(trajectory: Trajectory) -> str:
    return trajectory.user.model.model if trajectory.user is not None else ""


def _termination(trajectory: Trajectory) -> str:
    return trajectory.termination.value


GROUP_KEY_GETTERS: dict[str, Callable[[Trajectory], str]] = {
    "model": _agent_model,
    "user_model": _user_model,
    "termination": _termination,
}
"""Group keys that are not plain trajectory fields."""


def group_value(trajectory: Trajectory, key: str) -> str:
    """The value of one group key for a trajectory: a special key or a trajectory field, as text."""
    getter = GROUP_KEY_GETTERS.get(key)
    if getter is not None:
        return getter(trajectory)
    if key not in Trajectory.model_fields:
        raise ValueError(f"cannot group by {key!r}: not a trajectory field nor one of {sorted(GROUP_KEY_GETTERS)}")
    value = getattr(trajectory, key)
    return "" if value is None else str(value)


# --------------------------------------------------------------------------------------------- summaries


class GroupSummary(BaseModel):
    """The metrics of one group of episodes (one environment and mode, one model, or a whole run)."""

    key: dict[str, str] = Field(default_factory=dict, description="Group key fields and their values.")
    episodes: int = Field(description="Distinct episodes, whatever their outcome.")
    scored: int = Field(description="Episodes with a reward (these make the reward averages).")
    infra_errors: int = Field(description="Episodes ended by an infrastructure failure; kept out of averages.")
    unscored: int = Field(default=0, description="Episodes with no reward that were not infrastructure errors.")
    environment_errors: int = Field(
        default=0,
        description="Episodes the environment failed (not loadable; its process died, stopped or exited on its "
        "own); scored as the rules say, never re-run.",
    )
    user_simulator_failures: int = Field(default=0, description="Episodes the simulated user failed (infra errors).")
    user_simulator_failure_share: float | None = Field(
        default=None,
        description="Share of the failed episodes (infra and environment errors) the user simulator caused.",
    )
    tasks: int = Field(default=0, description="Distinct (scenario, mode) pairs with at least one scored trial.")
    mean_state_reward: float | None = None
    mean_delta_reward: float | None = None
    delta_defined: int = Field(default=0, description="Scored episodes whose delta_reward is defined.")
    success_rate: float | None = None
    pass_hat_k: dict[int, float] = Field(default_factory=dict)
    mean_steps: float | None = Field(default=None, description="Assistant turns per episode.")
    mean_tool_calls: float | None = None
    mean_tokens: float | None = Field(default=None, description="Prompt + completion tokens, all roles.")
    total_tokens: int = 0
    total_cost_usd: float = Field(default=0.0, description="Money spent by every episode, errors included.")
    mean_cost_usd: float | None = Field(default=None, description="Per episode, infrastructure errors excluded.")
    unpriced_requests: int = Field(
        default=0, description="Requests to models with no known price: their cost is unknown and not in the totals."
    )
    judge_requests: int = Field(default=0, description="Requests to the LLM judge of judged checks (role judge).")
    judge_cost_usd: float = Field(
        default=0.0, description="Money the LLM judge cost (role judge), part of total_cost_usd, reported apart."
    )
    terminations: dict[str, int] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _omit_an_absent_judge(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Summaries of runs without a judge read exactly as before the judge's fields existed.
        data: dict[str, Any] = handler(self)
        if not data.get("judge_requests") and not data.get("judge_cost_usd"):
            data.pop("judge_requests", None)
            data.pop("judge_cost_usd", None)
        return data

    @property
    def label(self) -> str:
        return " / ".join(self.key.values()) if self.key else "all"


class RunSummary(BaseModel):
    """What ``summary.json`` holds: the whole run and one line per group."""

    run_id: str | None = None
    group_by: list[str] = Field(default_factory=lambda: list(DEFAULT_GROUP_BY))
    overall: GroupSummary
    groups: list[GroupSummary] = Field(default_factory=list)
    versions: VersionsSummary | None = Field(default=None, description="What graded the episodes summarized.")


def assistant_turns(trajectory: Trajectory) -> int:
    return sum(1 for message in trajectory.messages if message.get("role") == "assistant")


def episode_tokens(trajectory: Trajectory) -> int:
    return sum(usage.total_tokens for usage in trajectory.usage.values())


def episode_cost(trajectory: Trajectory) -> float:
    """Money the episode's priced requests cost (see ``GroupSummary.unpriced_requests`` for the others)."""
    return sum(usage.cost_usd for usage in trajectory.usage.values())


def cost_text(cost_usd: float | None, unpriced_requests: int) -> str:
    """A cost as shown: never "$0" for requests whose price is unknown."""
    if unpriced_requests and not cost_usd:
        return "unpriced"
    shown = "—" if cost_usd is None else f"{cost_usd:.4f}"
    return f"{shown} + unpriced" if unpriced_requests else shown


def task_key(trajectory: Trajectory) -> tuple[str, str, str]:
    return (trajectory.environment_id, trajectory.scenario_id, trajectory.mode)


# ---------------------------------------------------------------------------------------------- run folders


def deduplicate(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """One trajectory per episode_id; a later one replaces an earlier one (in the earlier one's place)."""
    by_id: dict[str, Trajectory] = {}
    for trajectory in trajectories:
        by_id[trajectory.episode_id] = trajectory
    return list(by_id.values())


def open_results(path: Path, listener: RecordListener | None = None) -> StoredResults:
    """The records of a ``results.jsonl`` file as they stand (the last line of each episode wins, in the place of its
    first), read one at a time (:class:`harness.results.store.StoredResults`); none when the file is absent.

    The file is read as hostile (see :func:`harness.results.store.read_records`): a symlink is refused with its path,
    and a line that does not hold a trajectory (a final line cut short by a killed run, a damaged, over-deep or
    over-budget line) is skipped with a warning naming it. ``listener`` (a running summary) is told each record.
    """
    return StoredResults(path, listener)


def read_results(path: Path) -> list[Trajectory]:
    """Every trajectory of a ``results.jsonl`` file as a list (see :func:`open_results`, which holds none of them:
    this is for runs small enough to hold, as tests and benchmarks make)."""
    return list(open_results(path))


def load_manifest(run_dir: Path | str) -> RunManifest:
    """The run folder's manifest, read as hostile: a symlink is refused with its path, and the file is held to the
    budget of one line of ``results.jsonl`` (bytes and JSON values) before it is decoded."""
    folder = Path(run_dir)
    if not run_file_exists(folder, MANIFEST_FILE):
        raise FileNotFoundError(f"{run_dir} is not a run folder: {MANIFEST_FILE} is missing")
    try:
        return RunManifest.model_validate(folder_tree(folder, RUN_FILE_BUDGET).read_json(MANIFEST_FILE))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the top level"
        raise BadInput(
            f"{folder / MANIFEST_FILE} is not a run manifest: {where}: {first['msg']} "
            f"({error.error_count()} problem{'s' * (error.error_count() != 1)})"
        ) from None


def load_run(run_dir: Path | str) -> tuple[RunManifest, list[Trajectory]]:
    """The manifest and every record of a run folder as a list (see :func:`open_run`, which holds none of them:
    this is for runs small enough to hold, as tests and benchmarks make)."""
    return load_manifest(run_dir), read_results(Path(run_dir) / RESULTS_FILE)


@dataclass(frozen=True)
class StoredRun:
    """A run folder opened for reading: its manifest and its records, read one at a time."""

    run_dir: Path
    manifest: RunManifest
    results: StoredResults


def open_run(run_dir: Path | str, listener: RecordListener | None = None) -> StoredRun:
    """The manifest and the records of a run folder (both read as hostile, see above); ``listener`` is told each
    record as the results are first read."""
    folder = Path(run_dir)
    manifest = load_manifest(folder)
    return StoredRun(folder, manifest, open_results(folder / RESULTS_FILE, listener))


def write_summary(run_dir: Path | str, summary: RunSummary) -> Path:
    """Write ``summary.json`` atomically (write a temporary file, then rename)."""
    path = Path(run_dir) / SUMMARY_FILE
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(summary.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path
