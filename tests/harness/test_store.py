"""The records a result store holds for the run's summary are the ones a reader of its file gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.redact import REDACTED, register_secret
from harness.results.metrics import read_results
from harness.results.store import ResultStore
from harness.schema import (
    Observation,
    TerminationReason,
    Trajectory,
)
from tests.support.trajectories import one_call_trajectory

SECRET = "sk-store-test-0d1e5c7a9b"


def trajectory(episode_id: str, content: object, termination: TerminationReason) -> Trajectory:
    observation = Observation(tool_call_id="c1", name="look", content=content)
    detail = f"ended with {content!r}"[:200]
    return one_call_trajectory(episode_id, observation, termination=termination, termination_detail=detail)


def deep(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_the_records_kept_are_what_reading_the_file_gives(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    earlier = ResultStore(path)
    earlier.append(trajectory("retried", "first", TerminationReason.INFRA_ERROR))
    earlier.append(trajectory("kept", "kept", TerminationReason.AGENT_DONE))
    earlier.close()
    register_secret(SECRET)

    store = ResultStore(path, keep_records=True)
    store.append(trajectory("retried", "second", TerminationReason.AGENT_DONE))  # the last line of an episode wins
    store.append(trajectory("secret", f"the key is {SECRET}", TerminationReason.AGENT_DONE))
    store.append(trajectory("too-deep", deep(150), TerminationReason.AGENT_DONE))  # stored as an infra error
    store.close()

    kept = [record.model_dump(mode="json") for record in store.records()]
    read = [record.model_dump(mode="json") for record in read_results(path)]
    assert kept == read
    assert [record["episode_id"] for record in kept] == ["retried", "kept", "secret", "too-deep"]
    assert kept[0]["steps"][0]["observation"]["content"] == "second"
    assert kept[2]["steps"][0]["observation"]["content"] == f"the key is {REDACTED}"
    assert kept[3]["termination"] == "infra_error" and kept[3]["steps"] == []


def test_a_store_opened_without_keeping_records_says_so(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    with pytest.raises(RuntimeError, match="keep_records"):
        store.records()
