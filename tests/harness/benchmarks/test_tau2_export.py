"""`harness export tau2` read by τ²-bench's own tools: runs of the airline library imported from the real wheel
(the oracle, a wrong agent, an agent whose calls all fail, runs cut at the step limit) and of telecom (dual control:
the oracle and its user, a user who never uses its phone, a user who breaks it) are exported, then
`tau2 evaluate-trajs` from the released package (a venv of its own, tests/support/tau2_venv.py) replays every
exported call, the user's included, and recomputes every reward and factor from the exported messages and tasks,
and upstream's ``Results`` model parses the file back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.rules.protocols import STOP
from tests.doubles.mock_openai import MockOpenAIServer, ReplayPolicy, SimulatedUserPolicy
from tests.harness.benchmarks.test_tau2_import import airline_library, tau2_wheel  # noqa: F401  (fixtures)
from tests.harness.benchmarks.test_tau2_rules import USER_OPENING, run_tau2
from tests.harness.benchmarks.test_tau2_telecom import telecom_library  # noqa: F401  (fixture)
from tests.support.cached_venv import CachedVenv
from tests.support.cli_process import harness
from tests.support.stored_runs import lines_of, mock_model_run
from tests.support.tau2_venv import tau2_venv

pytestmark = pytest.mark.tau2_venv

ROUNDTRIP = Path(__file__).resolve().parents[2] / "doubles" / "tau2_results_roundtrip.py"
# Airline tasks: 0 (no gold), 3 and 14 (read-only or mixed gold with information to communicate), 7 (several
# writes and a number to say), 11 (one write and a number), 13 (a transfer), 19 (one cancellation).
TASKS = ["0", "3", "7", "11", "13", "14", "19"]
CANCEL = {"name": "cancel_reservation", "arguments": {"reservation_id": "Z7GOZK"}}  # task 19's gold
MISSING_TOOL = {"name": "no_such_tool", "arguments": {}}
TELECOM_TASKS = [
    # The user's and the agent's calls alternate: user, agent, user, agent, user.
    "[service_issue]airplane_mode_on|overdue_bill_suspension[PERSONA:None]",
    # Three calls of the user's in a row, then the agent's, then the user's again.
    "[service_issue]airplane_mode_on|break_apn_settings|overdue_bill_suspension[PERSONA:None]",
    # The agent refuels data (a new draft bill), then the user turns roaming on.
    "[mobile_data_issue]data_usage_exceeded|user_abroad_roaming_enabled_off[PERSONA:Easy]",
    # ACTION and ENV_ASSERTION: the agent must transfer, the phone stays as it is.
    "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]",
]


@pytest.fixture(scope="session")
def tau2_official() -> CachedVenv:
    return tau2_venv()


def scenario_args(tasks: list[str]) -> list[str]:
    return [arg for task in tasks for arg in ("--scenario", f"tau2-airline-{task}")]


@pytest.fixture(scope="module")
def server() -> Iterator[MockOpenAIServer]:
    mock = MockOpenAIServer()
    mock.set_policy("tau2-user", SimulatedUserPolicy(turns=[USER_OPENING]))
    # A wrong agent: it cancels task 19's reservation whatever it is asked, then says a number.
    mock.set_policy("wrong", ReplayPolicy(actions=[CANCEL], final_text="Done: 4 dollars are refunded."))
    mock.set_policy("failing", ReplayPolicy(actions=[MISSING_TOOL] * 12, final_text="Done."))
    # A telecom user who turns airplane mode over on its phone, then stops.
    mock.set_policy("breaking-user", ReplayPolicy(actions=[{"name": "toggle_airplane_mode"}], final_text=STOP))
    with mock.running_in_thread():
        yield mock


@pytest.fixture(scope="module")
def exports(
    airline_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, Path]]:
    """Each case's run folder and its export."""
    root = tmp_path_factory.mktemp("tau2-export")
    cases: dict[str, tuple[str, list[str], list[str]]] = {
        "oracle": ("oracle", TASKS, ["--include-invalid"]),
        "wrong": ("wrong", TASKS, ["--include-invalid"]),
        "failing": ("failing", ["11", "19"], []),
        "cut": ("oracle", ["7", "14"], ["--max-steps", "4"]),
    }
    out: dict[str, tuple[Path, Path]] = {}
    for case, (agent, tasks, extra) in cases.items():
        run = root / case
        finished = run_tau2(airline_library, run, server, *scenario_args(tasks), *extra, agent=agent)
        assert finished.code == 0, finished.stderr
        exported = root / f"{case}.json"
        done = harness(["export", "tau2", str(run), "--out", str(exported)])
        assert done.code == 0, done.stderr
        out[case] = (run, exported)
    return out


