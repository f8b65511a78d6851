"""``harness leaderboard build`` (the real command line) and two runs that hold the same episode id: the same episode
re-run (same model and settings) lets the later run's count; under a different model or setting they are refused
with one line naming both run folders and the setting, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.schema import DatasetRef
from tests.support.cli_process import harness
from tests.support.leaderboard_runs import REV1, make_trajectory, write_run

COLLISIONS = {
    "model": ({"model": "model-b"}, {}, "model: 'model-a'", "'model-b'"),
    "agent.model.temperature": ({"temperature": 0.7}, {}, "agent.model.temperature: 0.0", "0.7"),
    "scenario": ({"scenario_id": "s9"}, {}, "scenario: 's1'", "'s9'"),
    "max_steps": ({}, {"max_steps": 5}, "max_steps: None", "5"),
    "rules": ({}, {"rules": "envscaler"}, "rules: None", "'envscaler'"),
}


@pytest.mark.parametrize("setting", list(COLLISIONS))
def test_colliding_episode_ids_under_other_settings_are_refused_naming_both_runs(tmp_path: Path, setting: str):
    trajectory_change, config, before, after = COLLISIONS[setting]
    first = write_run(tmp_path / "first-run", [make_trajectory("e1"), make_trajectory("e2", scenario_id="s2")])
    second = write_run(
        tmp_path / "second-run",
        [make_trajectory("e1", **trajectory_change)],
        config=config,
    )
    out = tmp_path / "board"
    finished = harness(["leaderboard", "build", str(first), str(second), "--out", str(out)])
    assert finished.code == 2, finished.stdout + finished.stderr
    assert len(finished.stderr_lines) == 1, finished.stderr
    line = finished.stderr_lines[0]
    assert "episode 'e1'" in line and str(first) in line and str(second) in line
    assert f"({setting}:" in line and before in line and after in line
    assert not out.exists()


def test_the_same_episode_re_run_lets_the_later_run_count(tmp_path: Path):
    first = write_run(tmp_path / "first", [make_trajectory("e1", state_reward=0.0, success=False)], dataset=REV1)
    second = write_run(tmp_path / "second", [make_trajectory("e1", state_reward=1.0)], dataset=REV1)
    out = tmp_path / "board"
    finished = harness(["leaderboard", "build", str(first), str(second), "--out", str(out)])
    assert finished.code == 0, finished.stderr
    [row] = [json.loads(line) for line in (out / "leaderboard.jsonl").read_text().splitlines()]
    assert row["runs"] == ["second"] and row["mean_state_reward"] == 1.0


def test_checks_versions_are_compared_within_one_environment_set_only(tmp_path: Path):
    """A run and its re-scoring on an edited environment set share their episode ids by design; on one set, two
    check versions under one id are a contradiction."""
    one = DatasetRef(source="set", fingerprint="1" * 16)
    other = DatasetRef(source="set", fingerprint="2" * 16)
    run = write_run(tmp_path / "run", [make_trajectory("e1")], dataset=one)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["checks_version"] = "a" * 16
    (run / "manifest.json").write_text(json.dumps(manifest))
    rescored = write_run(tmp_path / "rescored", [make_trajectory("e1", state_reward=0.0)], dataset=other)
    manifest["checks_version"] = "b" * 16
    manifest["dataset"] = other.model_dump()
    (rescored / "manifest.json").write_text(json.dumps(manifest))
    split = harness(
        ["leaderboard", "build", str(run), str(rescored), "--split-by-dataset", "--out", str(tmp_path / "a")]
    )
    assert split.code == 0, split.stderr

    manifest["dataset"] = one.model_dump()
    (rescored / "manifest.json").write_text(json.dumps(manifest))
    same = harness(["leaderboard", "build", str(run), str(rescored), "--out", str(tmp_path / "b")])
    assert same.code == 2 and "(checks: 'aaaaaaaa" in same.stderr, same.stderr
