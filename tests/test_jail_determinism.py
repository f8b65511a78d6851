"""Honest code is reproducible, and `validate` proves it instead of assuming it."""

from __future__ import annotations

import json

import orjson

from harness.library import load_library
from harness.sandbox import SandboxPool
from harness.schema import ToolCall
from tests.jail_library import harness_cli, hostile_scenario, write_hostile_library


async def test_same_calls_and_seed_give_byte_identical_states_in_fresh_processes():
    library = load_library()
    scenario = next(s for s in library.scenarios if s.reference_actions and s.environment_id == "hotel_booking")
    environment = library.environments[scenario.environment_id]
    states = []
    async with SandboxPool() as pool:
        for _ in range(2):
            session = await pool.open_session(environment, scenario.initial_state, seed=7)
            for number, action in enumerate(scenario.reference_actions):
                await session.call(ToolCall(id=f"c{number}", name=action.name, arguments=action.arguments))
            states.append(orjson.dumps(await session.state()))
            await session.close()
    assert states[0] == states[1]


def test_validate_flags_an_environment_that_reads_the_real_clock(tmp_path):
    clocked = hostile_scenario([("real_clock", {}), ("bump", {})], scenario_id="clocked")
    steady = hostile_scenario([("bump", {})], scenario_id="steady")
    library = write_hostile_library(tmp_path / "library", [clocked, steady])
    result = harness_cli("validate", str(library), "--json")
    records = {r["id"]: r for r in json.loads(result.stdout)["records"]}
    assert any("nondeterministic" in p for p in records["clocked"]["problems"]), records["clocked"]
    assert not any("nondeterministic" in p for p in records["steady"]["problems"]), records["steady"]
    assert result.returncode != 0