def our_rewards(run: Path) -> dict[str, float]:
    return {line["episode_id"]: line["reward"]["state_reward"] for line in lines_of(run)}


def run_official(venv: CachedVenv, *args: str) -> subprocess.CompletedProcess[str]:
    # The cost map is read from the package: the machine may have no internet.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": ""}
    return subprocess.run(
        [str(venv.python), *args], capture_output=True, text=True, timeout=900, env=env, cwd=venv.root
    )


def rescored_by_upstream(
    venv: CachedVenv, exports: dict[str, tuple[Path, Path]], out: Path
) -> list[tuple[str, dict[str, Any], dict[str, Any], dict[str, float]]]:
    """Upstream's `tau2 evaluate-trajs` run on every export: per case, our file, upstream's re-scored file and the
    rewards stored in our run, with the simulations matched one to one."""
    files = [str(exported) for _, exported in exports.values()]
    finished = run_official(venv, "-m", "tau2.cli", "evaluate-trajs", *files, "-o", str(out))
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "All files processed successfully" in finished.stdout, finished.stdout
    cases = []
    for case, (run, exported) in exports.items():
        ours = orjson.loads(exported.read_bytes())
        theirs = orjson.loads((out / f"updated_{exported.name}").read_bytes())
        stored = our_rewards(run)
        assert len(theirs["simulations"]) == len(ours["simulations"]) == len(stored)
        assert [m["id"] for m in ours["simulations"]] == [u["id"] for u in theirs["simulations"]]
        cases.append((case, ours, theirs, stored))
    return cases


