"""Scenario synthesis and chains-to-scenarios end to end, with scripted models behind litellm.

The scripted scenario writer answers from the seed library (its states, tasks and checks); the scripted
teacher replays the seed reference actions; the scripted query model picks arguments from the state and earlier
results and writes and refines requests by rule. The synthesized scenarios must pass ``harness validate`` and be
solved by the oracle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from agents.oracle import OracleAgent
from harness.cli.synth_scenarios import register
from harness.episode.config import EpisodeConfig
from harness.episode.loop import run_episode
from harness.library import load_library
from harness.llm import LLMClient
from harness.sandbox import JailSpec, SandboxPool
from harness.validate import validate_library
from synth.graph import ToolGraph, build_graph
from synth.queries import QueryConfig, synthesize_queries
from synth.sampling import SamplingParams
from synth.scenarios import ScenarioSynthesisConfig, synthesize_scenarios
from tests.doubles.scripted_scenarios import (
    LIBRARY,
    ScriptedQueryModel,
    ScriptedScenarioWriter,
    ScriptedSolver,
    ScriptedTeacher,
    scripted,
)


@pytest.fixture
async def pool():
    async with JailSpec(workers=2).pool() as sandbox:
        yield sandbox


ENVIRONMENTS = ["retail_orders", "banking"]


async def _oracle_solves(scenarios, pool: SandboxPool, library) -> None:
    for scenario in scenarios:
        environment = library.environments[scenario.environment_id]
        trajectory = await run_episode(
            scenario,
            environment,
            pool=pool,
            agent=OracleAgent(scenario),
            config=EpisodeConfig(mode="nonconv"),
            episode_id=f"oracle-{scenario.id}",
        )
        assert trajectory.reward is not None and trajectory.reward.success, (scenario.id, trajectory.termination_detail)


async def test_scenarios_end_to_end_pass_validation_and_the_oracle_solves_them(
    pool: SandboxPool, tmp_path: Path
) -> None:
    environments = [LIBRARY.environments[e] for e in ENVIRONMENTS]
    writer, teacher = scripted(ScriptedScenarioWriter(ENVIRONMENTS)), scripted(ScriptedTeacher())
    config = ScenarioSynthesisConfig(model=writer, per_env=5, solve_with=teacher, attempts=2, concurrency=1)
    out = tmp_path / "out"
    client = LLMClient(cache_dir=None)
    try:
        report = await synthesize_scenarios(environments, config, out, client=client, pool=pool)
    finally:
        await client.aclose()
    assert report.attempted == 10
    assert 0 < report.accepted < report.attempted  # the one-call tasks of the seed library are refused
    assert report.rejected_by.get("single_call", 0) >= 1
    assert report.gates["state_loads"].passed == 10
    assert report.gates["teacher"].passed == report.accepted
    assert report.usd_per_accepted is not None and report.usd_per_accepted > 0

    built = load_library(out)
    assert len(built.scenarios) == report.accepted
    for scenario in built.scenarios:
        assert scenario.reference_actions and scenario.user_profile is not None
        assert scenario.provenance.prompt_version and "scen_task@2+" in scenario.provenance.prompt_version
    validation = await validate_library(built, pool)
    assert validation.ok, [r.problems for r in validation.invalid]
    await _oracle_solves(built.scenarios, pool, built)
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    assert len(rejected) == report.attempted - report.accepted
    assert all(r["rejected_by"] and r["reason"] for r in rejected)

    # A second run over the same folder resumes: nothing is asked again.
    client = LLMClient(cache_dir=None)
    try:
        again = await synthesize_scenarios(environments, config, out, client=client, pool=pool)
    finally:
        await client.aclose()
    assert again.accepted == report.accepted
    assert sum(u.requests for u in client.usage_by_role().values()) == 0


@pytest.fixture(scope="module")
def retail_graph() -> ToolGraph:
    import asyncio

    environments = [LIBRARY.environments["retail_orders"]]
    samples = {"retail_orders": LIBRARY.scenarios_for("retail_orders")[0].initial_state}
    return asyncio.run(build_graph(environments, sample_states=samples))


async def test_queries_end_to_end_pass_validation_and_the_oracle_solves_them(
    pool: SandboxPool, tmp_path: Path, retail_graph: ToolGraph
) -> None:
    model = scripted(ScriptedQueryModel(["retail_orders"]))
    config = QueryConfig(
        model=model, chains=8, seed=3, concurrency=2, sampling=SamplingParams(max_tools=5, max_environments=1)
    )
    out = tmp_path / "queries"
    client = LLMClient(cache_dir=None)
    try:
        report = await synthesize_queries(
            [LIBRARY.environments["retail_orders"]], retail_graph, config, out, client=client, pool=pool
        )
    finally:
        await client.aclose()
    assert report.attempted == 8 and report.accepted >= 2, report.rejected_by
    built = load_library(out)
    validation = await validate_library(built, pool)
    assert validation.ok, [r.problems for r in validation.invalid]
    await _oracle_solves(built.scenarios, pool, built)
    for scenario in built.scenarios:
        assert scenario.gold_final_state is not None and scenario.reference_actions
        turns = scenario.provenance.details["turns"]
        assert scenario.task == "\n".join(t["request"] for t in turns)
        rules = [step["rule"] for t in turns for step in t["refinements"]]
        assert rules == ["implicit_reference", "action_compression", "ambiguity_injection", "goal_expansion"] * len(
            turns
        )
        assert any(step["applied"] for t in turns for step in t["refinements"])
        for name in LIBRARY.environments["retail_orders"].tool_names:
            assert name not in scenario.task or "_" not in name


async def _queries_with_solver(
    pool: SandboxPool, graph: ToolGraph, out: Path, gives_up: bool
) -> tuple[Any, ScriptedQueryModel]:
    writer = ScriptedQueryModel(["retail_orders"])
    solving = ScriptedSolver(writer, gives_up=gives_up)
    solver = scripted(solving)
    config = QueryConfig(
        model=scripted(writer),
        chains=6,
        seed=3,
        concurrency=1,
        solve_with=solver,
        rollouts=2,
        sampling=SamplingParams(max_tools=5, max_environments=1),
    )
    client = LLMClient(cache_dir=None)
    try:
        report = await synthesize_queries(
            [LIBRARY.environments["retail_orders"]], graph, config, out, client=client, pool=pool
        )
    finally:
        await client.aclose()
    assert solving.seeds == {0, 1}  # each rollout samples with its own seed
    return report, writer


async def test_queries_are_kept_only_when_a_solver_rollout_reaches_the_gold_state(
    pool: SandboxPool, tmp_path: Path, retail_graph: ToolGraph
) -> None:
    report, _ = await _queries_with_solver(pool, retail_graph, tmp_path / "solved", gives_up=False)
    assert report.accepted >= 2 and report.gates["rollouts"].passed == report.accepted
    built = load_library(tmp_path / "solved")
    for scenario in built.scenarios:
        rollouts = scenario.provenance.details["rollouts"]
        assert rollouts["solve_rate"] == 1.0 and rollouts["rollouts"] == 2
        assert scenario.difficulty == "easy" and "solve_rate:1.00" in scenario.tags
        gates = {g["gate"]: g["passed"] for g in scenario.provenance.details["gates"]}
        assert gates["mentions"] and gates["rollouts"] and gates["reference"]
        dropped = scenario.provenance.details.get("dropped_calls", [])
        chain_calls = len(scenario.provenance.details["chain"]["steps"])
        assert len(scenario.reference_actions) + len(dropped) == chain_calls
    validation = await validate_library(built, pool)
    assert validation.ok, [r.problems for r in validation.invalid]


async def test_a_query_whose_rollouts_all_fail_is_rejected(
    pool: SandboxPool, tmp_path: Path, retail_graph: ToolGraph
) -> None:
    report, _ = await _queries_with_solver(pool, retail_graph, tmp_path / "unsolved", gives_up=True)
    assert report.accepted == 0 and report.rejected_by.get("rollouts", 0) >= 2
    rejected = [json.loads(line) for line in (tmp_path / "unsolved" / "rejected.jsonl").read_text().splitlines()]
    by_rollouts = [r for r in rejected if r["rejected_by"] == "rollouts"]
    assert all(r["reason"].startswith("none of 2 rollouts") for r in by_rollouts)


def test_cli_commands_are_registered_and_build_a_graph(tmp_path: Path) -> None:
    app = typer.Typer()
    synth_app = typer.Typer()
    register(synth_app)
    app.add_typer(synth_app, name="synth")
    runner = CliRunner()
    result = runner.invoke(app, ["synth", "--help"])
    assert result.exit_code == 0
    for command in ("scenarios", "graph", "queries"):
        assert command in result.output
    out = tmp_path / "graph.json"
    picture = tmp_path / "graph.png"
    result = runner.invoke(
        app,
        [
            "synth",
            "graph",
            "--out",
            str(out),
            "--env",
            "retail_orders",
            "--picture",
            str(picture),
            "--threshold",
            "0.85",
        ],
    )
    assert result.exit_code == 0, result.output
    graph = ToolGraph.load(out)
    assert graph.has_edge("retail_orders.find_user_by_email", "retail_orders.list_user_orders")
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_cli_runs_scenarios_and_queries_with_scripted_models(tmp_path: Path) -> None:
    app = typer.Typer()
    synth_app = typer.Typer()
    register(synth_app)
    app.add_typer(synth_app, name="synth")
    runner = CliRunner()
    writer, teacher = scripted(ScriptedScenarioWriter(["retail_orders"])), scripted(ScriptedTeacher())
    out = tmp_path / "scen"
    arguments = ["synth", "scenarios", "--env", "retail_orders", "--per-env", "3", "--model", writer]
    arguments += ["--out", str(out), "--solve-with", teacher, "--attempts", "1", "--concurrency", "1", "--workers", "1"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert "acceptance" in result.output and "per accepted scenario" in result.output
    report = json.loads((out / "report.json").read_text())
    assert report["attempted"] == 3 and report["accepted"] == len(load_library(out).scenarios) >= 1, result.output

    graph = tmp_path / "graph.json"
    result = runner.invoke(app, ["synth", "graph", "--env", "retail_orders", "--out", str(graph)])
    assert result.exit_code == 0, result.output
    queries = tmp_path / "queries"
    model = scripted(ScriptedQueryModel(["retail_orders"]))
    arguments = ["synth", "queries", "--env", "retail_orders", "--graph", str(graph), "--model", model]
    arguments += ["--out", str(queries), "--chains", "4", "--seed", "3", "--workers", "1"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    report = json.loads((queries / "report.json").read_text())
    assert report["attempted"] == 4
    assert (queries / "rejected.jsonl").exists()


def test_cost_limit_stops_new_scenario_attempts_and_a_rerun_with_a_higher_limit_finishes(tmp_path: Path) -> None:
    app = typer.Typer()
    synth_app = typer.Typer()
    register(synth_app)
    app.add_typer(synth_app, name="synth")
    runner = CliRunner()
    writer = scripted(ScriptedScenarioWriter(["retail_orders"]))
    models = tmp_path / "models.toml"
    models.write_text(
        f'[aliases.priced-writer]\nmodel = "{writer}"\ninput_usd_per_million = 100.0\noutput_usd_per_million = 100.0\n'
    )
    env = {"HARNESS_MODELS_FILE": str(models)}

    plain = ["synth", "scenarios", "--env", "retail_orders", "--model", writer, "--out", str(tmp_path / "plain")]
    unpriced = runner.invoke(app, [*plain, "--workers", "1", "--cost-limit", "1"])
    assert unpriced.exit_code == 2 and "has none" in unpriced.output
    assert not (tmp_path / "plain" / "attempts.jsonl").exists()

    out = tmp_path / "scen"
    arguments = ["synth", "scenarios", "--env", "retail_orders", "--per-env", "6", "--model", "priced-writer"]
    arguments += ["--out", str(out), "--probes", "0", "--concurrency", "1", "--workers", "1"]
    stopped = runner.invoke(app, [*arguments, "--cost-limit", "0.05"], env=env)
    assert stopped.exit_code == 3, stopped.output
    assert "stopped by --cost-limit" in stopped.output
    journal = (out / "attempts.jsonl").read_text().splitlines()
    assert 1 <= len(journal) < 6
    spent = sum(json.loads(line)["usage"]["cost_usd"] for line in journal)
    assert spent >= 0.05 > spent - json.loads(journal[-1])["usage"]["cost_usd"]

    finished = runner.invoke(app, [*arguments, "--cost-limit", "100"], env=env)
    assert finished.exit_code == 0, finished.output
    assert json.loads((out / "report.json").read_text())["attempted"] == 6
