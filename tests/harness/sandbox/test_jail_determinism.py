"""Honest code is reproducible, and `validate` proves it instead of assuming it."""

from __future__ import annotations

import json

import orjson

from harness.library import load_library
from harness.sandbox import JailSpec
from harness.schema import ToolCall
from tests.support.cli_process import harness_cli
from tests.support.jail_library import hostile_scenario, write_hostile_library


async def test_same_calls_and_seed_give_byte_identical_states_in_fresh_processes():
    library = load_library()
    scenario = next(s for s in library.scenarios if s.reference_actions and s.environment_id == "hotel_booking")
    environment = library.environments[scenario.environment_id]
    states = []
    async with JailSpec().pool() as pool:
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


async def test_lazy_standard_imports_and_installed_optional_modules_work_inside_the_jail():
    from harness.schema import Environment
    from harness.toolspec import derive_tools

    code = (
        "import datetime\n"
        "import mpmath\n\n\n"
        "class Calc:\n"
        "    def __init__(self, init_config: dict):\n"
        "        self.log = []\n\n"
        "    def parse(self, text: str) -> dict:\n"
        '        """Parse a date and take a square root."""\n'
        "        day = datetime.datetime.strptime(text, '%Y-%m-%d').strftime('%A')\n"
        "        root = str(mpmath.sqrt(2))[:6]\n"
        "        self.log.append(day)\n"
        "        return {'success': True, 'data': [day, root]}\n"
    )
    environment = Environment(id="calc", name="Calc", class_name="Calc", code=code, tools=derive_tools(code, "Calc"))
    async with JailSpec().pool() as pool:
        session = await pool.open_session(environment, {})
        observation, _ = await session.call(ToolCall(id="a", name="parse", arguments={"text": "2025-01-15"}))
        await session.close()
    assert observation.content == {"success": True, "data": ["Wednesday", "1.4142"]}, observation


async def test_a_tools_type_error_is_a_tool_exception_and_init_config_is_shared_as_upstream():
    from harness.schema import Environment, ObservationKind
    from harness.toolspec import derive_tools

    code = (
        "class Shelf:\n"
        "    def __init__(self, init_config: dict):\n"
        "        self.init_config = init_config\n"
        "        self.books = init_config['books']\n\n"
        "    def add(self, title: str) -> dict:\n"
        '        """Add a book."""\n'
        "        self.books.append(title)\n"
        "        return {'success': True, 'data': len(self.init_config['books'])}\n\n"
        "    def broken(self) -> dict:\n"
        '        """Raise a TypeError of its own."""\n'
        "        return {'success': True, 'data': len(5)}\n"
    )
    environment = Environment(
        id="shelf", name="Shelf", class_name="Shelf", code=code, tools=derive_tools(code, "Shelf")
    )
    async with JailSpec().pool() as pool:
        session = await pool.open_session(environment, {"books": ["a"]})
        added, _ = await session.call(ToolCall(id="a", name="add", arguments={"title": "b"}))
        broken, _ = await session.call(ToolCall(id="b", name="broken", arguments={}))
        state = await session.state()
        await session.close()
    # books, init_config and init_config["books"] are one list, as in EnvScaler's runtime.
    assert added.content["data"] == 2 and state["books"] == ["a", "b"] == state["init_config"]["books"]
    assert broken.kind is ObservationKind.TOOL_EXCEPTION and "TypeError" in (broken.error or ""), broken
