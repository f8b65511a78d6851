"""Check batches on a Ray cluster (two worker nodes, one executor each): a run's trials of one task go to one
executor, which announces each episode to its pool as the local backend does, so one check process scores them
(``tests/harness/sandbox/test_jail_check_batches.py`` shows the same for a local run)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

from agents.run_adapters import agent_factory
from harness.results.metrics import read_results
from harness.run import RunConfig, run
from harness.sandbox import SandboxLimits
from harness.schema import Check
from tests.harness.sandbox.test_jail_check_batches import WITNESS
from tests.support.jail_library import hostile_scenario, write_hostile_library

TRIALS = 4


async def test_a_ray_runs_trials_of_one_task_are_scored_by_one_check_process(ray_cluster, tmp_path: Path):
    honest = Check(id="bumped", description="", source="def check(i, f):\n    return f['counter'] == 1\n")
    witness = Check(id="witness", description="", source=WITNESS)
    tasks = ["first", "second"]
    scenarios = [
        hostile_scenario([("bump", {})], scenario_id=task, initial={"counter": 0, "loot": [], "tag": task}).model_copy(
            update={"checks": [witness, honest]}
        )
        for task in tasks
    ]
    library = write_hostile_library(tmp_path / "library", scenarios)
    config = RunConfig(
        envs=str(library),
        agent_kind="oracle",
        trials=TRIALS,
        concurrency=2 * TRIALS,
        out=tmp_path / "run",
        workers=1,
        ray=ray_cluster.address,
    )
    # The gather window is long: only the arrivals of a task's announced trials end it. Had a trial been sent to
    # the other executor, or not been announced, its task's check process would have scored fewer than all four.
    outcome = await asyncio.wait_for(
        run(config, agent_factory=agent_factory, sandbox_limits=SandboxLimits(check_gather_s=3600)), 600
    )
    assert outcome.ran == len(tasks) * TRIALS
    records = read_results(tmp_path / "run" / "results.jsonl")
    assert sorted((t.scenario_id, t.trial) for t in records) == [(s, n) for s in sorted(tasks) for n in range(TRIALS)]
    for trajectory in records:
        results = {r.check_id: r for r in trajectory.check_results}
        assert results["bumped"].passed is True  # each trial has its own verdict
        seen = ast.literal_eval(str(results["witness"].value))
        assert set(seen) == {trajectory.scenario_id}  # a check process never scores two tasks
    for task in tasks:
        seen = [ast.literal_eval(str(t.check_results[0].value)) for t in records if t.scenario_id == task]
        assert max(len(tags) for tags in seen) == TRIALS, seen  # one process saw all four trials of the task
