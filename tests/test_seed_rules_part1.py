"""Business rules of the seed environments (retail, airline, banking, library) are enforced in code.

Each case runs in the sandbox from a seed scenario's initial state: a call that breaks a rule comes back as a
``tool_error`` observation and leaves the state exactly as it was, and a call the rule allows still works.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from harness.library import SEED_LIBRARY, Library, load_library
from harness.sandbox import SandboxPool
from harness.schema import ObservationKind, ToolCall


@dataclass(frozen=True)
class RuleCase:
    scenario_id: str
    rule: str
    call: str
    arguments: dict[str, Any]
    error_fragment: str
    allowed_call: str
    allowed_arguments: dict[str, Any]


CASES = [
    RuleCase(
        "retail_orders-003",
        "shipped orders cannot be cancelled",
        "cancel_order",
        {"order_id": "O-1005", "reason": "no longer needed"},
        "only pending or processing orders",
        "cancel_order",
        {"order_id": "O-1004", "reason": "no longer needed"},
    ),
    RuleCase(
        "retail_orders-005",
        "refunds go to the original payment method",
        "request_return",
        {
            "order_id": "O-1001",
            "product_id": "P-201",
            "quantity": 1,
            "refund_payment_method_id": "PM-2",
            "reason": "not needed",
        },
        "original payment method",
        "request_return",
        {
            "order_id": "O-1001",
            "product_id": "P-201",
            "quantity": 1,
            "refund_payment_method_id": "PM-1",
            "reason": "not needed",
        },
    ),
    RuleCase(
        "retail_orders-005",
        "returns close 30 days after delivery",
        "request_return",
        {
            "order_id": "O-1003",
            "product_id": "P-207",
            "quantity": 1,
            "refund_payment_method_id": "PM-2",
            "reason": "not needed",
        },
        "return window has closed",
        "get_order_details",
        {"order_id": "O-1003"},
    ),
    RuleCase(
        "airline_reservations-002",
        "basic economy cannot be changed",
        "change_flight",
        {"reservation_id": "RES0002", "new_flight_id": "F-AA100-0314"},
        "Basic economy",
        "add_checked_bags",
        {"reservation_id": "RES0002", "bags": 1},
    ),
    RuleCase(
        "airline_reservations-001",
        "a flight change keeps the route",
        "change_flight",
        {"reservation_id": "RES0001", "new_flight_id": "F-UA220-0320"},
        "same origin and destination",
        "change_flight",
        {"reservation_id": "RES0001", "new_flight_id": "F-AA108-0314"},
    ),
    RuleCase(
        "banking-009",
        "only zero-balance accounts can be closed",
        "close_account",
        {"account_id": "AC-1013"},
        "zero balance",
        "transfer_between_accounts",
        {"from_account_id": "AC-1013", "to_account_id": "AC-1012", "amount": 260.0},
    ),
    RuleCase(
        "banking-002",
        "overdrafts are not allowed",
        "pay_payee",
        {"account_id": "AC-1003", "payee_id": "PY-00003", "amount": 400.0},
        "overdrafts are not allowed",
        "pay_payee",
        {"account_id": "AC-1003", "payee_id": "PY-00003", "amount": 300.0},
    ),
    RuleCase(
        "banking-004",
        "payee payments are limited to 5,000 per day",
        "pay_payee",
        {"account_id": "AC-1007", "payee_id": "PY-00004", "amount": 1200.0},
        "Daily payee limit",
        "pay_payee",
        {"account_id": "AC-1007", "payee_id": "PY-00005", "amount": 800.0},
    ),
    RuleCase(
        "library_circulation-003",
        "a member with an overdue loan cannot borrow",
        "checkout_copy",
        {"member_id": "M-005", "copy_id": "C-15-1"},
        "overdue",
        "return_copy",
        {"copy_id": "C-12-2"},
    ),
    RuleCase(
        "library_circulation-007",
        "lost-item fines cannot be waived",
        "waive_fine",
        {"fine_id": "F-2", "reason": "found the book"},
        "only late fines",
        "pay_fine",
        {"fine_id": "F-1", "amount": 2.0},
    ),
]


@pytest.fixture(scope="module")
def library() -> Library:
    return load_library(SEED_LIBRARY)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.scenario_id}:{c.rule}" for c in CASES])
async def test_rule_is_enforced(library: Library, case: RuleCase) -> None:
    scenario = next(s for s in library.scenarios if s.id == case.scenario_id)
    environment = library.environments[scenario.environment_id]
    async with SandboxPool(workers=1) as pool:
        session = await pool.open_session(environment, scenario.initial_state)
        try:
            before = await session.state()
            assert before == scenario.initial_state

            observation, diff = await session.call(ToolCall(id="bad", name=case.call, arguments=case.arguments))
            assert observation.kind is ObservationKind.TOOL_ERROR, observation
            assert case.error_fragment in (observation.error or "")
            assert diff == []
            assert await session.state() == before

            observation, _ = await session.call(
                ToolCall(id="good", name=case.allowed_call, arguments=case.allowed_arguments)
            )
            assert observation.kind is ObservationKind.OK, observation
            assert observation.content["success"] is True
        finally:
            await session.close()


def test_every_part1_environment_has_a_rule_case(library: Library) -> None:
    scenarios_by_id = {s.id: s for s in library.scenarios}
    covered = {scenarios_by_id[c.scenario_id].environment_id for c in CASES}
    assert covered == {"retail_orders", "airline_reservations", "banking", "library_circulation"}
    for env_id in covered:
        environment = library.environments[env_id]
        assert len(environment.rules) >= 5
        assert 10 <= len(environment.tools) <= 25
        assert len(library.scenarios_for(env_id)) >= 10