def test_tau2_evaluate_trajs_accepts_our_exports_and_computes_our_rewards(
    tau2_official: CachedVenv, exports: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    endings: dict[str, set[str]] = {}
    rewards: dict[str, list[float]] = {}
    for case, ours, theirs, stored in rescored_by_upstream(tau2_official, exports, tmp_path):
        for mine, upstream in zip(ours["simulations"], theirs["simulations"], strict=True):
            assert upstream["reward_info"]["reward"] == mine["reward_info"]["reward"] == stored[mine["id"]], (
                case,
                mine["task_id"],
                upstream["reward_info"],
            )
            if upstream["reward_info"]["reward_breakdown"]:
                assert upstream["reward_info"]["reward_breakdown"] == mine["reward_info"]["reward_breakdown"]
                assert upstream["reward_info"]["db_check"] == mine["reward_info"]["db_check"]
                assert [c["met"] for c in upstream["reward_info"]["communicate_checks"] or []] == [
                    c["met"] for c in mine["reward_info"]["communicate_checks"] or []
                ]
        endings[case] = {s["termination_reason"] for s in ours["simulations"]}
        rewards[case] = [s["reward_info"]["reward"] for s in ours["simulations"]]
    assert endings == {
        "oracle": {"user_stop"},
        "wrong": {"user_stop"},
        "failing": {"too_many_errors"},
        "cut": {"max_steps"},
    }
    assert set(rewards["oracle"]) == {1.0}
    # The wrong agent's cancellation is task 19's gold and a wrong write elsewhere: both outcomes are compared.
    assert set(rewards["wrong"]) == {0.0, 1.0}
    assert set(rewards["failing"]) == set(rewards["cut"]) == {0.0}


def test_upstreams_results_model_reads_back_what_we_wrote(
    tau2_official: CachedVenv, exports: dict[str, tuple[Path, Path]]
) -> None:
    files = [exports["oracle"][1], exports["wrong"][1], exports["failing"][1]]
    finished = run_official(tau2_official, str(ROUNDTRIP), *map(str, files))
    assert finished.returncode == 0, finished.stderr
    parsed: dict[str, Any] = json.loads(finished.stdout)
    for exported in files:
        ours = orjson.loads(exported.read_bytes())
        theirs = parsed[str(exported)]
        assert theirs["info"]["environment_info"]["domain_name"] == "airline"
        assert theirs["info"]["max_errors"] == 10
        assert set(theirs["tasks"]) == {s["task_id"] for s in ours["simulations"]}
        assert all(theirs["tasks"].values())  # every task kept its evaluation criteria
        for mine, upstream in zip(ours["simulations"], theirs["simulations"], strict=True):
            assert upstream["task_id"] == mine["task_id"]
            assert upstream["termination_reason"] == mine["termination_reason"]
            assert upstream["reward_info"]["reward"] == mine["reward_info"]["reward"]
            assert upstream["message_classes"] == [m["role"] for m in mine["messages"]]
            assert upstream["messages"][0] == {**upstream["messages"][0], "role": "assistant", "turn_idx": 0}
            for ours_message, their_message in zip(mine["messages"], upstream["messages"], strict=True):
                # Every field we wrote is read back as written (upstream adds its own fields, left empty).
                assert {key: their_message[key] for key in ours_message} == ours_message


def telecom_scenarios() -> list[str]:
    return [arg for task in TELECOM_TASKS for arg in ("--scenario", f"tau2-telecom-{task}")]


@pytest.fixture(scope="module")
def telecom_exports(
    telecom_library: Path,  # noqa: F811
    server: MockOpenAIServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, Path]]:
    """Telecom runs of the oracle agent with three users (the oracle's, one who only talks, one who breaks the
    phone), each run folder with its export."""
    root = tmp_path_factory.mktemp("tau2-telecom-export")
    models = root / "models.toml"
    models.write_text(
        "".join(
            f'[aliases.{alias}]\nmodel = "hosted_vllm/{policy}"\napi_base = "{server.base_url}"\n'
            for alias, policy in (("idle-user", "tau2-user"), ("breaking-user", "breaking-user"))
        )
    )
    out: dict[str, tuple[Path, Path]] = {}
    for case, user in (("oracle", "oracle-user"), ("idle-user", "idle-user"), ("breaking-user", "breaking-user")):
        run = root / case
        command = ["run", "--envs", str(telecom_library), "--out", str(run), "--rules", "tau2", "--mode", "conv"]
        command += ["--agent", "oracle", "--user-model", user, "--concurrency", "2", *telecom_scenarios()]
        finished = harness(command, {"HARNESS_MODELS_FILE": str(models)})
        assert finished.code == 0, finished.stderr
        exported = root / f"{case}.json"
        done = harness(["export", "tau2", str(run), "--out", str(exported)])
        assert done.code == 0, done.stderr
        out[case] = (run, exported)
    return out


def tool_calls_in_order(simulation: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["requestor"], c["name"]) for m in simulation["messages"] for c in m.get("tool_calls") or []]


