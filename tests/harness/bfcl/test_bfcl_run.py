"""All 800 BFCL multi-turn entries through `harness run` at concurrency 64: the ground truth scores 1.0 on every
entry, doing nothing scores 0 on every entry with calls, and `harness export bfcl` writes BFCL's result files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.run_adapters import user_factory
from harness.library import Library, load_library
from harness.results.metrics import read_results
from harness.rules.protocols import AgentTurn
from harness.run import RunConfig, run
from harness.sandbox import JailSpec
from harness.schema import AgentSettings, ModelSettings, TerminationReason, Trajectory
from tests.support.cli_process import harness_cli


async def refused_modules(library: Library) -> dict[str, list[str]]:
    """Environments whose classes import a module this sandbox does not allow (MathAPI's mpmath, until the
    sandbox's allow-list has it): their episodes must end as load errors naming the module."""
    refused: dict[str, list[str]] = {}
    async with JailSpec(workers=1).pool() as pool:
        for env_id, environment in library.environments.items():
            modules = environment.provenance.details.get("required_modules") or []
            blocked = [m for m in modules if pool.static_problems(f"import {m}\n")]
            if blocked:
                refused[env_id] = blocked
    return refused


def _check_unrunnable(trajectory: Trajectory, modules: list[str]) -> None:
    # BFCL scores an entry whose tools do not load as failed; so do the harness's rules (an environment failure).
    assert trajectory.termination is TerminationReason.ENVIRONMENT_ERROR
    assert trajectory.reward is not None and not trajectory.reward.success
    assert all(module in (trajectory.termination_detail or "") for module in modules)


@pytest.fixture(scope="module")
def oracle_run(bfcl_library: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bfcl-oracle") / "run"
    result = harness_cli(
        "run", "--envs", str(bfcl_library), "--agent", "oracle", "--mode", "conv",
        "--concurrency", "64", "--out", str(out), timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return out


async def test_replaying_the_ground_truth_scores_one_everywhere(oracle_run: Path, bfcl_library: Path) -> None:
    library = load_library(bfcl_library)
    refused = await refused_modules(library)
    results = read_results(oracle_run / "results.jsonl")
    assert len(results) == len(library.scenarios) == 800
    environment_of = {s.id: s.environment_id for s in library.scenarios}
    for trajectory in results:
        environment = environment_of[trajectory.scenario_id]
        if environment in refused:
            _check_unrunnable(trajectory, refused[environment])
            continue
        assert trajectory.termination is TerminationReason.USER_STOP, trajectory.scenario_id
        assert trajectory.reward is not None, trajectory.scenario_id
        assert trajectory.reward.success and trajectory.reward.state_reward == 1.0, (
            trajectory.scenario_id,
            [r for r in trajectory.check_results if not r.passed],
        )
    summary = orjson.loads((oracle_run / "summary.json").read_bytes())
    assert "bfcl-gorillafilesystem" in str(summary)


class DoNothing:
    settings = AgentSettings(kind="do_nothing", model=ModelSettings(model="none"))

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        return AgentTurn(message={"role": "assistant", "content": "I will not do that."})


async def test_doing_nothing_scores_zero_on_every_entry_with_calls(bfcl_library: Path, tmp_path: Path) -> None:
    library = load_library(bfcl_library)
    refused = await refused_modules(library)
    config = RunConfig(
        envs=str(bfcl_library), mode="conv", agent_kind="do_nothing", concurrency=64, out=tmp_path / "run"
    )
    outcome = await run(config, agent_factory=lambda s, c, a: DoNothing(), user_factory=user_factory, library=library)
    results = read_results(outcome.run_dir / "results.jsonl")
    assert len(results) == 800
    scenarios = {s.id: s for s in library.scenarios}
    for trajectory in results:
        scenario = scenarios[trajectory.scenario_id]
        if scenario.environment_id in refused:
            _check_unrunnable(trajectory, refused[scenario.environment_id])
            continue
        assert any(turn.reference_actions for turn in scenario.turns)
        assert trajectory.reward is not None
        assert trajectory.reward.state_reward == 0.0 and not trajectory.reward.success, trajectory.scenario_id


def test_export_writes_bfcl_result_files(oracle_run: Path, bfcl_library: Path, tmp_path: Path) -> None:
    out = tmp_path / "bfcl-results"
    result = harness_cli("export", "bfcl", str(oracle_run), "--out", str(out))
    trajectories = read_results(oracle_run / "results.jsonl")
    infra = sum(t.termination is TerminationReason.INFRA_ERROR for t in trajectories)
    # Episodes that never ran (infrastructure errors) cannot be exported: named, and the exit status says so.
    assert result.returncode == (1 if infra else 0), result.stderr
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "BFCL_v4_multi_turn_base_result.json",
        "BFCL_v4_multi_turn_long_context_result.json",
        "BFCL_v4_multi_turn_miss_func_result.json",
        "BFCL_v4_multi_turn_miss_param_result.json",
    ]
    rows = [orjson.loads(line) for f in files for line in (out / f).read_bytes().splitlines()]
    assert len(rows) == 800 - infra
    first = next(row for row in rows if row["id"] == "multi_turn_base_0")
    library = load_library(bfcl_library)
    scenario = next(s for s in library.scenarios if s.id == "multi_turn_base_0")
    assert len(first["result"]) == len(scenario.turns)
    # Each turn: the model's responses, tool calls as [{name: arguments_json}], then its closing text.
    decoded = [
        f"{name}({','.join(f'{k}={v!r}' for k, v in orjson.loads(arguments).items())})"
        for step in first["result"][0]
        if isinstance(step, list)
        for call in step
        for name, arguments in call.items()
    ]
    assert decoded == [
        "cd(folder='document')",
        "mkdir(dir_name='temp')",
        "mv(source='final_report.pdf',destination='temp')",
    ]
    assert first["result"][0][-1] == "I have completed your request."
    ids = [row["id"] for row in rows if row["id"].startswith("multi_turn_base_")]
    assert ids == sorted(ids, key=lambda i: int(i.rsplit("_", 1)[1]))


def test_a_nonconv_run_of_scripted_scenarios_is_refused(bfcl_library: Path, tmp_path: Path) -> None:
    result = harness_cli("run", "--envs", str(bfcl_library), "--agent", "oracle", "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    assert "800 scenarios have scripted user turns and run only with --mode conv" in " ".join(result.stderr.split())


def test_rescoring_the_oracle_run_reproduces_every_verdict(
    oracle_run: Path, bfcl_library: Path, tmp_path: Path
) -> None:
    """BFCL's scripted turns re-score like any run: the recorded calls replayed, BFCL's turn checker rerun."""
    out = tmp_path / "rescored"
    result = harness_cli("rescore", str(oracle_run), "--envs", str(bfcl_library), "--out", str(out), timeout=1200)
    assert result.returncode == 0, result.stderr[-2000:]
    before = {t.episode_id: t for t in read_results(oracle_run / "results.jsonl")}
    after = {t.episode_id: t for t in read_results(out / "results.jsonl")}
    assert after.keys() == before.keys()
    for episode_id, trajectory in after.items():
        assert trajectory.check_results == before[episode_id].check_results, trajectory.scenario_id
        assert trajectory.reward == before[episode_id].reward, trajectory.scenario_id
