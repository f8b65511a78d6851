"""The trainer examples run: examples/verl_rollout.py in the verl venv, examples/train_trl_grpo.py here, and every
override of examples/verl_grpo.sh composes against verl 0.9.1's own trainer config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.library import load_library
from tests.support.cli_process import REPO
from tests.support.verl_venv import VerlVenv

COMPOSE = """
import json, sys
from pathlib import Path
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

overrides = Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()
with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
    config = compose(config_name="ppo_trainer", overrides=overrides)
Path(sys.argv[2]).write_text(json.dumps(OmegaConf.to_container(config, resolve=False)), encoding="utf-8")
"""


@pytest.mark.verl
def test_the_verl_rollout_example_prints_rewards_and_right_masks(verl_environment: VerlVenv) -> None:
    done = verl_environment.run(REPO / "examples" / "verl_rollout.py", "--json", "--scenarios", "2")
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    banking = [s.id for s in load_library(None).scenarios_for("banking")[:2]]
    assert [(r["mode"], r["scenario_id"]) for r in rows] == [("nonconv", i) for i in banking] + [
        ("conv", i) for i in banking
    ]
    for row in rows:
        assert isinstance(row["reward"], float) and 0.0 <= row["reward"] <= 1.0
        assert row["prefix_ok"] and row["logprobs_ok"]
        assert row["policy_tokens"] >= row["generations"] >= 1
        assert row["mask_runs"][0] == 1
    for row in rows:
        if row["mode"] == "conv" and row["ending"] == "user_stop":
            # The offline user asks one follow-up after the first reply, then stops after the second.
            assert row["generations"] == 2 and row["mask_runs"] == [1, 0, 1] and row["other_tokens"] > 0
    assert any(row["mode"] == "conv" and row["ending"] == "user_stop" for row in rows)


@pytest.mark.verl
@pytest.mark.parametrize("mode", ["nonconv", "conv"])
def test_every_override_of_the_grpo_launcher_is_in_verls_trainer_config(
    verl_environment: VerlVenv, tmp_path: Path, mode: str
) -> None:
    printed = subprocess.run(
        ["bash", str(REPO / "examples" / "verl_grpo.sh"), "--print-overrides"],
        capture_output=True,
        text=True,
        env={**os.environ, "MODE": mode, "DATA": str(tmp_path / "data")},
        cwd=REPO,
        check=True,
    )
    (tmp_path / "overrides.txt").write_text(printed.stdout, encoding="utf-8")
    (tmp_path / "compose.py").write_text(COMPOSE, encoding="utf-8")
    done = verl_environment.run(tmp_path / "compose.py", str(tmp_path / "overrides.txt"), str(tmp_path / "out.json"))
    # hydra refuses a key the config does not have, so this passing means every name is verl 0.9.1's.
    assert done.returncode == 0, done.stderr[-4000:]
    config: dict[str, Any] = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert config["algorithm"]["adv_estimator"] == "grpo"
    assert config["data"]["train_files"] == str(tmp_path / "data" / "train.parquet")
    rollout = config["actor_rollout_ref"]["rollout"]
    assert rollout["multi_turn"]["enable"] is True and rollout["mode"] == "async"
    loop_file = REPO / rollout["agent"]["agent_loop_config_path"]
    assert loop_file.name == ("verl_agent_loop_conv.yaml" if mode == "conv" else "verl_agent_loop.yaml")
    text = loop_file.read_text(encoding="utf-8")
    assert "name: harness" in text and "harness.train.verl_agent_loop.HarnessAgentLoop" in text
    assert ("mode: conv" in text) == (mode == "conv")


def test_the_trl_example_takes_one_grpo_step_on_the_tiny_model() -> None:
    pytest.importorskip("trl")
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "train_trl_grpo.py"), "--tiny", "--scenarios", "4"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"},
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    means = [line for line in lines if line.startswith("{")]
    assert means and "'rewards/composite/mean'" in means[0] and "'rewards/check_pass_rate/mean'" in means[0]
    banking = {s.id for s in load_library(None).scenarios_for("banking")}
    outcomes = [line.split() for line in lines if line.split() and line.split()[0] in banking]
    assert len(outcomes) == 4
    assert all(0.0 <= float(reward) <= 1.0 for _, _, reward in outcomes)
