"""``--concurrency`` is the episodes in flight and ``--max-requests`` the model requests in flight per endpoint: two
settings, each honoured on its own, seen from the model server's side, through the real CLI. Neither feeds an
episode's id, so a run's ids do not depend on them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.doubles.mock_openai import MockOpenAIServer
from tests.doubles.seed_replay import alias_file, register_scenarios
from tests.support.cli_process import harness

EPISODES = 12


@pytest.fixture
def slow_model() -> Iterator[MockOpenAIServer]:
    """The mock model replaying the seed library, each answer held long enough for episodes to overlap."""
    server = MockOpenAIServer(record_bodies=False, latency=0.3)
    register_scenarios(server)
    with server.running_in_thread():
        yield server


def run_against(server: MockOpenAIServer, out: Path, *flags: str) -> list[str]:
    """Run ``EPISODES`` episodes on the mock model with ``flags``; the episode ids of the results, in order."""
    server.reset_stats()
    models = alias_file(out.parent / f"{out.name}-models.toml", server.base_url)
    args = ["run", "--model", "mock-agent", "--limit", str(EPISODES), *flags, "--out", str(out)]
    done = harness(args, env={"HARNESS_MODELS_FILE": str(models)})
    assert done.code == 0, done.stderr
    records = [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]
    assert len(records) == EPISODES
    # every episode was played to its end by the model (none stopped by an error)
    assert {record["termination"] for record in records} == {"agent_done"}
    return sorted(record["episode_id"] for record in records)


def test_the_request_cap_holds_below_the_episodes_in_flight(slow_model, tmp_path):
    run_against(slow_model, tmp_path / "capped", "--concurrency", "6", "--max-requests", "2")
    # Six episodes were free to run, yet the server never had more than two requests at once; and it had two, so
    # the cap, not the episodes, was what held them.
    assert slow_model.max_in_flight == 2


def test_concurrency_bounds_the_requests_when_no_cap_is_set(slow_model, tmp_path):
    run_against(slow_model, tmp_path / "uncapped", "--concurrency", "3")
    # Each episode waits for one answer at a time: three episodes in flight, three requests at most, and three seen
    # (before the request cap was its own setting, a --concurrency of 3 was also the cap; now it is only episodes).
    assert slow_model.max_in_flight == 3


def test_neither_setting_changes_the_episode_ids(slow_model, tmp_path):
    capped = run_against(slow_model, tmp_path / "capped", "--concurrency", "6", "--max-requests", "1")
    assert slow_model.max_in_flight == 1
    default = run_against(slow_model, tmp_path / "default")
    assert capped == default
