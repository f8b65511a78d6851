"""What a result store counts for the run's summary is what a reader of its file gets."""

from __future__ import annotations

from pathlib import Path

from harness.redact import REDACTED, register_secret
from harness.results.metrics import read_results
from harness.results.store import ResultStore
from harness.run.progress import RunTally
from harness.schema import (
    Observation,
    TerminationReason,
    Trajectory,
)
from tests.support import held_records
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


def test_what_the_store_counts_is_what_reading_the_file_gives(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    earlier = ResultStore(path)
    earlier.append(trajectory("retried", "first", TerminationReason.INFRA_ERROR))
    earlier.append(trajectory("kept", "kept", TerminationReason.AGENT_DONE))
    earlier.close()
    register_secret(SECRET)

    tally = RunTally()
    store = ResultStore(path, listener=tally)
    store.append(trajectory("retried", "second", TerminationReason.AGENT_DONE))  # the last line of an episode wins
    store.append(trajectory("secret", f"the key is {SECRET}", TerminationReason.INFRA_ERROR))
    store.append(trajectory("too-deep", deep(150), TerminationReason.AGENT_DONE))  # stored as an infra error
    store.close()

    read = read_results(path)
    assert [record.episode_id for record in read] == ["retried", "kept", "secret", "too-deep"]
    assert list(store.episode_ids()) == ["retried", "kept", "secret", "too-deep"]
    assert read[0].steps[0].observation.content == "second"
    assert read[2].steps[0].observation.content == f"the key is {REDACTED}"
    assert read[3].termination is TerminationReason.INFRA_ERROR and read[3].steps == []
    assert tally.summary.run_summary() == held_records.summarize_run(read)
    # The cause is what the file says: the secret in the detail is redacted there, and so in the count.
    assert tally.infra_causes() == held_records.infra_error_causes(read)
    assert SECRET not in str(tally.infra_causes())
    assert store.finished() == {"retried", "kept", "secret", "too-deep"}
    assert store.finished(retry_errors=True) == {"retried", "kept"}
