"""``--cost-limit`` through the real command line against the mock model with prices set per alias: no episode
starts once the recorded spend reaches the limit, the exit status says the work is not done, ``--resume`` with a
higher limit finishes it, and a model with no price is reported as unpriced, never as $0."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.doubles.mock_openai import MockOpenAIServer
from tests.doubles.seed_replay import register_scenarios
from tests.support.cli_process import Finished, harness
from tests.support.stored_runs import lines_of

# $0.0001 per token: an episode of the mock model costs some tens of cents.
PRICED = "input_usd_per_million = 100.0\noutput_usd_per_million = 100.0\n"
ENVIRONMENT = "banking"


def cost_of(line: dict) -> float:
    return math.fsum(usage["cost_usd"] for usage in line["usage"].values())


def requests_of(line: dict) -> int:
    return sum(usage["requests"] for usage in line["usage"].values())


@pytest.fixture
def server():
    mock = MockOpenAIServer(record_bodies=False)
    register_scenarios(mock)
    with mock.running_in_thread():
        yield mock


def models_file(tmp_path: Path, server: MockOpenAIServer, *, priced: bool) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(
        f'[aliases.mock-agent]\nmodel = "hosted_vllm/replay"\napi_base = "{server.base_url}"\n'
        + (PRICED if priced else "")
    )
    return path


def run(models: Path, out: Path, *extra: str) -> Finished:
    args = ["run", "--model", "mock-agent", "--env", ENVIRONMENT, "--concurrency", "1", "--out", str(out), *extra]
    return harness(args, env={"HARNESS_MODELS_FILE": str(models)})


def test_the_limit_stops_new_episodes_and_resume_with_a_higher_one_finishes(server, tmp_path):
    models = models_file(tmp_path, server, priced=True)
    out = tmp_path / "run"
    limit = 1.0
    stopped = run(models, out, "--cost-limit", str(limit))
    assert stopped.code == 3, stopped.stderr
    assert "stopped by --cost-limit $1.0000" in stopped.last_line and "not started" in stopped.last_line
    lines = lines_of(out)
    planned = 12
    assert 2 <= len(lines) < planned
    costs = [cost_of(line) for line in lines]
    assert all(cost > 0 for cost in costs)
    # One episode at a time: each started while the spend was below the limit, and the last one crossed it.
    assert math.fsum(costs[:-1]) < limit <= math.fsum(costs)
    # Counted at the server: every chat request belongs to a recorded episode (the probe is not a chat request).
    assert len(server.chat_requests()) == sum(requests_of(line) for line in lines)

    resumed = run(models, out, "--cost-limit", "1000", "--resume")
    assert resumed.code == 0, resumed.stderr
    ids = [line["episode_id"] for line in lines_of(out)]
    assert len(ids) == len(set(ids)) == planned


def test_a_limit_already_spent_starts_nothing(server, tmp_path):
    models = models_file(tmp_path, server, priced=True)
    out = tmp_path / "run"
    assert run(models, out, "--cost-limit", "0.5").code == 3
    recorded = len(lines_of(out))
    requests = len(server.chat_requests())
    again = run(models, out, "--cost-limit", "0.2", "--resume")
    assert again.code == 2
    assert any("is already reached" in line and "nothing was started" in line for line in again.stderr_lines)
    assert len(lines_of(out)) == recorded and len(server.chat_requests()) == requests


def test_a_limit_on_an_unpriced_model_is_refused_and_its_cost_shown_as_unpriced(server, tmp_path):
    models = models_file(tmp_path, server, priced=False)
    refused = run(models, tmp_path / "refused", "--cost-limit", "5")
    assert refused.code == 2
    assert any("'mock-agent' has none" in line for line in refused.stderr_lines)
    assert not (tmp_path / "refused" / "results.jsonl").exists()

    ran = run(models, tmp_path / "run", "--limit", "2")
    assert ran.code == 0, ran.stderr
    assert "unpriced" in ran.stdout
    lines = lines_of(tmp_path / "run")
    assert all(line["usage"]["agent"]["unpriced_requests"] == requests_of(line) > 0 for line in lines)
    assert all(cost_of(line) == 0.0 for line in lines)
