"""A run of τ-bench imports in upstream's results format, and pass^k as upstream's ``run.py`` computes it.

Upstream's ``run.py`` writes a JSON list of ``EnvRunResult`` records (``tau_bench/types.py``): ``task_id`` (the
task's index in its split), ``reward``, ``info`` (``EnvInfo``: the task, the last source, the reward's details),
``traj`` (the agent's messages) and ``trial``. Episodes that were not scored (an infrastructure failure) are left
out, as they are of our own metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from math import comb
from typing import IO, Any

from harness.results.store import StoredResults
from harness.schema import Scenario, Trajectory

SCENARIO_PREFIX = "taubench-"


class NotTauBenchRun(ValueError):
    """The run holds episodes of scenarios that were not imported from τ-bench."""


def task_index(scenario_id: str) -> int:
    """The task's index in its split, the last part of ``taubench-<domain>-<split>-<index>``."""
    head, _, index = scenario_id.rpartition("-")
    if not scenario_id.startswith(SCENARIO_PREFIX) or not head or not index.isdigit():
        raise NotTauBenchRun(
            f"episode of {scenario_id!r}, which is not a τ-bench import (taubench-<domain>-<split>-<n>)"
        )
    return int(index)


def _task(scenario: Scenario) -> dict[str, Any]:
    details = scenario.provenance.details
    return {
        "user_id": details.get("user_id"),
        "actions": [{"name": a.name, "kwargs": a.arguments} for a in scenario.reference_actions],
        "instruction": scenario.task,
        "outputs": list(details.get("outputs") or []),
    }


def _info(trajectory: Trajectory, reward: float, scenario: Scenario | None) -> dict[str, Any]:
    passed = {result.check_id: result.passed for result in trajectory.check_results}
    outputs = [str(o) for o in (scenario.provenance.details.get("outputs") or [])] if scenario else []
    reward_detail: dict[str, Any]
    if outputs:
        found = {output: passed.get(f"taubench-output-{i}", False) for i, output in enumerate(outputs)}
        reward_detail = {"r_outputs": 1.0 if all(found.values()) else 0.0, "outputs": found}
    else:
        gold_hash = scenario.provenance.details.get("gold_data_hash") if scenario else None
        reward_detail = {"r_actions": 1.0 if passed.get("taubench-data") else 0.0, "gt_data_hash": gold_hash}
    last_call = trajectory.steps[-1].call.name if trajectory.steps else None
    last = trajectory.messages[-1] if trajectory.messages else {}
    info: dict[str, Any] = {
        "source": "user" if last.get("role") == "user" or last_call is None else last_call,
        "user_cost": trajectory.usage["user"].cost_usd if "user" in trajectory.usage else None,
        "termination": trajectory.termination.value,
    }
    if scenario is not None:
        info["task"] = _task(scenario)
    if trajectory.check_results:
        actions = [a for a in info.get("task", {}).get("actions", []) if a["name"] != "respond"]
        info["reward_info"] = {"reward": reward, "info": reward_detail, "actions": actions}
    return info


def env_run_result(trajectory: Trajectory, scenarios: dict[str, Scenario]) -> dict[str, Any]:
    """Upstream's ``EnvRunResult`` record of one scored episode."""
    assert trajectory.reward is not None
    reward = float(trajectory.reward.state_reward)
    return {
        "task_id": task_index(trajectory.scenario_id),
        "reward": reward,
        "info": _info(trajectory, reward, scenarios.get(trajectory.scenario_id)),
        "traj": list(trajectory.messages),
        "trial": trajectory.trial,
    }


def env_run_results(trajectories: Iterable[Trajectory], scenarios: dict[str, Scenario]) -> list[dict[str, Any]]:
    """Upstream's ``EnvRunResult`` records of the scored episodes, by trial then task."""
    trajectories = list(trajectories)
    check_one_split(t.scenario_id for t in trajectories)
    return [
        env_run_result(trajectory, scenarios)
        for trajectory in sorted(trajectories, key=lambda t: (t.trial, task_index(t.scenario_id)))
        if trajectory.reward is not None and not trajectory.infra_error
    ]


