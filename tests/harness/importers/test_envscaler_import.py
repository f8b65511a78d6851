"""Import of EnvScaler's release format, and runs of its environments that match upstream semantics."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from harness.benchmarks.envscaler import import_envscaler
from harness.cli import app
from harness.library import load_library
from harness.sandbox import JailSpec
from harness.schema import ToolCall
from harness.scoring.checks import score_final_state
from tests.support.cli_process import harness

# Written in the style of EnvScaler's generated classes: TypedDict entities, no constructor argument handling
# beyond defaults (the runtime setattr's every init_config key), `success` dicts.
ENV_CODE = '''
from typing import Dict, TypedDict


class UserInfo(TypedDict):
    user_id: str
    name: str
    points: int


class LoyaltyProgram:
    def __init__(self):
        self.users: Dict[str, UserInfo] = {}
        self.redemptions: list = []

    def get_user(self, user_id: str) -> dict:
        """Get a member by id."""
        if user_id not in self.users:
            return {"success": False, "error": "User not found"}
        return {"success": True, "data": self.users[user_id]}

    def redeem_points(self, user_id: str, points: int) -> dict:
        """Redeem points for a member."""
        user = self.users.get(user_id)
        if user is None:
            return {"success": False, "error": "User not found"}
        if user["points"] < points:
            return {"success": False, "error": "Not enough points"}
        user["points"] -= points
        self.redemptions.append({"user_id": user_id, "points": points})
        return {"success": True, "message": "Redeemed"}
'''

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_user",
            "description": "Get a member by id.",
            "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "redeem_points",
            "description": "Redeem points.",
            "parameters": {
                "type": "object",
                "properties": {"user_id": {"type": "string"}, "points": {"type": "integer"}},
                "required": ["user_id", "points"],
            },
        },
    },
]

INIT = {
    "users": {
        "u1": {"user_id": "u1", "name": "Ann", "points": 500},
        "u2": {"user_id": "u2", "name": "Bob", "points": 50},
    },
    "redemptions": [],
}

CHECKS = [
    {
        "check_item": "Ann has 300 points left",
        "check_func": "def check_func(final_state):\n    return final_state['users']['u1']['points'] == 300\n",
    },
    {
        "check_item": "One redemption recorded",
        "check_func": "def check_func(final_state):\n    return len(final_state['redemptions']) == len(initial_state['redemptions']) + 1\n",
    },
    {
        "check_item": "Bob untouched",
        "check_func": "def check_func(final_state):\n    return final_state['users']['u2'] == initial_state['users']['u2']\n",
    },
]


def release_files(tmp_path):
    """Their release: JSON lists whose tools/init_config/checklists are JSON strings; plus a broken record."""
    environments = [
        {
            "env_id": "env_7_rl",
            "environment_summary": "A loyalty program.",
            "environment_introduction": "You manage loyalty points.",
            "state_space_definition": [
                {"entity": "User", "attributes": "user_id, name, points", "description": "A member."}
            ],
            "constraints_rules": ["Points cannot go negative."],
            "operation_list": [
                {"operation_name": "redeem_points", "operation_description": "Redeem", "operation_type": "state_change"}
            ],
            "env_class_name": "LoyaltyProgram",
            "env_class_code": ENV_CODE,
            "tools": orjson.dumps(TOOLS).decode(),
        },
        {"env_id": "env_8_rl", "env_class_name": "Missing"},
    ]
    scenarios = [
        {
            "env_id": "env_7_rl",
            "env_class_name": "LoyaltyProgram",
            "task_id": 3,
            "init_config": orjson.dumps(INIT).decode(),
            "task": "Redeem 200 of Ann's points.",
            "checklist_with_func": CHECKS,
        },
        {"env_id": "env_7_rl", "task_id": 4, "init_config": "not json", "task": "x"},
    ]
    env_file, scen_file = tmp_path / "envs.json", tmp_path / "rl.json"
    env_file.write_bytes(orjson.dumps(environments))
    scen_file.write_bytes(orjson.dumps(scenarios))
    return env_file, scen_file


def test_malformed_records_are_reported_by_id_and_good_ones_kept(tmp_path):
    env_file, scen_file = release_files(tmp_path)
    report = import_envscaler(env_file, [scen_file])
    assert [e.id for e in report.environments] == ["env_7_rl"]
    assert [s.id for s in report.scenarios] == ["env_7_rl-3"]
    assert any("env_8_rl" in p and "env_class_code" in p for p in report.problems)
    assert any("env_7_rl/4" in p for p in report.problems)
    env = report.environments[0]
    assert env.state_entities[0].attributes == ["user_id", "name", "points"]
    assert env.tool_names == ["get_user", "redeem_points"]


def test_repository_layout_keyed_by_env_id(tmp_path):
    record = {"env_class_name": "LoyaltyProgram", "env_class_code": ENV_CODE, "tools": TOOLS}
    path = tmp_path / "envs.json"
    path.write_bytes(orjson.dumps({"env_9_sft": record}))
    report = import_envscaler(path)
    assert [e.id for e in report.environments] == ["env_9_sft"]


async def test_imported_environment_scores_like_upstream(tmp_path):
    env_file, scen_file = release_files(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["import", "envscaler", "--environments", str(env_file), "--scenarios", str(scen_file), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "env_8_rl" in result.output
    library = load_library(out)
    scenario = library.scenarios[0]
    environment = library.environments[scenario.environment_id]
    async with JailSpec(workers=1).pool() as pool:
        # The class takes no init_config: the runtime falls back to cls() and setattr's each key, as upstream.
        session = await pool.open_session(environment, scenario.initial_state)
        observation, _ = await session.call(
            ToolCall(id="1", name="redeem_points", arguments={"user_id": "u1", "points": 200})
        )
        assert observation.ok, observation
        _, solved = await score_final_state(pool, scenario, await session.state())
        _, nothing = await score_final_state(pool, scenario, scenario.initial_state)
    assert solved.state_reward == pytest.approx(1.0) and solved.success
    assert nothing.state_reward < 1.0 and not nothing.success


def test_a_non_empty_out_folder_is_refused_and_kept_as_it_was(tmp_path):
    env_file, scen_file = release_files(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    finished = harness(["import", "envscaler", "--environments", str(env_file), "--scenarios", str(scen_file),
                        "--out", str(out)])  # fmt: skip
    assert finished.code == 2, finished.stderr
    assert finished.stderr_lines == [f"error {out} already exists and is not empty; choose another --out"]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "keep me"
