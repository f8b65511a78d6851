"""Reading τ²-bench's prompt constants and its scenario classes from a module's syntax tree (never importing it):
what upstream writes is taken as it is, and a source that is not upstream's shape is refused in one line."""

from __future__ import annotations

import pytest

from harness.benchmarks.tau2.source import Tau2SourceError
from harness.benchmarks.tau2.upstream_prompts import module_string, scenario_code

MODULE = '''
import os
from tau2.data_model.message import Message

GREETING = """
  Hello {name}.
""".strip()
PLAIN = "as it is "
BUILT = f"{os.sep}"
'''

TASKS = """
import textwrap
from tau2.data_model.message import Message


class StructuredUserInstructions:
    pass


UserInstructions = StructuredUserInstructions | str


class Other:
    pass


class UserScenario:
    def __str__(self):
        return "x"
"""


def test_a_constant_and_a_stripped_constant_are_read_as_python_gives_them() -> None:
    assert module_string(MODULE, "GREETING", "m.py") == "Hello {name}."
    assert module_string(MODULE, "PLAIN", "m.py") == "as it is "


@pytest.mark.parametrize(("name", "problem"), [("BUILT", "not a string constant"), ("MISSING", "defines no MISSING")])
def test_anything_else_is_refused_naming_the_module(name: str, problem: str) -> None:
    with pytest.raises(Tau2SourceError, match=problem) as caught:
        module_string(MODULE, name, "agent/llm_agent.py")
    assert "agent/llm_agent.py" in str(caught.value) and "\n" not in str(caught.value)


def test_the_scenario_classes_are_taken_as_written_without_tau2s_imports() -> None:
    code = scenario_code(TASKS, "data_model/tasks.py")
    assert "import textwrap" in code and "tau2" not in code and "class Other" not in code
    for name in ("class StructuredUserInstructions:", "UserInstructions = ", "class UserScenario:"):
        assert name in code
    namespace: dict[str, object] = {}
    exec(compile(code, "<scenario>", "exec"), namespace)  # our own fixture text, to show the code stands alone
    assert str(namespace["UserScenario"]()) == "x"  # type: ignore[operator]


def test_a_tasks_module_without_the_classes_is_refused() -> None:
    with pytest.raises(Tau2SourceError, match="defines no UserScenario"):
        scenario_code(TASKS.replace("class UserScenario", "class Renamed"), "data_model/tasks.py")