def check_one_split(scenario_ids: Iterable[str]) -> None:
    """:class:`NotTauBenchRun` when the episodes come from more than one domain and split."""
    splits = sorted({scenario_id.rpartition("-")[0] for scenario_id in scenario_ids})
    if len(splits) > 1:
        raise NotTauBenchRun(f"the run mixes {', '.join(splits)}; upstream's file holds one domain and split")


@dataclass
class ScoredOrder:
    """Which episodes of a run upstream's file holds and in what order (by trial, then task), without their
    records: their positions, and per each its task, trial and success, for pass^k."""

    positions: list[int]
    outcomes: list[tuple[int, int, bool]]
    """(task id, trial, success) in the file's order."""
    episodes: int


def scored_order(results: StoredResults) -> ScoredOrder:
    """The order of upstream's file over ``results`` (read once); :class:`NotTauBenchRun` for a run that is not of
    one τ-bench domain and split."""
    splits: set[str] = set()
    keys: list[tuple[int, int, int, bool, bool]] = []
    unordered: list[str] = []
    for position, trajectory in results.read(range(len(results))):
        splits.add(trajectory.scenario_id.rpartition("-")[0])
        try:
            index = task_index(trajectory.scenario_id)
        except NotTauBenchRun:
            unordered.append(trajectory.scenario_id)
            continue
        scored = trajectory.reward is not None and not trajectory.infra_error
        success = scored and trajectory.reward is not None and 1 - 1e-6 <= trajectory.reward.state_reward <= 1 + 1e-6
        keys.append((trajectory.trial, index, position, scored, success))
    check_one_split(splits)
    if unordered:
        task_index(unordered[0])  # raises, naming the first episode that is not of a τ-bench import
    keys.sort(key=lambda key: key[:2])
    kept = [key for key in keys if key[3]]
    return ScoredOrder(
        positions=[position for _, _, position, _, _ in kept],
        outcomes=[(index, trial, success) for trial, index, _, _, success in kept],
        episodes=len(results),
    )


def write_env_run_results(
    order: ScoredOrder, results: StoredResults, scenarios: dict[str, Scenario], handle: IO[bytes]
) -> int:
    """Write upstream's file (the bytes ``json.dumps(records, indent=2)`` gives, and a newline), one record at a
    time, each read from the run as it is written; returns how many were written."""
    written = 0
    handle.write(b"[")
    for _, trajectory in results.read(order.positions):
        text = json.dumps(env_run_result(trajectory, scenarios), indent=2)
        handle.write((b",\n" if written else b"\n") + "\n".join("  " + line for line in text.split("\n")).encode())
        written += 1
    handle.write(b"\n]\n" if written else b"]\n")
    return written


def upstream_pass_hat_k(records: Iterable[dict[str, Any]]) -> dict[int, float]:
    """``display_metrics`` of upstream's ``run.py``: a reward within 1e-6 of 1 is a success; for k = 1..(number
    of distinct trials), the mean over tasks of C(c, k) / C(trials, k)."""
    return pass_hat_k_of_outcomes((r["task_id"], r["trial"], 1 - 1e-6 <= r["reward"] <= 1 + 1e-6) for r in records)


def pass_hat_k_of_outcomes(outcomes: Iterable[tuple[int, int, bool]]) -> dict[int, float]:
    """As :func:`upstream_pass_hat_k`, from each record's (task id, trial, success), in the file's order."""
    trials_seen: set[int] = set()
    successes: dict[int, int] = {}
    for task_id, trial, success in outcomes:
        trials_seen.add(trial)
        successes[task_id] = successes.get(task_id, 0) + (1 if success else 0)
    trials = len(trials_seen)
    return {
        k: sum(comb(c, k) / comb(trials, k) for c in successes.values()) / len(successes) for k in range(1, trials + 1)
    }
