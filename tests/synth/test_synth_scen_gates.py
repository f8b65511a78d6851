"""Each scenario gate rejects a crafted bad scenario (and lets a sound one through), in the real sandbox."""

from __future__ import annotations

import copy

import pytest

from harness.library import load_library
from harness.sandbox import JailSpec, SandboxPool
from harness.schema import (
    AgentSettings,
    Check,
    Environment,
    ModelSettings,
    Observation,
    ObservationKind,
    ReferenceAction,
    RewardBreakdown,
    Scenario,
    Step,
    TerminationReason,
    ToolCall,
    Trajectory,
)
from harness.toolspec import derive_tools
from synth.gates import (
    check_defines_function,
    gate_checks_run,
    gate_false_at_reset,
    gate_reference,
    gate_single_call,
    gate_state_conforms,
    gate_state_loads,
    gate_teacher,
    probe_calls,
)

LIBRARY = load_library()
RETAIL = LIBRARY.environments["retail_orders"]
SEED = {s.id: s for s in LIBRARY.scenarios}


def check(source_body: str, check_id: str = "c1") -> Check:
    return Check(
        id=check_id,
        description=source_body,
        source=f"def check(initial_state, final_state):\n    return {source_body}\n",
    )


@pytest.fixture
async def pool():
    async with JailSpec(workers=2).pool() as sandbox:
        yield sandbox


def test_state_conforms_refuses_missing_unknown_and_misfiled_records() -> None:
    state = copy.deepcopy(SEED["retail_orders-001"].initial_state)
    assert gate_state_conforms(RETAIL, state).passed
    missing = {k: v for k, v in state.items() if k != "orders"}
    assert "missing state keys ['orders']" in gate_state_conforms(RETAIL, missing).reason
    unknown = {**state, "warehouses": {}}
    assert "unknown state keys ['warehouses']" in gate_state_conforms(RETAIL, unknown).reason
    misfiled = copy.deepcopy(state)
    misfiled["users"]["U-999"] = misfiled["users"].pop("U-101")
    assert "U-999" in gate_state_conforms(RETAIL, misfiled).reason
    assert not gate_state_conforms(RETAIL, ["not", "an", "object"]).passed


FRAGILE = '''
class Ledger:
    def __init__(self, init_config: dict):
        self.entries: dict = init_config.get("entries", {})
        self.audit_log: list = []
        for entry in self.entries.values():
            if entry["amount"] < 0:
                raise ValueError("negative amounts are not allowed")

    def get_entry(self, entry_id: str) -> dict:
        """Get one entry.

        Args:
            entry_id: The entry's id.
        """
        return {"success": True, "data": self.entries.get(entry_id)}
'''


async def test_state_loads_refuses_a_state_the_class_cannot_be_built_from(pool: SandboxPool) -> None:
    ledger = Environment(
        id="ledger", name="Ledger", class_name="Ledger", code=FRAGILE, tools=derive_tools(FRAGILE, "Ledger")
    )
    good = {"entries": {"E-1": {"entry_id": "E-1", "amount": 5}}}
    bad = {"entries": {"E-1": {"entry_id": "E-1", "amount": -5}}}
    # An attribute with a default (not read from the configuration) may be left out of the state.
    assert gate_state_conforms(ledger, good).passed
    assert not gate_state_conforms(ledger, {**good, "ledger_owner": "x"}).passed
    assert (await gate_state_loads(pool, ledger, good)).passed
    outcome = await gate_state_loads(pool, ledger, bad)
    assert not outcome.passed and "does not load" in outcome.reason


async def test_checks_run_refuses_checks_that_fail_on_the_initial_state(pool: SandboxPool) -> None:
    state = SEED["retail_orders-001"].initial_state
    raising = [
        check('final_state["orders"]["O-1002"]["status"] == "cancelled"'),
        check('final_state["nope"]["x"] == 1', "c2"),
    ]
    outcome, _ = await gate_checks_run(pool, raising, state)
    assert not outcome.passed and "c2" in outcome.reason
    misnamed = [Check(id="c1", description="x", source="def verify(final_state):\n    return True\n")]
    outcome, _ = await gate_checks_run(pool, misnamed, state)
    assert not outcome.passed and "defines neither" in outcome.reason
    assert check_defines_function("def check_func(final_state):\n    return True\n") is None
    outcome, results = await gate_checks_run(pool, raising[:1], state)
    assert outcome.passed and [r.passed for r in results] == [False]


