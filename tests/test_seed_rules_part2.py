"""Business rules of the seed environments (clinic, hotel, food delivery, HR leave) are enforced in code.

Each case runs in the sandbox from a seed scenario's initial state: a call that breaks a rule comes back as a
``tool_error`` observation and leaves the state exactly as it was, and a neighbouring call the rule allows
still works and changes the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from harness.library import SEED_LIBRARY, Library, load_library
from harness.sandbox import SandboxPool
from harness.schema import ObservationKind, ToolCall

PART2_ENVIRONMENTS = {"clinic_appointments", "hotel_booking", "food_delivery", "hr_leave"}


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
        "clinic_appointments-005",
        "patients with 3 or more no-shows cannot book",
        "book_appointment",
        {"patient_id": "P-105", "doctor_id": "D-01", "date": "2026-03-11", "start_time": "14:00"},
        "too many missed appointments",
        "update_patient_contact",
        {"patient_id": "P-105", "phone": "555-4040"},
    ),
    RuleCase(
        "clinic_appointments-003",
        "a doctor cannot be double-booked",
        "book_appointment",
        {"patient_id": "P-106", "doctor_id": "D-01", "date": "2026-03-16", "start_time": "10:00"},
        "already has an appointment at that time",
        "book_appointment",
        {"patient_id": "P-106", "doctor_id": "D-01", "date": "2026-03-16", "start_time": "10:30"},
    ),
    RuleCase(
        "clinic_appointments-006",
        "a visit cannot move past its referral's expiry",
        "reschedule_appointment",
        {"appointment_id": "APT-1004", "new_date": "2026-03-17", "new_start_time": "10:00"},
        "referral",
        "add_appointment_note",
        {"appointment_id": "APT-1004", "note": "Will bring home ECG readings."},
    ),
    RuleCase(
        "clinic_appointments-009",
        "same-day appointments cannot be rescheduled",
        "reschedule_appointment",
        {"appointment_id": "APT-1005", "new_date": "2026-03-11", "new_start_time": "15:00"},
        "Same-day",
        "reschedule_appointment",
        {"appointment_id": "APT-1006", "new_date": "2026-03-25", "new_start_time": "09:00"},
    ),
    RuleCase(
        "hotel_booking-008",
        "non-refundable reservations cannot be modified",
        "change_reservation_dates",
        {"reservation_id": "RES-3010", "new_check_in": "2026-05-22", "new_check_out": "2026-05-27"},
        "Non-refundable",
        "add_special_request",
        {"reservation_id": "RES-3010", "request": "Airport pickup"},
    ),
    RuleCase(
        "hotel_booking-006",
        "an expired card cannot pay for a reservation",
        "change_payment_method",
        {"reservation_id": "RES-3001", "payment_method_id": "PM-2"},
        "expired",
        "change_room_type",
        {"reservation_id": "RES-3001", "new_room_type_id": "RT-13"},
    ),
    RuleCase(
        "hotel_booking-010",
        "a stay in progress cannot be extended",
        "change_reservation_dates",
        {"reservation_id": "RES-3007", "new_check_in": "2026-05-01", "new_check_out": "2026-05-07"},
        "checked_in",
        "create_reservation",
        {
            "guest_id": "G-207",
            "room_type_id": "RT-11",
            "check_in": "2026-05-06",
            "check_out": "2026-05-07",
            "guests_count": 1,
            "rate_plan": "flexible",
            "payment_method_id": "PM-9",
        },
    ),
    RuleCase(
        "food_delivery-002",
        "an order picked up by a courier cannot be cancelled",
        "cancel_order",
        {"order_id": "O-7003", "reason": "changed my mind"},
        "cannot be cancelled",
        "add_customer_address",
        {"customer_id": "C-303", "label": "work", "street": "100 King Street", "zone": "Z4"},
    ),
    RuleCase(
        "food_delivery-005",
        "items cannot change once the restaurant is preparing the order",
        "modify_order_items",
        {"order_id": "O-7005", "items": {"M-161": 3, "M-163": 1}},
        "items can no longer change",
        "add_delivery_instructions",
        {"order_id": "O-7005", "instructions": "Leave at the door and ring twice."},
    ),
    RuleCase(
        "food_delivery-011",
        "the subtotal must reach the restaurant's minimum order",
        "modify_order_items",
        {"order_id": "O-7007", "items": {"M-121": 1}},
        "minimum order",
        "modify_order_items",
        {"order_id": "O-7007", "items": {"M-121": 1, "M-123": 1}},
    ),
    RuleCase(
        "food_delivery-008",
        "a missing item is refunded only once",
        "report_missing_item",
        {"order_id": "O-7008", "item_id": "M-104", "quantity": 1},
        "already issued",
        "report_missing_item",
        {"order_id": "O-7008", "item_id": "M-102", "quantity": 1},
    ),
    RuleCase(
        "hr_leave-003",
        "leave cannot exceed the available balance",
        "submit_leave_request",
        {"employee_id": "E-405", "leave_type": "annual", "start_date": "2026-10-05", "end_date": "2026-10-09"},
        "available",
        "submit_leave_request",
        {"employee_id": "E-405", "leave_type": "annual", "start_date": "2026-10-05", "end_date": "2026-10-05"},
    ),
    RuleCase(
        "hr_leave-001",
        "requests cannot overlap the employee's open requests",
        "submit_leave_request",
        {"employee_id": "E-403", "leave_type": "annual", "start_date": "2026-09-16", "end_date": "2026-09-17"},
        "overlap",
        "submit_leave_request",
        {"employee_id": "E-403", "leave_type": "annual", "start_date": "2026-10-12", "end_date": "2026-10-16"},
    ),
    RuleCase(
        "hr_leave-004",
        "annual leave cannot fall in a department blackout",
        "submit_leave_request",
        {"employee_id": "E-404", "leave_type": "annual", "start_date": "2026-09-28", "end_date": "2026-10-02"},
        "not allowed in Finance",
        "submit_leave_request",
        {"employee_id": "E-404", "leave_type": "sick", "start_date": "2026-08-31", "end_date": "2026-08-31"},
    ),
    RuleCase(
        "hr_leave-009",
        "only the direct manager can approve",
        "approve_leave_request",
        {"request_id": "LR-5001", "approver_id": "E-408"},
        "direct manager",
        "approve_leave_request",
        {"request_id": "LR-5006", "approver_id": "E-408"},
    ),
    RuleCase(
        "hr_leave-006",
        "leave that has started cannot be cancelled",
        "cancel_leave_request",
        {"request_id": "LR-5009"},
        "already started",
        "submit_leave_request",
        {"employee_id": "E-402", "leave_type": "personal", "start_date": "2026-09-25", "end_date": "2026-09-25"},
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

            observation, diff = await session.call(
                ToolCall(id="good", name=case.allowed_call, arguments=case.allowed_arguments)
            )
            assert observation.kind is ObservationKind.OK, observation
            assert observation.content["success"] is True
            assert diff != []
        finally:
            await session.close()


def test_every_part2_environment_has_a_rule_case(library: Library) -> None:
    scenarios_by_id = {s.id: s for s in library.scenarios}
    covered = {scenarios_by_id[c.scenario_id].environment_id for c in CASES}
    assert covered == PART2_ENVIRONMENTS
    for env_id in covered:
        environment = library.environments[env_id]
        assert len(environment.rules) >= 5
        assert 10 <= len(environment.tools) <= 25
        scenarios = library.scenarios_for(env_id)
        assert len(scenarios) >= 10
        assert {s.difficulty for s in scenarios} == {"easy", "medium", "hard"}
        assert any("refusal" in s.tags for s in scenarios)
        assert all(len(s.checks) >= 3 and s.reference_actions for s in scenarios)
