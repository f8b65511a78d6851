"""A run of τ-bench imports in upstream's results format, and pass^k as upstream's ``run.py`` computes it.

Upstream's ``run.py`` writes a JSON list of ``EnvRunResult`` records (``tau_bench/types.py``): ``task_id`` (the
task's index in its split), ``reward``, ``info`` (``EnvInfo``: the task, the last source, the reward's details),
``traj`` (the agent's messages) and ``trial``. Episodes that were not scored (an infrastructure failure) are left
out, as they are of our own metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import comb
from typing import Any

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


def env_run_results(trajectories: Iterable[Trajectory], scenarios: dict[str, Scenario]) -> list[dict[str, Any]]:
    """Upstream's ``EnvRunResult`` records of the scored episodes, by trial then task."""
    trajectories = list(trajectories)
    splits = sorted({t.scenario_id.rpartition("-")[0] for t in trajectories})
    if len(splits) > 1:
        raise NotTauBenchRun(f"the run mixes {', '.join(splits)}; upstream's file holds one domain and split")
    records: list[dict[str, Any]] = []
    for trajectory in sorted(trajectories, key=lambda t: (t.trial, task_index(t.scenario_id))):
        if trajectory.reward is None or trajectory.infra_error:
            continue
        reward = float(trajectory.reward.state_reward)
        records.append(
            {
                "task_id": task_index(trajectory.scenario_id),
                "reward": reward,
                "info": _info(trajectory, reward, scenarios.get(trajectory.scenario_id)),
                "traj": list(trajectory.messages),
                "trial": trajectory.trial,
            }
        )
    return records


def upstream_pass_hat_k(records: Iterable[dict[str, Any]]) -> dict[int, float]:
    """``display_metrics`` of upstream's ``run.py``: a reward within 1e-6 of 1 is a success; for k = 1..(number
    of distinct trials), the mean over tasks of C(c, k) / C(trials, k)."""
    results = list(records)
    trials = len({r["trial"] for r in results})
    successes: dict[int, int] = {}
    for r in results:
        successes[r["task_id"]] = successes.get(r["task_id"], 0) + (1 if 1 - 1e-6 <= r["reward"] <= 1 + 1e-6 else 0)
    return {
        k: sum(comb(c, k) / comb(trials, k) for c in successes.values()) / len(successes) for k in range(1, trials + 1)
    }
