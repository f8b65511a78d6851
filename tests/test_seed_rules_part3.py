"""Business rules of the seed environments (IT helpdesk, car rental, course enrollment, pharmacy) hold in code.

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

PART3_ENVIRONMENTS = {"it_helpdesk", "car_rental", "course_enrollment", "pharmacy_prescriptions"}


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


def test_every_part3_environment_has_rule_cases(library: Library) -> None:
    scenarios_by_id = {s.id: s for s in library.scenarios}
    covered = {scenarios_by_id[c.scenario_id].environment_id for c in CASES}
    assert covered == PART3_ENVIRONMENTS
    for env_id in covered:
        environment = library.environments[env_id]
        assert len(environment.rules) >= 5
        assert 10 <= len(environment.tools) <= 25
        scenarios = library.scenarios_for(env_id)
        assert len(scenarios) >= 10
        assert all(len(s.checks) >= 3 and s.reference_actions for s in scenarios)
        assert {s.difficulty for s in scenarios} == {"easy", "medium", "hard"}
        assert any("refusal" in s.tags for s in scenarios)
