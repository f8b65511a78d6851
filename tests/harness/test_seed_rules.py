"""Business rules of every seed environment are enforced in code.

Each case runs in the sandbox from a seed scenario's initial state: a call that breaks a rule comes back as a
``tool_error`` observation and leaves the state exactly as it was, and a call the rule allows still works.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from harness.library import SEED_LIBRARY, Library, load_library
from harness.sandbox import JailSpec, SandboxPool
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
    RuleCase(
        "it_helpdesk-011",
        "closed tickets cannot be reassigned",
        "assign_ticket",
        {"ticket_id": "T-1007", "technician_id": "TECH-6"},
        "only open or in-progress tickets",
        "assign_ticket",
        {"ticket_id": "T-1008", "technician_id": "TECH-1"},
    ),
    RuleCase(
        "it_helpdesk-003",
        "an employee holds at most one laptop",
        "assign_asset",
        {"asset_id": "A-503", "employee_id": "E-101"},
        "already holds laptop A-501",
        "assign_asset",
        {"asset_id": "A-510", "employee_id": "E-101"},
    ),
    RuleCase(
        "it_helpdesk-005",
        "resolved tickets reopen only within 14 days",
        "reopen_ticket",
        {"ticket_id": "T-1006", "reason": "Outlook crashes again."},
        "only within 14 days",
        "reopen_ticket",
        {"ticket_id": "T-1005", "reason": "The printer jams again."},
    ),
    RuleCase(
        "it_helpdesk-009",
        "a technician's queue has a maximum",
        "assign_ticket",
        {"ticket_id": "T-1004", "technician_id": "TECH-7"},
        "the maximum",
        "assign_ticket",
        {"ticket_id": "T-1004", "technician_id": "TECH-5"},
    ),
    RuleCase(
        "car_rental-003",
        "drivers under 25 cannot rent premium cars",
        "create_reservation",
        {"customer_id": "C-203", "vehicle_id": "V-305", "start_date": "2026-05-20", "end_date": "2026-05-23"},
        "under 25",
        "create_reservation",
        {"customer_id": "C-203", "vehicle_id": "V-302", "start_date": "2026-05-20", "end_date": "2026-05-23"},
    ),
    RuleCase(
        "car_rental-008",
        "vans cannot be rented one-way",
        "create_reservation",
        {
            "customer_id": "C-212",
            "vehicle_id": "V-307",
            "start_date": "2026-05-16",
            "end_date": "2026-05-18",
            "return_branch_id": "BR-3",
        },
        "Vans must be returned",
        "create_reservation",
        {"customer_id": "C-212", "vehicle_id": "V-307", "start_date": "2026-05-16", "end_date": "2026-05-18"},
    ),
    RuleCase(
        "car_rental-006",
        "the licence must be valid through the return day",
        "create_reservation",
        {
            "customer_id": "C-204",
            "vehicle_id": "V-311",
            "start_date": "2026-05-24",
            "end_date": "2026-05-27",
            "return_branch_id": "BR-2",
        },
        "licence expires",
        "update_customer_license",
        {"customer_id": "C-204", "license_number": "CO-88123456", "license_expiry": "2036-05-01"},
    ),
    RuleCase(
        "car_rental-004",
        "a car is handed over only on the start date",
        "start_rental",
        {"reservation_id": "R-5001"},
        "only on the start date",
        "start_rental",
        {"reservation_id": "R-5003"},
    ),
    RuleCase(
        "course_enrollment-003",
        "prerequisites need C- or better",
        "enroll_in_section",
        {"student_id": "S-305", "section_id": "CS201-02"},
        "requires CS101",
        "enroll_in_section",
        {"student_id": "S-305", "section_id": "ECON101-02"},
    ),
    RuleCase(
        "course_enrollment-001",
        "a section cannot exceed its capacity",
        "enroll_in_section",
        {"student_id": "S-312", "section_id": "HIST120-01"},
        "is full",
        "enroll_in_section",
        {"student_id": "S-312", "section_id": "CS101-01"},
    ),
    RuleCase(
        "course_enrollment-005",
        "students with holds cannot register",
        "enroll_in_section",
        {"student_id": "S-311", "section_id": "MATH210-01"},
        "holds",
        "clear_advising_hold",
        {"student_id": "S-311"},
    ),
    RuleCase(
        "course_enrollment-008",
        "courses of the student's own program are letter graded",
        "set_grade_mode",
        {"enrollment_id": "EN-14", "grade_mode": "pass_fail"},
        "must be letter graded",
        "enroll_in_section",
        {"student_id": "S-309", "section_id": "PSYC101-01"},
    ),
    RuleCase(
        "pharmacy_prescriptions-002",
        "a controlled prescription cannot be refilled early",
        "fill_prescription",
        {"rx_id": "RX-7004"},
        "Too early to refill",
        "update_patient_phone",
        {"patient_id": "P-403", "phone": "503-555-0199"},
    ),
    RuleCase(
        "pharmacy_prescriptions-010",
        "refills cannot exceed the authorized count",
        "fill_prescription",
        {"rx_id": "RX-7002"},
        "authorized refills",
        "fill_prescription",
        {"rx_id": "RX-7001"},
    ),
    RuleCase(
        "pharmacy_prescriptions-004",
        "interacting drugs are not dispensed",
        "fill_prescription",
        {"rx_id": "RX-7009"},
        "interacts with Warfarin",
        "fill_prescription",
        {"rx_id": "RX-7008"},
    ),
    RuleCase(
        "pharmacy_prescriptions-005",
        "a fill is handed over only with the patient's date of birth",
        "record_pickup",
        {"fill_id": "F-10", "date_of_birth": "2001-04-05"},
        "does not match",
        "record_pickup",
        {"fill_id": "F-10", "date_of_birth": "2001-04-04"},
    ),
]


@pytest.fixture(scope="module")
def library() -> Library:
    return load_library(SEED_LIBRARY)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool():
    async with JailSpec(workers=2).pool() as sandbox:
        yield sandbox


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("case", CASES, ids=[f"{c.scenario_id}:{c.rule}" for c in CASES])
async def test_rule_is_enforced(library: Library, pool: SandboxPool, case: RuleCase) -> None:
    scenario = next(s for s in library.scenarios if s.id == case.scenario_id)
    session = await pool.open_session(library.environments[scenario.environment_id], scenario.initial_state)
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
        if case.allowed_call == case.call:  # the same tool, within the rule, does change the state
            assert diff != []
    finally:
        await session.close()


def test_every_environment_has_rule_cases_and_enough_content(library: Library) -> None:
    scenarios_by_id = {s.id: s for s in library.scenarios}
    covered = {scenarios_by_id[c.scenario_id].environment_id for c in CASES}
    assert covered == set(library.environments)
    assert len(covered) >= 12
    for env_id in covered:
        environment = library.environments[env_id]
        assert len(environment.rules) >= 5
        assert 10 <= len(environment.tools) <= 25
        scenarios = library.scenarios_for(env_id)
        assert len(scenarios) >= 10
        assert all(len(s.checks) >= 3 and s.reference_actions for s in scenarios)
        assert {s.difficulty for s in scenarios} == {"easy", "medium", "hard"}
        assert any("refusal" in s.tags for s in scenarios)