async def test_false_at_reset_refuses_a_scenario_already_done(pool: SandboxPool) -> None:
    state = SEED["retail_orders-001"].initial_state
    done = [
        check('final_state["orders"]["O-1002"]["status"] != "cancelled"'),
        check('len(final_state["users"]) > 0', "c2"),
    ]
    outcome, results = await gate_checks_run(pool, done, state)
    assert outcome.passed
    verdict = gate_false_at_reset(results)
    assert not verdict.passed and "doing nothing" in verdict.reason
    open_task = [*done, check('final_state["orders"]["O-1002"]["status"] == "cancelled"', "c3")]
    _, results = await gate_checks_run(pool, open_task, state)
    assert gate_false_at_reset(results).passed


async def _single_call(pool: SandboxPool, scenario: Scenario):
    _, reset = await gate_checks_run(pool, scenario.checks, scenario.initial_state)
    return await gate_single_call(pool, RETAIL, scenario, reset, probes=8, seed=1)


async def test_single_call_refuses_a_task_one_call_solves(pool: SandboxPool) -> None:
    easy = SEED["retail_orders-001"]  # cancel O-1002: one cancel_order call makes every check true
    outcome = await _single_call(pool, easy)
    assert not outcome.passed and "one call (cancel_order" in outcome.reason


async def test_single_call_refuses_a_check_that_holds_whatever_happens(pool: SandboxPool) -> None:
    base = SEED["retail_orders-007"]
    vacuous = base.model_copy(
        update={"checks": [*base.checks, check('isinstance(final_state["users"], dict)', "c_vacuous")]}
    )
    outcome = await _single_call(pool, vacuous)
    assert not outcome.passed and "c_vacuous" in outcome.reason
    assert outcome.details["changed_states"] >= 1


async def test_single_call_lets_a_multi_goal_task_through(pool: SandboxPool) -> None:
    outcome = await _single_call(pool, SEED["retail_orders-007"])
    assert outcome.passed, outcome.reason
    calls = probe_calls(RETAIL, SEED["retail_orders-007"], 8, seed=1)
    assert len(calls) == 8
    for call in calls:
        spec = RETAIL.tool(call.name)
        assert spec is not None
        assert set(call.arguments or {}) == set(spec.function.parameters["properties"])


def _trajectory(scenario: Scenario, success: bool, calls: list[tuple[str, dict, bool]]) -> Trajectory:
    steps = [
        Step(
            index=n,
            call=ToolCall(id=f"c{n}", name=name, arguments=arguments),
            observation=Observation(
                tool_call_id=f"c{n}",
                name=name,
                kind=ObservationKind.OK if ok else ObservationKind.TOOL_ERROR,
                error=None if ok else "refused",
            ),
        )
        for n, (name, arguments, ok) in enumerate(calls)
    ]
    return Trajectory(
        episode_id="e",
        scenario_id=scenario.id,
        environment_id=scenario.environment_id,
        mode="nonconv",
        agent=AgentSettings(model=ModelSettings(model="teacher")),
        steps=steps,
        reward=RewardBreakdown(
            state_reward=1.0 if success else 0.0, success=success, checks_passed=int(success), checks_total=1
        ),
        termination=TerminationReason.AGENT_DONE,
    )


async def test_teacher_gate_needs_success_within_k_attempts_and_keeps_its_accepted_calls() -> None:
    scenario = SEED["retail_orders-001"]
    attempts: list[int] = []

    async def failing(s: Scenario, attempt: int) -> Trajectory:
        attempts.append(attempt)
        return _trajectory(s, False, [("get_order_details", {"order_id": "O-1002"}, True)])

    outcome, actions = await gate_teacher(failing, scenario, 3)
    assert not outcome.passed and attempts == [0, 1, 2] and actions == []
    assert "did not succeed in 3 attempts" in outcome.reason

    async def second_time(s: Scenario, attempt: int) -> Trajectory:
        calls = [
            ("cancel_order", {"order_id": "O-9"}, False),
            ("cancel_order", {"order_id": "O-1002", "reason": "x"}, True),
        ]
        return _trajectory(s, attempt == 1, calls)

    outcome, actions = await gate_teacher(second_time, scenario, 3)
    assert outcome.passed and outcome.details["attempts"] == 2
    assert actions == [ReferenceAction(name="cancel_order", arguments={"order_id": "O-1002", "reason": "x"})]


async def test_reference_gate_refuses_reference_actions_that_do_not_reach_success(pool: SandboxPool) -> None:
    good = SEED["retail_orders-007"]
    assert (await gate_reference(pool, good, RETAIL)).passed
    short = good.model_copy(update={"reference_actions": good.reference_actions[:2]})
    outcome = await gate_reference(pool, short, RETAIL)
    assert not outcome.passed and "do not reach success" in outcome.reason