def test_tau2_evaluate_trajs_replays_the_users_calls_of_telecom_exports_and_computes_our_rewards(
    tau2_official: CachedVenv, telecom_exports: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    rewards: dict[str, list[float]] = {}
    factors: set[tuple[str, float]] = set()
    for case, ours, theirs, stored in rescored_by_upstream(tau2_official, telecom_exports, tmp_path):
        tasks = {task["id"]: task for task in ours["tasks"]}
        assert len(ours["simulations"]) == len(TELECOM_TASKS)
        for mine, upstream in zip(ours["simulations"], theirs["simulations"], strict=True):
            mine_info, their_info = mine["reward_info"], upstream["reward_info"]
            where = (case, mine["task_id"], their_info)
            assert their_info["reward"] == mine_info["reward"] == stored[mine["id"]], where
            criteria = tasks[mine["task_id"]]["evaluation_criteria"]
            assert set(mine_info["reward_breakdown"]) == set(criteria["reward_basis"]), where
            assert their_info["reward_breakdown"] == mine_info["reward_breakdown"], where
            factors.update(mine_info["reward_breakdown"].items())
            # Each environment assertion, and each gold action where the basis counts them, as upstream found it.
            assert [c["met"] for c in their_info["env_assertions"]] == [c["met"] for c in mine_info["env_assertions"]]
            if "ACTION" in criteria["reward_basis"]:
                assert [c["action_match"] for c in their_info["action_checks"]] == [
                    c["action_match"] for c in mine_info["action_checks"]
                ], where
        rewards[case] = [s["reward_info"]["reward"] for s in ours["simulations"]]
    assert set(rewards["oracle"]) == {1.0}
    assert set(rewards["breaking-user"]) == {0.0}
    # Every factor is compared both ways: met and not met.
    assert factors == {("ENV_ASSERTION", 1.0), ("ENV_ASSERTION", 0.0), ("ACTION", 1.0), ("ACTION", 0.0)}


def test_a_telecom_export_holds_the_users_calls_where_the_user_made_them(
    tau2_official: CachedVenv, telecom_exports: dict[str, tuple[Path, Path]]
) -> None:
    oracle = telecom_exports["oracle"][1]
    ours = orjson.loads(oracle.read_bytes())
    tasks = {task["id"]: task for task in ours["tasks"]}
    for simulation in ours["simulations"]:
        gold = tasks[simulation["task_id"]]["evaluation_criteria"]["actions"]
        # The oracle and its user play the gold in upstream's order: the export keeps the two sides interleaved.
        assert tool_calls_in_order(simulation) == [(a["requestor"], a["name"]) for a in gold]
        messages = simulation["messages"]
        for index, message in enumerate(messages):
            if message["role"] == "user" and message.get("tool_calls"):
                answers = messages[index + 1 : index + 1 + len(message["tool_calls"])]
                assert [a["id"] for a in answers] == [c["id"] for c in message["tool_calls"]]
                assert {a["role"] for a in answers} == {"tool"} and {a["requestor"] for a in answers} == {"user"}
    breaking = orjson.loads(telecom_exports["breaking-user"][1].read_bytes())
    for simulation in breaking["simulations"]:
        assert tool_calls_in_order(simulation) == [("user", "toggle_airplane_mode")]
    finished = run_official(tau2_official, str(ROUNDTRIP), str(oracle))
    assert finished.returncode == 0, finished.stderr
    theirs = json.loads(finished.stdout)[str(oracle)]
    assert theirs["info"]["environment_info"]["domain_name"] == "telecom"
    for mine, upstream in zip(ours["simulations"], theirs["simulations"], strict=True):
        assert upstream["message_classes"] == [m["role"] for m in mine["messages"]]
        for ours_message, their_message in zip(mine["messages"], upstream["messages"], strict=True):
            assert {key: their_message[key] for key in ours_message} == ours_message


def test_a_telecom_run_that_does_not_place_its_users_calls_is_refused_in_one_line(
    telecom_exports: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """A run recorded before the user's steps carried their place in the transcript cannot be laid out."""
    run = tmp_path / "old"
    shutil.copytree(telecom_exports["oracle"][0], run)
    records = [orjson.loads(line) for line in (run / "results.jsonl").read_bytes().splitlines()]
    for record in records:
        for step in record.get("user_steps", []):
            del step["before_message"]
    (run / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    out = tmp_path / "results.json"
    finished = harness(["export", "tau2", str(run), "--out", str(out)])
    assert finished.code == 2
    (line,) = finished.stderr_lines
    assert "does not record where its user's calls were made" in line and "run it again" in line
    assert not out.exists()


def test_a_run_of_another_library_is_refused_in_one_line(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = mock_model_run(tmp_path_factory.mktemp("not-tau2"), ["banking-001"], trials=1)
    out = run.parent / "results.json"
    finished = harness(["export", "tau2", str(run), "--out", str(out)])
    assert finished.code == 2
    (line,) = finished.stderr_lines
    assert "is not a run of a τ²-bench library" in line
    assert not out.exists()
