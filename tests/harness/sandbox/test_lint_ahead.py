"""A run's code gets its static checks while the sandbox starts, each source once."""

from __future__ import annotations

import pytest

import harness.sandbox.pool as pool_module
from harness.library import load_library
from harness.run.driver import code_of
from harness.sandbox import JailSpec
from harness.schema import Environment
from harness.scoring.checks import prepared_checks
from harness.toolspec import derive_tools

CLEAN = "class Counter:\n    def __init__(self, init_config: dict):\n        self.hits = 0\n"
REFUSED = "import os\n"


async def test_the_pool_answers_the_static_checks_of_its_run_from_its_start(monkeypatch: pytest.MonkeyPatch):
    async with JailSpec().pool(code_to_lint=[CLEAN, REFUSED, CLEAN]) as pool:

        def linted_again(code: str) -> list[str]:
            raise AssertionError(f"linted after the start: {code!r}")

        monkeypatch.setattr(pool_module, "find_problems", linted_again)
        assert pool.static_problems(REFUSED) == ["line 1: import of 'os' is not allowed"]
        assert pool.static_problems(CLEAN) == []
        environment = Environment(
            id="counter", name="Counter", class_name="Counter", code=CLEAN, tools=derive_tools(CLEAN, "Counter")
        )
        session = await pool.open_session(environment, {})
        assert (await session.state())["hits"] == 0
        await session.close()


def test_a_run_lints_each_environment_and_each_check_as_sent_once():
    library = load_library()
    scenarios = library.scenarios[:6]
    sources = code_of(library, scenarios + scenarios)
    assert len(sources) == len(set(sources))
    expected = {library.environments[s.environment_id].code for s in scenarios}
    expected |= {check.source for s in scenarios for check in prepared_checks(s.checks)}
    assert set(sources) == expected
    served = scenarios[0].model_copy(update={"environment_id": "served-over-mcp"})
    assert set(code_of(library, [served])) == {check.source for check in prepared_checks(served.checks)}
