"""The schema of record: every record survives a JSON round trip unchanged."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from pydantic import ValidationError

from harness.library import load_seed_layout
from harness.schema import (
    SCHEMA_VERSION,
    AgentSettings,
    Check,
    CheckResult,
    DatasetRef,
    DiffEntry,
    Environment,
    FunctionSpec,
    ModelSettings,
    Observation,
    ObservationKind,
    Provenance,
    ReferenceAction,
    RewardBreakdown,
    RunManifest,
    Scenario,
    StateEntity,
    Step,
    TerminationReason,
    Timings,
    ToolCall,
    ToolSpec,
    Trajectory,
    Usage,
    UserProfile,
)

STAMP = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def environment() -> Environment:
    return Environment(
        id="retail",
        name="Retail",
        domain="commerce",
        summary="Orders and returns.",
        introduction="You help customers with orders.",
        rules=["Delivered orders cannot be cancelled."],
        state_entities=[StateEntity(name="Order", attributes=["order_id", "status"], description="An order.")],
        tools=[
            ToolSpec(
                function=FunctionSpec(
                    name="get_order",
                    description="Look up.",
                    parameters={
                        "type": "object",
                        "properties": {"order_id": {"type": "string"}},
                        "required": ["order_id"],
                    },
                )
            )
        ],
        class_name="Retail",
        code="class Retail:\n    pass\n",
        provenance=Provenance(source="synth", model="m", prompt_version="3", created_at=STAMP, details={"rounds": 100}),
    )


def scenario() -> Scenario:
    return Scenario(
        id="retail-001",
        environment_id="retail",
        initial_state={
            "orders": {"O-1": {"status": "pending", "total": 10, "price": 9.5, "tags": [1, 2.0, None, True]}}
        },
        task="Cancel my order.",
        user_profile=UserProfile(
            persona="busy", goal="cancel O-1", known_info=["email a@b.c"], withheld_info=["order id"]
        ),
        checks=[
            Check(id="c1", description="cancelled", source="def check(i, f):\n    return True\n"),
            Check(id="c2", description="nothing else changed", source="def check(i, f):\n    return True\n", gate="c1"),
        ],
        reference_actions=[ReferenceAction(name="cancel", arguments={"order_id": "O-1"}, masked_arguments=["reason"])],
        gold_final_state={"orders": {}},
        difficulty="easy",
        tags=["refusal"],
        provenance=Provenance(created_at=STAMP),
    )


def trajectory() -> Trajectory:
    call = ToolCall(id="call_1", name="cancel", arguments={"order_id": "O-1"})
    return Trajectory(
        episode_id="ep1",
        run_id="run1",
        scenario_id="retail-001",
        environment_id="retail",
        mode="conv",
        trial=2,
        agent=AgentSettings(model=ModelSettings(model="qwen3-8b", temperature=0.0, seed=1)),
        user=AgentSettings(kind="simulated_user", role="user", model=ModelSettings(model="local")),
        tools=environment().tools,
        messages=[
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "cancel", "arguments": '{"order_id": "O-1"}'},
                    }
                ],
            },
        ],
        steps=[
            Step(
                index=0,
                turn=1,
                call=call,
                observation=Observation(tool_call_id="call_1", name="cancel", content={"success": True}),
                state_diff=[
                    DiffEntry(path=["orders", "O-1", "status"], op="change", before="pending", after="cancelled")
                ],
                duration_ms=0.4,
            )
        ],
        final_state_diff=[
            DiffEntry(path=["orders", "O-1", "status"], op="change", before="pending", after="cancelled")
        ],
        check_results=[CheckResult(check_id="c1", passed=False, value="None", error="KeyError", passed_at_reset=False)],
        reward=RewardBreakdown(
            state_reward=0.5, delta_reward=0.25, success=False, checks_passed=1, checks_total=2, composite=0.4
        ),
        termination=TerminationReason.USER_STOP,
        termination_detail="###STOP###",
        usage={"agent": Usage(requests=3, prompt_tokens=100, completion_tokens=20, cost_usd=0.001)},
        timings=Timings(started_at=STAMP, ended_at=STAMP, wall_seconds=1.5),
        errors=["one"],
    )


def manifest() -> RunManifest:
    return RunManifest(
        run_id="run1",
        created_at=STAMP,
        package_version="0.1.0",
        git_revision="abc",
        dataset=DatasetRef(source="datasets/seed", revision="r1", fingerprint="f"),
        config={"model": "local", "trials": 2},
        model_resolution={"local": {"provider_model": "harness_local/gemma"}},
        episodes_planned=4,
    )


@pytest.mark.parametrize("factory", [environment, scenario, trajectory, manifest])
def test_json_round_trip_is_lossless(factory):
    record = factory()
    restored = type(record).model_validate_json(record.model_dump_json())
    assert restored == record
    assert restored.model_dump(mode="json") == record.model_dump(mode="json")
    assert record.schema_version == SCHEMA_VERSION


def test_json_values_keep_their_types():
    restored = Scenario.model_validate_json(scenario().model_dump_json())
    order = restored.initial_state["orders"]["O-1"]
    assert order["total"] == 10 and isinstance(order["total"], int)
    assert order["tags"] == [1, 2.0, None, True] and isinstance(order["tags"][1], float)


def test_unknown_fields_are_refused():
    with pytest.raises(ValidationError):
        Check.model_validate({"id": "c", "description": "d", "source": "s", "sorce": "typo"})


def test_observation_ok_follows_kind():
    assert Observation(tool_call_id="1", name="t").ok
    assert not Observation(tool_call_id="1", name="t", kind=ObservationKind.TOOL_ERROR, error="no").ok


def _scenario_of_schema_1_0() -> dict:
    """A scenario as schema 1.0 wrote it: no `gate` field, the gate stated at the end of the description."""
    return {
        "schema_version": "1.0",
        "id": "old-001",
        "environment_id": "retail",
        "initial_state": {"orders": {}},
        "task": "Cancel O-1.",
        "checks": [
            {"id": "cancelled", "description": "O-1 is cancelled.", "source": "def check(i, f):\n    return True\n"},
            {
                "id": "others_same",
                "description": "No other order changed. Counted only once 'cancelled' holds.",
                "source": "def check(i, f):\n    return True\n",
            },
        ],
    }


def test_a_scenario_of_schema_1_0_loads_with_its_gate_read_from_the_description(tmp_path):
    old = _scenario_of_schema_1_0()
    (tmp_path / "environments").mkdir()
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "retail.jsonl").write_bytes(orjson.dumps(old) + b"\n")
    library = load_seed_layout(tmp_path)
    assert library.problems == []
    [loaded] = library.scenarios
    assert loaded == Scenario.model_validate(old)
    assert loaded.schema_version == SCHEMA_VERSION
    plain, guard = loaded.checks
    assert plain.gate is None and plain.description == "O-1 is cancelled."
    assert guard.gate == "cancelled" and guard.description == "No other order changed."
    assert guard.statement == old["checks"][1]["description"], "the page still states the gate"
    # Written again, the record is of the current schema and says the gate once, in its field.
    again = orjson.loads(loaded.model_dump_json())
    assert again["schema_version"] == SCHEMA_VERSION and again["checks"][1]["gate"] == "cancelled"
    assert "Counted only once" not in again["checks"][1]["description"]
    assert Scenario.model_validate(again) == loaded


@pytest.mark.parametrize(
    ("gate", "description", "problem"),
    [
        ("missing", "Nothing else changed.", "gated on 'missing', which is not another of its checks"),
        ("others_same", "Nothing else changed.", "gated on 'others_same', which is not another of its checks"),
        ("cancelled", "Nothing else. Counted only once 'other' holds.", "gate 'cancelled' but its description names"),
    ],
)
def test_a_gate_that_names_no_other_check_is_refused(gate, description, problem):
    record = _scenario_of_schema_1_0()
    record["checks"][1] = {**record["checks"][1], "description": description, "gate": gate}
    with pytest.raises(ValidationError, match=problem):
        Scenario.model_validate(record)
