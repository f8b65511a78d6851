"""Many OpenEnv sessions at once: OpenEnv 0.10's own ``MCPToolClient`` (in its venv) drives concurrent sessions over
``/ws`` of one ``harness serve --protocol openenv`` (the CLI in a subprocess), the way a generation batch does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.library import load_library
from harness.schema import Scenario
from tests.support.cli_process import REPO, harness
from tests.support.openenv_client import ServedEnvironment, serve_openenv

SEED = REPO / "datasets" / "seed"
ENV_ID = "banking"
ORACLE_REPLY = "I have completed your request."
# Scenarios whose reference actions write, some repeated; banking-001 and banking-010 move money between the
# same two accounts, so any state shared between sessions would show in their balances and rewards.
BATCH = [
    "banking-001",
    "banking-010",
    "banking-004",
    "banking-001",
    "banking-009",
    "banking-010",
    "banking-008",
    "banking-001",
]


@pytest.fixture(scope="module")
def wide(openenv_python: Path) -> Iterator[ServedEnvironment]:
    with serve_openenv(openenv_python, ENV_ID, "--envs", str(SEED), "--max-sessions", "64") as served:
        yield served


@pytest.fixture(scope="module")
def scenarios() -> dict[str, Scenario]:
    return {s.id: s for s in load_library(str(SEED)).scenarios_for(ENV_ID)}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``harness run --agent oracle`` on every scenario of the batch: its trajectory per scenario id."""
    out = tmp_path_factory.mktemp("oracle")
    chosen = [arg for scenario_id in sorted(set(BATCH)) for arg in ("--scenario", scenario_id)]
    ran = harness(["run", "--envs", str(SEED), *chosen, "--agent", "oracle", "--out", str(out)])
    assert ran.code == 0, ran.stderr
    trajectories = [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]
    return {t["scenario_id"]: t for t in trajectories}


def _reward(breakdown: dict[str, Any]) -> float:
    return float(breakdown["composite"] if breakdown["composite"] is not None else breakdown["state_reward"])


def _tool_texts(trajectory: dict[str, Any]) -> list[str]:
    """What each of the oracle's tool calls answered, as the agent read it."""
    return [str(message["content"]) for message in trajectory["messages"] if message["role"] == "tool"]


def _step(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"op": "step", "name": name, "arguments": arguments}


def _results(session: list[dict[str, Any]]) -> list[Any]:
    assert all("error" not in entry for entry in session), session
    return [entry["result"] for entry in session]


def test_eight_concurrent_sessions_keep_their_own_state_and_score_what_the_oracle_scores(
    wide: ServedEnvironment, scenarios: dict[str, Scenario], oracle: dict[str, Any]
):
    programs = [
        [
            {"op": "reset", "kwargs": {"scenario_id": scenario_id, "seed": 0, "episode_id": f"batch-{index}"}},
            *[_step(action.name, dict(action.arguments)) for action in scenarios[scenario_id].reference_actions],
            {"op": "state"},
            _step("finish", {"answer": scenarios[scenario_id].reference_reply or ORACLE_REPLY}),
        ]
        for index, scenario_id in enumerate(BATCH)
    ]

    report = wide.drive_concurrently(programs)

    assert len(report["sessions"]) == len(BATCH)
    # Every session had an operation awaiting the server at the same moment: the sessions really overlapped.
    assert report["max_in_flight"] == len(BATCH)
    for index, (scenario_id, session) in enumerate(zip(BATCH, report["sessions"], strict=True)):
        calls = len(scenarios[scenario_id].reference_actions)
        opened, *replies, state, finished = _results(session)
        assert opened["observation"]["scenario_id"] == scenario_id
        assert opened["observation"]["episode_id"] == f"batch-{index}"
        # Each call answered what it answered the oracle alone: the reads saw no other session's transfers.
        assert [reply["observation"]["error"] for reply in replies] == [None] * calls
        assert [reply["observation"]["result"] for reply in replies] == _tool_texts(oracle[scenario_id])
        assert state == {"episode_id": f"batch-{index}", "step_count": calls}
        # The checks read this session's final state in the jail: any write of another session would fail one.
        expected = oracle[scenario_id]["reward"]
        breakdown = finished["observation"]["metadata"]["reward_breakdown"]
        assert finished["done"] is True
        assert finished["reward"] == pytest.approx(_reward(expected)), (scenario_id, index)
        assert (breakdown["checks_passed"], breakdown["checks_total"]) == (
            expected["checks_passed"],
            expected["checks_total"],
        )
    assert wide.alive


def test_a_generation_batch_of_64_sessions_runs_at_once_without_a_failure(
    wide: ServedEnvironment, scenarios: dict[str, Scenario]
):
    scenario = scenarios["banking-001"]
    calls = [_step(action.name, dict(action.arguments)) for action in scenario.reference_actions]
    programs = [
        [
            {"op": "reset", "kwargs": {"scenario_id": scenario.id, "episode_id": f"wide-{index}"}},
            *calls,
            _step("get_account", {"account_id": "AC-1002"}),
            {"op": "state"},
            _step("finish", {"answer": ORACLE_REPLY}),
        ]
        for index in range(64)
    ]

    report = wide.drive_concurrently(programs)

    assert len(report["sessions"]) == 64
    assert report["max_in_flight"] > 1
    for index, session in enumerate(report["sessions"]):
        opened, *replies, read, state, finished = _results(session)
        assert opened["observation"]["episode_id"] == f"wide-{index}"
        assert all(reply["observation"]["error"] is None for reply in replies)
        # One transfer of 500 from 12000 in every session: 64 sharing one state would have drained the account.
        assert json.loads(read["observation"]["result"])["data"]["balance"] == pytest.approx(11500.0)
        assert state == {"episode_id": f"wide-{index}", "step_count": len(calls) + 1}
        breakdown = finished["observation"]["metadata"]["reward_breakdown"]
        assert finished["done"] is True
        assert breakdown["checks_passed"] == breakdown["checks_total"] > 0
    assert wide.alive
