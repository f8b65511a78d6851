"""`harness export tau2` read by τ²-bench's own tools: runs of the airline library imported from the real wheel
(the oracle, a wrong agent, an agent whose calls all fail, runs cut at the step limit) are exported, then
`tau2 evaluate-trajs` from the released package (a venv of its own, tests/support/tau2_venv.py) recomputes every
reward from the exported messages and tasks, and upstream's ``Results`` model parses the file back."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.doubles.mock_openai import MockOpenAIServer, ReplayPolicy, SimulatedUserPolicy
from tests.harness.benchmarks.test_tau2_import import airline_library, tau2_wheel  # noqa: F401  (fixtures)
from tests.harness.benchmarks.test_tau2_rules import USER_OPENING, run_tau2
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


def test_tau2_evaluate_trajs_accepts_our_exports_and_computes_our_rewards(
    tau2_official: CachedVenv, exports: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    files = [str(exported) for _, exported in exports.values()]
    finished = run_official(tau2_official, "-m", "tau2.cli", "evaluate-trajs", *files, "-o", str(tmp_path))
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "All files processed successfully" in finished.stdout, finished.stdout
    endings: dict[str, set[str]] = {}
    rewards: dict[str, list[float]] = {}
    for case, (run, exported) in exports.items():
        ours = orjson.loads(exported.read_bytes())
        theirs = orjson.loads((tmp_path / f"updated_{exported.name}").read_bytes())
        stored = our_rewards(run)
        assert len(theirs["simulations"]) == len(ours["simulations"]) == len(stored)
        for mine, upstream in zip(ours["simulations"], theirs["simulations"], strict=True):
            assert mine["id"] == upstream["id"]
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


def test_a_run_of_another_library_is_refused_in_one_line(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = mock_model_run(tmp_path_factory.mktemp("not-tau2"), ["banking-001"], trials=1)
    out = run.parent / "results.json"
    finished = harness(["export", "tau2", str(run), "--out", str(out)])
    assert finished.code == 2
    (line,) = finished.stderr_lines
    assert "is not a run of a τ²-bench library" in line
    assert not out.exists()
