"""Environment synthesis end to end, with a scripted model behind litellm playing every role."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agents.oracle import OracleAgent
from harness.cli.synth import register
from harness.episode.config import EpisodeConfig
from harness.episode.loop import run_episode
from harness.library import load_library
from harness.llm import register_python_model
from harness.sandbox import JailSpec, SandboxPool
from harness.schema import Check, ReferenceAction, Scenario, TerminationReason
from harness.validate import validate_environment
from synth.pipeline import SynthEnvsConfig, synthesize_environments
from tests.doubles.scripted_synth import Fault, ScriptedSynthModel

_names = itertools.count()

TASKS = [
    "Please cancel my parking permit P-1, I moved to another city.",
    "Cancel the parking permit P-2 for me, I sold the car.",
    "What is 17 times 23?",
]


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with JailSpec(workers=2).pool() as sandbox_pool:
        yield sandbox_pool


def scripted(**options: object) -> tuple[ScriptedSynthModel, str]:
    model = ScriptedSynthModel(**options)  # type: ignore[arg-type]
    name = f"synth-{next(_names)}"
    register_python_model(name, model)
    return model, f"python/{name}"


def tasks_file(folder: Path, tasks: list[str] = TASKS) -> Path:
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({"task": t}) + "\n" for t in tasks))
    return path


def config(folder: Path, model: str, **overrides: object) -> SynthEnvsConfig:
    values: dict[str, object] = {"source": str(tasks_file(folder)), "model": model, "out": folder / "out", "rounds": 18}
    values.update(overrides)
    return SynthEnvsConfig.model_validate(values)


def cancel_scenario(environment_id: str, initial_state: dict) -> Scenario:
    return Scenario(
        id=f"{environment_id}-001",
        environment_id=environment_id,
        initial_state=initial_state,
        task="I moved away: please cancel my parking permit P-1.",
        checks=[
            Check(
                id="p1-cancelled",
                description="Permit P-1 is cancelled",
                source="def check(initial_state, final_state):\n"
                "    return final_state['permits']['P-1']['status'] == 'cancelled'\n",
            ),
            Check(
                id="p2-untouched",
                description="Permit P-2 is still active",
                source="def check(initial_state, final_state):\n"
                "    return final_state['permits']['P-2']['status'] == 'active'\n",
            ),
        ],
        reference_actions=[
            ReferenceAction(name="get_permit", arguments={"permit_id": "P-1"}),
            ReferenceAction(name="cancel_permit", arguments={"permit_id": "P-1", "reason": "moved"}),
        ],
    )


async def test_end_to_end_an_accepted_environment_validates_and_runs_an_episode(
    tmp_path: Path, pool: SandboxPool
) -> None:
    model, model_name = scripted()
    result = await synthesize_environments(config(tmp_path, model_name), pool=pool)

    # Discovery: the stateless task is dropped with its reason; the two permit tasks make one theme.
    assert [o.keep for o in result.discovery] == [True, True, False]
    assert "stateless" in result.discovery[2].reason
    assert len(result.themes) == 1 and result.themes[0].tasks == TASKS[:2]
    assert result.rejected == []
    [environment] = result.accepted
    assert environment.class_name == "ParkingPermits"
    assert sorted(environment.tool_names) == ["cancel_permit", "get_permit", "issue_permit", "list_permits_by_holder"]
    cancel_tool = environment.tool("cancel_permit")
    assert cancel_tool is not None and cancel_tool.function.parameters["required"] == ["permit_id"]

    details = environment.provenance.details
    assert environment.provenance.source == "synth.envs"
    assert environment.provenance.model == model_name
    assert set(details["prompt_versions"]) >= {"filter_task", "plan_environment", "write_method", "check_call"}
    assert all(re.match(r"^\d+\+[0-9a-f]{8}$", v) for v in details["prompt_versions"].values())
    assert details["prompt_versions"]["test_call"].startswith("2+")
    [report] = details["assessment"]["reports"]
    assert report["passed"] and len(report["rounds"]) == 18 and report["score"] >= 0.85
    assert {r["tool"] for r in report["rounds"]} == set(environment.tool_names)
    assert details["costs"]["assessment"]["requests"] == 36
    assert model.calls["tester"] == 18 and model.calls["checker"] == 18

    # What landed on disk is a library that validates and runs an episode to success.
    out = tmp_path / "out"
    library = load_library(out)
    loaded = library.environments[environment.id]
    assert loaded.code == environment.code
    validation = await validate_environment(pool, loaded, details["sample_initial_state"])
    assert validation.ok, validation.problems
    costs = json.loads((out / "costs.json").read_text())
    assert costs["accepted"] == 1 and costs["price_model"] == "gpt-4.1"
    assert costs["usd_per_accepted"] > 0 and costs["total"]["requests"] == model.total_calls
    assert (out / "rejected.jsonl").read_text() == ""

    scenario = cancel_scenario(environment.id, details["sample_initial_state"])
    trajectory = await run_episode(
        scenario,
        loaded,
        pool=pool,
        agent=OracleAgent(scenario),
        config=EpisodeConfig(mode="nonconv"),
        episode_id="synth-e2e",
    )
    assert trajectory.termination is TerminationReason.AGENT_DONE
    assert trajectory.reward is not None and trajectory.reward.success
    assert [s.call.name for s in trajectory.steps] == ["get_permit", "cancel_permit"]


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("syntax", "syntax error"),
        ("forbidden_import", "import of 'os' is not allowed"),
        ("signature", "signature mismatch"),
    ],
)
async def test_a_method_that_keeps_failing_its_checks_rejects_the_environment_at_modeling(
    tmp_path: Path, pool: SandboxPool, fault: Fault, expected: str
) -> None:
    model, model_name = scripted(method_faults={"cancel_permit": fault})
    result = await synthesize_environments(config(tmp_path, model_name, method_attempts=2), pool=pool)
    assert result.accepted == []
    [rejection] = result.rejected
    assert rejection.stage == "modeling"
    assert rejection.reason.startswith("method cancel_permit failed its checks 2 times")
    assert expected in rejection.reason
    assert model.calls["method"] == 3 + 2  # three good methods, two refused tries of the faulty one
    assert model.calls["tester"] == 0  # nothing unchecked reaches the sandbox
    [line] = (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()
    assert json.loads(line)["stage"] == "modeling"
    assert list((tmp_path / "out" / "environments").glob("*.py")) == []


@pytest.mark.parametrize(
    ("role", "stage", "expected"),
    [
        ("plan", "planning", "no valid synth.planning answer after 3 tries: the answer is not JSON"),
        ("initial_state", "modeling", "initial state does not conform to the plan after 2 tries"),
    ],
)
async def test_unusable_plans_and_states_reject_the_environment(
    tmp_path: Path, pool: SandboxPool, role: str, stage: str, expected: str
) -> None:
    model, model_name = scripted(broken_roles=frozenset({role}))
    result = await synthesize_environments(config(tmp_path, model_name, method_attempts=2), pool=pool)
    [rejection] = result.rejected
    assert (rejection.stage, result.accepted) == (stage, [])
    assert expected in rejection.reason
    assert model.calls[role] in (2, 3)
    assert model.calls["tester"] == 0


async def test_unusable_filter_answers_keep_no_task(tmp_path: Path, pool: SandboxPool) -> None:
    model, model_name = scripted(broken_roles=frozenset({"filter"}))
    result = await synthesize_environments(config(tmp_path, model_name, answer_retries=1), pool=pool)
    assert [o.keep for o in result.discovery] == [False, False, False]
    assert all(o.reason == "filter answer unusable" and o.error for o in result.discovery)
    assert result.themes == [] and result.accepted == [] and result.rejected == []
    assert model.calls["filter"] == 6 and model.calls["plan"] == 0


async def test_an_outage_rejects_as_infrastructure_and_is_retried_by_the_next_run(
    tmp_path: Path, pool: SandboxPool
) -> None:
    model, model_name = scripted(raising_roles=frozenset({"plan"}))
    first = await synthesize_environments(config(tmp_path, model_name, rounds=9), pool=pool)
    [rejection] = first.rejected
    assert rejection.stage == "infrastructure" and "endpoint is down" in rejection.reason
    assert not (tmp_path / "out" / "stages" / "planning").exists()  # an outage is no verdict: nothing persisted
    model.raising_roles = frozenset()
    second = await synthesize_environments(config(tmp_path, model_name, rounds=9), pool=pool)
    assert len(second.accepted) == 1 and second.rejected == []
    assert model.calls["filter"] == 3  # discovery was finished by the first run


async def test_a_class_that_does_not_load_in_the_sandbox_is_rejected(tmp_path: Path, pool: SandboxPool) -> None:
    model, model_name = scripted(method_faults={"cancel_permit": "undefined_name"})
    result = await synthesize_environments(config(tmp_path, model_name), pool=pool)
    [rejection] = result.rejected
    assert rejection.stage == "modeling"
    assert "does not load in the sandbox" in rejection.reason and "NO_REASON" in rejection.reason
    assert model.calls["tester"] == 0


async def test_a_refused_method_is_regenerated_with_its_problems(tmp_path: Path, pool: SandboxPool) -> None:
    model, model_name = scripted(method_faults={"cancel_permit": "forbidden_import"}, fault_attempts=1)
    result = await synthesize_environments(config(tmp_path, model_name, rounds=9), pool=pool)
    [environment] = result.accepted
    assert "import os" not in environment.code
    assert model.calls["method"] == 5


async def test_assessment_below_threshold_rejects_without_repairs(tmp_path: Path, pool: SandboxPool) -> None:
    model, model_name = scripted(method_faults={"cancel_permit": "buggy"})
    result = await synthesize_environments(config(tmp_path, model_name, repairs=0), pool=pool)
    assert result.accepted == []
    [rejection] = result.rejected
    assert rejection.stage == "assessment"
    assert rejection.reason.startswith("assessment below threshold: score")
    [summary] = rejection.details["assessment"]
    assert summary["fail"] > 0 and summary["score"] < 0.85
    assert model.calls["method"] == 4


async def test_repair_exhausted_rejects_after_the_allowed_repairs(tmp_path: Path, pool: SandboxPool) -> None:
    model, model_name = scripted(method_faults={"cancel_permit": "buggy"}, repairable=False)
    result = await synthesize_environments(config(tmp_path, model_name, repairs=2), pool=pool)
    [rejection] = result.rejected
    assert rejection.stage == "assessment"
    assert rejection.reason.startswith("repair exhausted")
    assert "after 2 repair round(s)" in rejection.reason
    assert [s["attempt"] for s in rejection.details["assessment"]] == [0, 1, 2]
    assert model.calls["method"] == 4 + 2  # one rewrite of the failing method per repair round
    # The unrepaired code behaves the same each time, so its re-assessments replay from the answer cache.
    assert model.calls["tester"] == 18
    assessment = next(s for s in result.costs.stages if s.stage == "assessment")
    assert (assessment.requests, assessment.cached_requests) == (3 * 36, 2 * 36)


async def test_a_repaired_method_passes_and_the_repair_is_recorded(tmp_path: Path, pool: SandboxPool) -> None:
    model, model_name = scripted(method_faults={"cancel_permit": "buggy"})
    result = await synthesize_environments(config(tmp_path, model_name, repairs=3), pool=pool)
    assert model.calls["method"] == 4 + 1
    [environment] = result.accepted
    assessment = environment.provenance.details["assessment"]
    assert assessment["repairs_used"] == 1
    first, second = assessment["reports"]
    assert not first["passed"] and second["passed"]
    assert any(r["observation_kind"] == "tool_exception" and r["verdict"] == "fail" for r in first["rounds"])
    assert 'if permit["status"] == "cancelled"' in environment.code
    assert environment.provenance.details["costs"]["repair"]["requests"] == 1
    assert result.costs.stages[-1].stage == "repair" and result.costs.stages[-1].requests == 1


async def test_a_rerun_over_finished_stages_makes_no_model_calls(tmp_path: Path, pool: SandboxPool) -> None:
    model, model_name = scripted()
    first = await synthesize_environments(config(tmp_path, model_name), pool=pool)
    calls_after_first = model.total_calls
    assert calls_after_first == first.fresh_usage.requests > 0

    second = await synthesize_environments(config(tmp_path, model_name), pool=pool)
    assert model.total_calls == calls_after_first
    assert second.fresh_usage.requests == 0
    assert [e.model_dump() for e in second.accepted] == [e.model_dump() for e in first.accepted]
    assert second.costs.total.requests == first.costs.total.requests  # the report still counts what was spent

    # A run killed during assessment: planning and modeling are on disk, so only assessment roles are asked.
    for path in (tmp_path / "out" / "stages" / "assessment").glob("*.json"):
        path.unlink()
    before = dict(model.calls)
    third = await synthesize_environments(config(tmp_path, model_name, cache_answers=False), pool=pool)
    assert [e.id for e in third.accepted] == [e.id for e in first.accepted]
    spent = {role: model.calls[role] - before.get(role, 0) for role in model.calls}
    assert {role for role, n in spent.items() if n} == {"tester", "checker"}


async def test_max_envs_limits_the_environments_built(tmp_path: Path, pool: SandboxPool) -> None:
    model, model_name = scripted()
    tasks = [f"Issue a parking permit in district {n} for plate AB-{n}." for n in (3, 71)]
    settings = config(tmp_path, model_name, rounds=9, similarity=0.999, max_envs=1)
    settings.source = str(tasks_file(tmp_path, tasks))
    result = await synthesize_environments(settings, pool=pool)
    assert len(result.themes) == 1 and len(result.accepted) == 1
    assert model.calls["plan"] == 1


def test_cli_runs_the_pipeline_and_prints_the_cost_table(tmp_path: Path) -> None:
    _, model_name = scripted()
    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:
        """Root, so that ``synth`` is a subcommand."""

    args = ["synth", "envs", "--from", str(tasks_file(tmp_path)), "--model", model_name, "--out", str(tmp_path / "out")]
    args += ["--rounds", "9", "--concurrency", "4", "--workers", "1", "--max-envs", "3"]
    outcome = CliRunner().invoke(app, args)
    assert outcome.exit_code == 0, outcome.output
    assert "1 accepted" in outcome.output
    assert "USD per accepted environment" in outcome.output and "skeleton paper: 1.02" in outcome.output
    assert len(list((tmp_path / "out" / "environments").glob("*.py"))) == 1

    unpriced = CliRunner().invoke(app, [*args, "--price-model", "no-such-model"])
    assert unpriced.exit_code == 2 and "no price for 'no-such-model'" in unpriced.output


async def test_a_tester_that_only_calls_read_tools_cannot_pass_a_broken_write_tool(
    tmp_path: Path, pool: SandboxPool
) -> None:
    # cancel_permit raises on unknown ids and re-cancels; a tester that never calls it would score 1.0.
    model, model_name = scripted(method_faults={"cancel_permit": "buggy"}, narrow_tester=True)
    result = await synthesize_environments(config(tmp_path, model_name, rounds=9, repairs=1), pool=pool)
    assert result.accepted == []
    [rejection] = result.rejected
    assert rejection.stage == "assessment"
    assert rejection.reason.startswith("assessment incomplete: tools never exercised: ")
    assert "cancel_permit" in rejection.reason and "issue_permit" in rejection.reason
    [summary] = rejection.details["assessment"]
    assert summary["score"] == 1.0 and summary["fail"] == 0
    assert summary["tools_exercised"] == 2 and summary["tools"] == 4
    assert sorted(summary["unexercised"]) == ["cancel_permit", "issue_permit"]
    # In the last rounds the harness allowed only the untested tools; the tester was asked again, then skipped.
    assert model.calls["tester"] > 9


async def test_the_tester_sees_a_per_tool_summary_and_every_tool_is_capped(tmp_path: Path, pool: SandboxPool) -> None:
    model, model_name = scripted()
    result = await synthesize_environments(config(tmp_path, model_name, rounds=40, tests_per_tool=3), pool=pool)
    [environment] = result.accepted
    [report] = environment.provenance.details["assessment"]["reports"]
    coverage = report["coverage"]
    assert sorted(coverage) == sorted(environment.tool_names)
    assert all(1 <= entry["total"] <= 3 for entry in coverage.values())
    assert all(entry["positive"] + entry["negative"] == entry["total"] for entry in coverage.values())
    assert coverage["cancel_permit"]["negative"] >= 1 and coverage["issue_permit"]["positive"] >= 1
    # Capped: the assessment stops when every tool has had its share, well before 40 rounds.
    assert len(report["rounds"]) == 4 * 3 and report["unusable"] == 0 and model.calls["tester"] == 4 * 3
