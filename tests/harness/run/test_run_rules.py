"""`harness run` and `harness import envscaler` with episode rules and scenario screening, through the real CLI
in a subprocess: an imported EnvScaler library runs under its suggested `envscaler` rules, `--rules` overrides
it, invalid scenarios are left out and named unless `--include-invalid`, and both choices are in the manifest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson

from harness.benchmarks.envscaler.importer import import_envscaler
from tests.harness.importers.test_parity_envscaler import CHECKS, ENV_RECORD, INIT_CONFIG


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, timeout=600, check=False
    )


def scenario_record(task_id: str, checks: list[dict[str, str]]) -> dict[str, object]:
    return {
        "env_id": "env_900_rl",
        "env_class_name": "LibraryDesk",
        "task_id": task_id,
        "init_config": json.dumps(INIT_CONFIG),
        "task": "Lend one copy of book B1 to member M1.",
        "checklist_with_func": json.dumps(checks),
    }


def imported_library(tmp_path: Path) -> Path:
    environments = tmp_path / "envs.json"
    environments.write_text(json.dumps([ENV_RECORD]))
    scenarios = tmp_path / "rl.json"
    # task_1 is sound; task_2's checks all hold at reset (doing nothing would succeed); task_1 again is a repeat.
    records = [scenario_record("env_900_rl-task_1", CHECKS), scenario_record("env_900_rl-task_2", CHECKS[2:])]
    scenarios.write_text(json.dumps(records))
    out = tmp_path / "lib"
    result = harness("import", "envscaler", "--environments", str(environments), "--scenarios", str(scenarios),
                     "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def results(run_dir: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in (run_dir / "results.jsonl").read_bytes().splitlines()]


def manifest(run_dir: Path) -> dict[str, object]:
    config: dict[str, object] = orjson.loads((run_dir / "manifest.json").read_bytes())["config"]
    return config


def test_imported_ids_read_naturally_and_stay_unique(tmp_path: Path) -> None:
    environments = tmp_path / "envs.json"
    environments.write_text(json.dumps([ENV_RECORD]))
    scenarios = tmp_path / "rl.json"
    records = [scenario_record("env_900_rl-task_1", CHECKS), scenario_record("env_900_rl-task_1", CHECKS)]
    records.append(scenario_record("7", CHECKS))
    scenarios.write_text(json.dumps(records))
    report = import_envscaler(environments, [scenarios])
    assert [s.id for s in report.scenarios] == ["env_900_rl-task_1", "env_900_rl-task_1-2", "env_900_rl-7"]
    assert report.environments[0].provenance.details["suggested_rules"] == "envscaler"


def test_imported_library_runs_under_envscaler_rules_and_leaves_out_invalid_scenarios(tmp_path: Path) -> None:
    library = imported_library(tmp_path)
    run_dir = tmp_path / "run"
    result = harness("run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert "env_900_rl-task_2" in result.stderr and "invalid" in result.stderr
    assert "Traceback" not in result.stderr
    config = manifest(run_dir)
    assert config["rules"] == "envscaler" and config["include_invalid"] is False
    assert list(config["invalid_scenarios"]) == ["env_900_rl-task_2"]
    (only,) = results(run_dir)
    assert only["scenario_id"] == "env_900_rl-task_1"
    # The oracle has no reference actions here and just replies: upstream's do-nothing reward, 2 of 4 checks.
    assert only["reward"]["state_reward"] == 0.5
    assert only["messages"][0]["content"].startswith("You are an assistant that carries out a task")


def test_rules_flag_overrides_the_suggestion_and_include_invalid_runs_everything(tmp_path: Path) -> None:
    library = imported_library(tmp_path)
    run_dir = tmp_path / "run"
    args = ["run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir)]
    result = harness(*args, "--rules", "harness", "--include-invalid")
    assert result.returncode == 0, result.stderr
    config = manifest(run_dir)
    assert config["rules"] == "harness" and config["include_invalid"] is True
    assert sorted(r["scenario_id"] for r in results(run_dir)) == ["env_900_rl-task_1", "env_900_rl-task_2"]
    # Resuming the folder under the other rules would mix two experiments: refused, naming the setting.
    refused = harness(*args, "--rules", "envscaler", "--include-invalid", "--resume")
    assert refused.returncode == 2 and "rules" in refused.stderr


def test_a_run_of_only_invalid_scenarios_is_refused_naming_them(tmp_path: Path) -> None:
    library = imported_library(tmp_path)
    run_dir = tmp_path / "run"
    result = harness("run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir),
                     "--scenario", "env_900_rl-task_2")  # fmt: skip
    assert result.returncode == 2
    assert "every selected scenario is invalid (env_900_rl-task_2)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (run_dir / "results.jsonl").exists()


def test_unknown_rules_are_a_one_line_error() -> None:
    result = harness("run", "--rules", "tau", "--limit", "1")
    assert result.returncode == 2
    assert "--rules 'tau': use one of harness, envscaler" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_refuses_an_invalid_scenario_naming_it(tmp_path: Path) -> None:
    library = imported_library(tmp_path)
    result = harness("serve", "env_900_rl", "--envs", str(library), "--scenario", "env_900_rl-task_2", "--workers", "1")
    assert result.returncode == 2
    assert "scenario 'env_900_rl-task_2' is invalid" in result.stderr and "--include-invalid" in result.stderr
    assert "Traceback" not in result.stderr


def test_sft_rolls_out_under_the_rules_and_keeps_what_they_reward(tmp_path: Path) -> None:
    library = imported_library(tmp_path)
    out = tmp_path / "sft"
    args = ["sft", "--teacher", "local", "--agent", "oracle", "--envs", str(library), "--out", str(out)]
    result = harness(*args, "--mode", "nonconv", "--attempts", "1", "--min-reward", "0.5", "--rules", "harness")
    assert result.returncode == 0, result.stderr
    config = manifest(out / "rollouts")
    assert config["rules"] == "harness" and config["invalid_scenarios"] == {
        "env_900_rl-task_2": "every check already holds at reset and on an empty transcript: doing nothing would succeed"
    }
    rows = [orjson.loads(line) for line in (out / "messages.jsonl").read_bytes().splitlines()]
    assert [row["scenario_id"] for row in rows] == ["env_900_rl-task_1"]
    assert rows[0]["messages"][0]["content"].startswith("A library lending desk.")  # the harness prompt

    envscaler = tmp_path / "sft-envscaler"
    args = ["sft", "--teacher", "local", "--agent", "oracle", "--envs", str(library), "--out", str(envscaler)]
    result = harness(*args, "--mode", "nonconv", "--attempts", "1", "--min-reward", "0.5")
    assert result.returncode == 0, result.stderr
    assert manifest(envscaler / "rollouts")["rules"] == "envscaler"  # the imported library's suggestion
    rows = [orjson.loads(line) for line in (envscaler / "messages.jsonl").read_bytes().splitlines()]
    assert rows[0]["messages"][0]["content"].startswith("You are an assistant that carries out a task")


def test_the_rules_profile_is_part_of_the_episode_id_and_the_default_keeps_old_ids() -> None:
    from harness.library import load_library
    from harness.run import RunConfig, agent_settings, episode_id

    scenario = load_library().scenarios[0]
    ids = {}
    for rules in ("harness", "envscaler"):
        config = RunConfig(model="local", rules=rules)
        ids[rules] = episode_id(scenario, "nonconv", agent_settings(config), None, 0, config)
    unset = RunConfig(model="local")
    assert ids["harness"] == episode_id(scenario, "nonconv", agent_settings(unset), None, 0, unset)
    assert ids["envscaler"] != ids["harness"]
