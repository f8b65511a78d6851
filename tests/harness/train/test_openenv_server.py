"""``harness serve ENV --protocol openenv`` driven by OpenEnv 0.10's own client (``MCPToolClient``), installed in
a venv of its own; the server is the project's CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.sync.client import connect

from harness.library import load_library
from tests.support.cli_process import REPO, harness
from tests.support.jail_library import hostile_scenario, write_hostile_library
from tests.support.openenv_client import ServedEnvironment, serve_openenv
from tests.support.raising_library import ENV_ID as ENV_ID_RAISING
from tests.support.raising_library import RAISING_TOOLS, TOOLS_SCENARIO, write_raising_library

SEED = REPO / "datasets" / "seed"
ENV_ID = "banking"
SCENARIO_ID = "banking-001"
ORACLE_REPLY = "I have completed your request."


@pytest.fixture(scope="module")
def banking(openenv_python: Path) -> Iterator[ServedEnvironment]:
    with serve_openenv(openenv_python, ENV_ID, "--envs", str(SEED), "--max-sessions", "4") as served:
        yield served


def _seed_scenario(scenario_id: str = SCENARIO_ID) -> Any:
    return next(s for s in load_library(str(SEED)).scenarios if s.id == scenario_id)


def _oracle_calls(scenario: Any) -> list[dict[str, Any]]:
    return [{"op": "call", "name": a.name, "arguments": dict(a.arguments)} for a in scenario.reference_actions]


def test_the_client_lists_the_environment_tools_as_declared_and_the_finish_tool(banking: ServedEnvironment):
    environment = load_library(str(SEED)).environments[ENV_ID]
    over_http, over_websocket = banking.drive([(0, {"op": "list_tools"}), (0, {"op": "list_tools_step"})])

    declared = {spec.function.name: spec.function.parameters for spec in environment.tools}
    assert [t["name"] for t in over_http] == [*declared, "finish"]
    assert {t["name"]: t["input_schema"] for t in over_http if t["name"] != "finish"} == declared
    assert over_http[-1]["input_schema"]["properties"] == {
        "answer": {"type": "string", "description": "Your final message to the user."}
    }
    assert [t["name"] for t in over_websocket["observation"]["tools"]] == [*declared, "finish"]


def test_an_episode_driven_by_mcptoolclient_scores_what_the_oracle_scores(banking: ServedEnvironment, tmp_path: Path):
    scenario = _seed_scenario()
    ran = harness(["run", "--envs", str(SEED), "--scenario", SCENARIO_ID, "--agent", "oracle", "--out", str(tmp_path)])
    assert ran.code == 0, ran.stderr
    (oracle,) = [orjson.loads(line) for line in (tmp_path / "results.jsonl").read_bytes().splitlines()]
    oracle_reward = (
        oracle["reward"]["composite"] if oracle["reward"]["composite"] is not None else oracle["reward"]["state_reward"]
    )

    reset = {"op": "reset", "kwargs": {"scenario_id": SCENARIO_ID, "seed": 0, "episode_id": "ep-1"}}
    finish = {"op": "step", "name": "finish", "arguments": {"answer": scenario.reference_reply or ORACLE_REPLY}}
    calls = _oracle_calls(scenario)
    report = banking.drive(
        [
            (0, reset),
            *[(0, call) for call in calls],
            (0, {"op": "state"}),
            (0, finish),
            (0, {"op": "state"}),
            (1, reset),
            (1, finish),
        ]
    )

    opened, *answers = report[: 1 + len(calls)]
    during, finished, after = report[1 + len(calls) : 4 + len(calls)]
    idle_opened, idle_finished = report[4 + len(calls) :]
    assert opened["done"] is False and opened["reward"] is None
    assert opened["observation"]["task"] == scenario.task
    assert opened["observation"]["scenario_id"] == SCENARIO_ID
    assert all("error" not in answer for answer in answers), answers
    assert "Moved 500.00 from AC-1002 to AC-1001" in answers[-1]["result"]
    assert during == {"episode_id": "ep-1", "step_count": len(calls)}
    assert finished["done"] is True
    assert finished["reward"] == pytest.approx(oracle_reward)
    breakdown = finished["observation"]["metadata"]["reward_breakdown"]
    assert (breakdown["checks_passed"], breakdown["checks_total"]) == (
        oracle["reward"]["checks_passed"],
        oracle["reward"]["checks_total"],
    )
    assert finished["observation"]["metadata"]["termination"] == "agent_done"
    assert after["step_count"] == len(calls) + 1
    # The same scenario finished without its calls scores less: the reward reads the state the calls changed.
    assert idle_opened["done"] is False
    assert idle_finished["done"] is True and idle_finished["reward"] < finished["reward"]


def test_a_finished_episode_takes_no_more_calls_until_the_next_reset(banking: ServedEnvironment):
    reset = {"op": "reset", "kwargs": {"scenario_id": SCENARIO_ID}}
    read = {"op": "call", "name": "get_account", "arguments": {"account_id": "AC-1002"}}
    report = banking.drive(
        [
            (0, {"op": "call", **read}),
            (0, reset),
            (0, {"op": "step", "name": "finish"}),
            (0, read),
            (0, reset),
            (0, read),
        ]
    )
    before_reset, _, _, after_finish, _, after_next_reset = report
    assert "reset" in before_reset["error"]
    assert "the episode has ended (agent_done)" in after_finish["error"]
    assert "AC-1002" in after_next_reset["result"]


def test_two_concurrent_sessions_do_not_see_each_others_state(banking: ServedEnvironment):
    reset = {"op": "reset", "kwargs": {"scenario_id": SCENARIO_ID}}
    transfer = {
        "op": "call",
        "name": "transfer_between_accounts",
        "arguments": {"from_account_id": "AC-1002", "to_account_id": "AC-1001", "amount": 500.0},
    }
    read = {"op": "call", "name": "get_account", "arguments": {"account_id": "AC-1002"}}
    report = banking.drive(
        [(0, reset), (1, reset), (0, transfer), (0, read), (1, read), (0, {"op": "state"}), (1, {"op": "state"})]
    )

    first_balance = json.loads(report[3]["result"])["data"]["balance"]
    second_balance = json.loads(report[4]["result"])["data"]["balance"]
    assert second_balance - first_balance == pytest.approx(500.0)
    assert report[5]["step_count"] == 2 and report[6]["step_count"] == 1
    assert report[5]["episode_id"] != report[6]["episode_id"]


def test_max_sessions_refuses_a_second_concurrent_session_and_frees_the_slot_on_close(openenv_python: Path):
    with serve_openenv(openenv_python, ENV_ID, "--envs", str(SEED), "--max-sessions", "1") as served:
        reset = {"op": "reset", "kwargs": {"scenario_id": SCENARIO_ID}}
        report = served.drive(
            [
                (0, {"op": "connect"}),
                (1, {"op": "connect"}),
                (0, reset),
                (0, {"op": "close"}),
                (2, {"op": "connect"}),
                (2, reset),
            ]
        )
        first, refused, kept, _, later, later_reset = report
        assert first == {"connected": True}
        assert "server at capacity: 1 of 1 sessions in use" in refused["error"]
        assert kept["done"] is False and kept["observation"]["scenario_id"] == SCENARIO_ID
        assert later == {"connected": True}
        assert later_reset["observation"]["scenario_id"] == SCENARIO_ID
        assert served.alive


def test_bad_requests_get_clear_errors_and_the_server_keeps_serving(banking: ServedEnvironment):
    report = banking.drive(
        [
            (0, {"op": "reset", "kwargs": {"scenario_id": "no-such-scenario"}}),
            (0, {"op": "reset", "kwargs": {"scenario_id": SCENARIO_ID}}),
            (0, {"op": "call", "name": "get_account", "arguments": {"account": "AC-1002"}}),
            (0, {"op": "step", "name": "get_account", "arguments": {"account_id": 1002}}),
            (0, {"op": "step", "name": "no_such_tool", "arguments": {}}),
            (0, {"op": "call", "name": "get_account", "arguments": {"account_id": "AC-1002"}}),
        ]
    )
    unknown_scenario, opened, bad_call, bad_step, unknown_tool, good_call = report
    assert "no scenario 'no-such-scenario' for environment 'banking'" in unknown_scenario["error"]
    assert opened["done"] is False
    assert "get_account" in bad_call["error"] and "account" in bad_call["error"]
    assert bad_step["done"] is False
    assert bad_step["observation"]["error"]["error_type"] == "invalid_args"
    assert unknown_tool["observation"]["error"]["error_type"] == "tool_not_found"
    assert "AC-1002" in good_call["result"]

    websocket_url = banking.base_url.replace("http://", "ws://") + "/ws"
    with connect(websocket_url) as websocket:
        answers = []
        for raw in [
            "{not json",
            json.dumps({"type": "dance"}),
            json.dumps({"type": "step", "data": {"type": "call_tool"}}),
        ]:
            websocket.send(raw)
            answers.append(json.loads(websocket.recv()))
        websocket.send(json.dumps({"type": "reset", "data": {"scenario_id": SCENARIO_ID}}))
        recovered = json.loads(websocket.recv())
    assert [a["type"] for a in answers] == ["error"] * 3
    assert [a["data"]["code"] for a in answers] == ["INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR"]
    assert "tool_name" in answers[2]["data"]["message"]
    assert recovered["type"] == "observation" and recovered["data"]["observation"]["scenario_id"] == SCENARIO_ID

    garbage = httpx.post(f"{banking.base_url}/mcp", content=b"{oops", timeout=30).json()
    unknown_method = httpx.post(
        f"{banking.base_url}/mcp", json={"jsonrpc": "2.0", "method": "x/y", "id": 7}, timeout=30
    ).json()
    assert garbage["error"]["code"] == -32700
    assert unknown_method == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "Method not found: x/y"}}
    assert httpx.get(f"{banking.base_url}/health", timeout=30).json() == {"status": "healthy"}
    assert banking.alive


def test_the_task_api_lists_the_offered_scenarios_in_one_split(banking: ServedEnvironment):
    scenarios = load_library(str(SEED)).scenarios_for(ENV_ID)
    splits = httpx.get(f"{banking.base_url}/{ENV_ID}/splits", timeout=30).json()
    tasks = httpx.post(f"{banking.base_url}/{ENV_ID}/tasks", json={"split": "test"}, timeout=30).json()
    second = httpx.post(f"{banking.base_url}/{ENV_ID}/task", json={"split": "test", "index": 1}, timeout=30).json()
    out_of_range = httpx.post(f"{banking.base_url}/{ENV_ID}/task", json={"split": "test", "index": 999}, timeout=30)
    other_env = httpx.get(f"{banking.base_url}/airline/splits", timeout=30)

    assert splits == [{"name": "test", "type": "test"}]
    assert [t["scenario_id"] for t in tasks["tasks"]] == [s.id for s in scenarios]
    assert second["task"]["task"] == scenarios[1].task
    assert out_of_range.status_code == 400
    assert other_env.status_code == 404


def test_a_hostile_environment_driven_through_the_server_stays_jailed(openenv_python: Path, tmp_path: Path):
    library = write_hostile_library(tmp_path / "library", [hostile_scenario([("bump", {})])])
    outside = tmp_path / "outside"
    outside.mkdir()
    attacks = [("write_file", outside / "written"), ("shell", outside / "shelled"), ("spawn", outside / "spawned")]
    with serve_openenv(openenv_python, "hostile", "--envs", str(library)) as served:
        report = served.drive(
            [(0, {"op": "reset", "kwargs": {"scenario_id": "hostile-1"}})]
            + [(0, {"op": "call", "name": tool, "arguments": {"path": str(path)}}) for tool, path in attacks]
            + [
                (0, {"op": "call", "name": "bump"}),
                (0, {"op": "step", "name": "finish", "arguments": {"answer": "done"}}),
            ]
        )
        assert served.alive
    for _, path in attacks:
        assert not path.exists(), path
    assert list(outside.iterdir()) == []
    finished = report[-1]
    assert finished["done"] is True
    breakdown = finished["observation"]["metadata"]["reward_breakdown"]
    assert (breakdown["checks_passed"], breakdown["checks_total"]) == (1, 2)
    assert finished["reward"] == pytest.approx(breakdown["composite"] if breakdown["composite"] is not None else 0.5)


def test_base_exceptions_of_the_environment_are_its_own_over_openenv(openenv_python: Path, tmp_path: Path):
    library = write_raising_library(tmp_path / "library")
    with serve_openenv(openenv_python, ENV_ID_RAISING, "--envs", str(library), "--include-invalid") as served:
        report = served.drive(
            [(0, {"op": "reset", "kwargs": {"scenario_id": TOOLS_SCENARIO}})]
            + [(0, {"op": "call", "name": name}) for name in RAISING_TOOLS]
            + [
                (0, {"op": "call", "name": "complete"}),
                (0, {"op": "step", "name": "finish", "arguments": {"answer": "done"}}),
                (1, {"op": "reset", "kwargs": {"scenario_id": "raises-on-load-keyboard-interrupt"}}),
            ]
        )
        assert served.alive
    opened, *answers, completed, finished, not_loaded = report
    assert opened["done"] is False
    for answer, error in zip(answers, RAISING_TOOLS.values(), strict=True):
        result = json.loads(answer["result"])  # a tool result, not a failed request
        assert (result["success"], result["error_type"]) == (False, "tool_exception") and error in result["error"]
    assert json.loads(completed["result"]) == {"success": True, "data": 4}  # the session went on in one piece
    assert finished["done"] is True
    breakdown = finished["observation"]["metadata"]["reward_breakdown"]
    assert (breakdown["checks_passed"], breakdown["checks_total"]) == (2, 6)
    assert not_loaded["done"] is True and not_loaded["reward"] == 0.0, not_loaded
    metadata = not_loaded["observation"]["metadata"]
    assert metadata["termination"] == "environment_error", metadata
    assert "KeyboardInterrupt: interrupted" in metadata["termination_detail"]


def test_serve_refuses_a_max_sessions_below_one():
    refused = harness(["serve", ENV_ID, "--envs", str(SEED), "--protocol", "openenv", "--max-sessions", "0"])
    assert refused.code == 2
    assert refused.stderr_lines == [
        line for line in refused.stderr_lines if "--max-sessions must be at least 1, not 0" in line
    ]
    assert len(refused.stderr_lines) == 1


MANIFEST_PROBE = """
import json, sys
from pathlib import Path
from openenv.validation.signature import detect_signature
from openenv.validation.parsers import openenv_yaml

root = Path(sys.argv[1])
parser = next(
    value for value in vars(openenv_yaml).values()
    if isinstance(value, type) and value.__module__ == openenv_yaml.__name__ and hasattr(value, "parse")
)
manifest = parser().parse(root)
print(json.dumps({"signature": detect_signature(root).name, "manifest": manifest.model_dump(mode="json")}))
"""


def test_openenv_tooling_reads_the_manifest(openenv_python: Path):
    ran = subprocess.run([str(openenv_python), "-c", MANIFEST_PROBE, str(REPO)], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    read = json.loads(ran.stdout)
    assert read["signature"] == "OPENENV_SERVED"
    assert read["manifest"]["name"] == "envharness"
    assert read["manifest"]["capabilities"]["task_api"] is True
    assert read["manifest"]["capabilities"]["verifier"]["kind"] == "reward_channel"
