"""`harness validate`: the seed library passes, and each kind of unsound record is caught."""

from __future__ import annotations

import orjson
from typer.testing import CliRunner

from harness.cli import app
from harness.library import SEED_LIBRARY, write_seed_layout
from harness.schema import Check, Environment, ReferenceAction, Scenario
from harness.toolspec import derive_tools

runner = CliRunner()


def test_seed_library_is_valid():
    result = runner.invoke(app, ["validate", str(SEED_LIBRARY), "--json"])
    report = orjson.loads(result.stdout)
    invalid = [r for r in report["records"] if not r["ok"]]
    assert invalid == [], invalid
    assert result.exit_code == 0
    environments = [r for r in report["records"] if r["kind"] == "environment"]
    scenarios = [r for r in report["records"] if r["kind"] == "scenario"]
    assert len(environments) >= 12
    assert len(scenarios) >= 120
    for scenario in scenarios:
        # Each scenario proves it is solvable and not solved at reset (validate turns both into problems).
        assert scenario["details"]["reference_state_reward"] == 1.0
        assert scenario["details"]["true_at_reset"] < scenario["details"]["checks"]


CODE = '''
class Box:
    def __init__(self, init_config: dict):
        self.items = init_config.get("items", {})

    def peek(self, key: str) -> dict:
        """Read an item.

        Args:
            key: The item.
        """
        return {"success": True, "data": self.items.get(key)}

    def put(self, key: str, value: int) -> dict:
        """Store an item.

        Args:
            key: The item.
            value: Its value.
        """
        self.items[key] = value
        return {"success": True, "message": "stored"}
'''


def box() -> Environment:
    return Environment(id="box", name="Box", class_name="Box", code=CODE, tools=derive_tools(CODE, "Box"))


def check(source: str, check_id: str = "c") -> Check:
    return Check(id=check_id, description=check_id, source=source)


def make(scenario_id: str, checks: list[Check], actions: list[ReferenceAction]) -> Scenario:
    return Scenario(
        id=scenario_id,
        environment_id="box",
        initial_state={"items": {"a": 1}},
        task="t",
        checks=checks,
        reference_actions=actions,
    )


def test_unsound_records_are_reported(tmp_path):
    put = ReferenceAction(name="put", arguments={"key": "b", "value": 2})
    peek = ReferenceAction(name="peek", arguments={"key": "a"})
    scenarios = [
        make("good", [check("def check(i, f):\n    return f['items'].get('b') == 2\n")], [peek, put]),
        make("solved-at-reset", [check("def check(i, f):\n    return f['items']['a'] == 1\n")], [put]),
        make("unsolvable", [check("def check(i, f):\n    return f['items'].get('b') == 3\n")], [put]),
        make(
            "crashing-check",
            [check("def check(i, f):\n    return f['nope']\n"), check("def check(i, f):\n    return False\n", "d")],
            [put],
        ),
    ]
    bad_env = Environment(
        id="evil", name="Evil", class_name="Evil", code="import os\nclass Evil:\n    pass\n", tools=[]
    )
    write_seed_layout([box(), bad_env], scenarios, tmp_path)
    result = runner.invoke(app, ["validate", str(tmp_path), "--json"])
    assert result.exit_code == 1
    records = {r["id"]: r for r in orjson.loads(result.stdout)["records"]}
    assert records["box"]["ok"] and records["good"]["ok"]
    assert "import of 'os'" in " ".join(records["evil"]["problems"])
    assert "already holds at reset" in " ".join(records["solved-at-reset"]["problems"])
    assert "do not reach success" in " ".join(records["unsolvable"]["problems"])
    assert "fails to run on the initial state" in " ".join(records["crashing-check"]["problems"])


def test_table_output_names_invalid_records(tmp_path):
    put = ReferenceAction(name="put", arguments={"key": "b", "value": 2})
    write_seed_layout([box()], [make("unsolvable", [check("def check(i, f):\n    return False\n")], [put])], tmp_path)
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 1
    assert "unsolvable" in result.stdout and "1 invalid" in result.stdout
