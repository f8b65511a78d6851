"""Running tallies give the summary, the causes and the spend that the harness computed from the whole list of
records while it held them (``tests/support/held_records.py``), byte for byte: on random runs with retries,
infrastructure and environment failures, unscored episodes, versions and costs that do not add up exactly in
floating point, whether the records come all at once, are read from a file or are appended and replaced; and a
store holds no record while it counts them."""

from __future__ import annotations

import gc
import json
import math
import random
import tracemalloc
from pathlib import Path

import pytest

from harness.exact_sum import ExactSum
from harness.results.metrics import read_results
from harness.results.store import ResultStore
from harness.results.tally import summarize, summarize_overall, summarize_run
from harness.run.progress import RunTally
from harness.schema import (
    Failure,
    FailureKind,
    FailureParty,
    RecordVersions,
    TerminationReason,
    Trajectory,
    Usage,
)
from tests.support import held_records
from tests.support.leaderboard_runs import make_trajectory, write_sample_runs

DETAILS = ["model endpoint timed out", "sandbox worker died\nTraceback ...", "", "zygote lost", "class raised"]


def random_trajectory(rng: random.Random, episode_id: str) -> Trajectory:
    termination = rng.choice(list(TerminationReason))
    state_reward = rng.choice([None, 0.0, 1.0, 0.25, 1 / 3, 2 / 3, 0.1, rng.random()])
    trajectory = make_trajectory(
        episode_id,
        scenario_id=f"s{rng.randrange(5)}",
        environment_id=rng.choice(["retail_orders", "airline_booking", "bank"]),
        mode=rng.choice(["nonconv", "conv"]),
        trial=rng.randrange(4),
        model=rng.choice(["model-a", "model-b"]),
        state_reward=state_reward,
        success=None if state_reward is None else rng.random() < 0.5,
        delta_reward=rng.choice([None, 0.0, 0.5, 1 / 7, rng.random()]),
        termination=termination,
        cost_usd=rng.choice([0.0, 0.1, 0.2, 0.3, 1e-9, rng.random() * 1e-3, 12345.678]),
        prompt_tokens=rng.randrange(5000),
        completion_tokens=rng.randrange(500),
        tool_calls=rng.randrange(4),
    )
    update: dict[str, object] = {"termination_detail": rng.choice(DETAILS) or None}
    if rng.random() < 0.5:
        update["usage"] = {
            **trajectory.usage,
            "user": Usage(
                requests=2, prompt_tokens=7, cost_usd=rng.random() * 0.01, unpriced_requests=rng.randrange(2)
            ),
        }
    if termination in (TerminationReason.INFRA_ERROR, TerminationReason.ENVIRONMENT_ERROR):
        update["failure"] = Failure(
            at_fault=rng.choice(list(FailureParty)),
            detail="failed",
            kind=rng.choice([None, *FailureKind]),
        )
    if rng.random() < 0.7:
        update["versions"] = RecordVersions(
            environment=rng.choice([None, "e1", "e2"]),
            scenario="sc",
            checks=rng.choice(["c1", "c2"]),
            rules=rng.choice(["harness", "envscaler"]),
            package=rng.choice(["0.1.0", "0.2.0"]),
        )
    return trajectory.model_copy(update=update)


def random_run(seed: int, episodes: int = 60, retries: int = 20) -> list[Trajectory]:
    """``episodes`` records, then ``retries`` more lines for episodes already recorded (the last line wins)."""
    rng = random.Random(seed)
    records = [random_trajectory(rng, f"ep-{index:03d}") for index in range(episodes)]
    records += [random_trajectory(rng, f"ep-{rng.randrange(episodes):03d}") for _ in range(retries)]
    return records


def summary_bytes(summary: object) -> str:
    return json.dumps(summary.model_dump(mode="json"), indent=2)  # type: ignore[attr-defined]  # as write_summary


@pytest.mark.parametrize("seed", range(12))
def test_summaries_equal_the_held_records_ones(seed: int) -> None:
    records = random_run(seed)
    assert summary_bytes(summarize_run(records, run_id="r")) == summary_bytes(
        held_records.summarize_run(records, run_id="r")
    )
    for group_by in [("model", "environment_id", "mode"), ("termination",), ()]:
        new = [summary_bytes(s) for s in summarize(records, group_by)]
        assert new == [summary_bytes(s) for s in held_records.summarize(records, group_by)]
    assert summary_bytes(summarize_overall(records)) == summary_bytes(
        held_records.summarize_group(held_records.deduplicate(records))
    )


def test_stored_sample_runs_summarize_as_before(tmp_path: Path) -> None:
    for run_dir in write_sample_runs(tmp_path).values():
        records = read_results(run_dir / "results.jsonl")
        assert summary_bytes(summarize_run(records, run_id="x")) == summary_bytes(
            held_records.summarize_run(records, run_id="x")
        )


def write_lines(path: Path, records: list[Trajectory]) -> None:
    path.write_text("".join(record.model_dump_json() + "\n" for record in records), encoding="utf-8")


def assert_tally_is_the_files(tally: RunTally, path: Path) -> None:
    held = read_results(path)
    assert summary_bytes(tally.summary.run_summary("r")) == summary_bytes(held_records.summarize_run(held, "r"))
    assert tally.infra_causes() == held_records.infra_error_causes(held)
    assert tally.environment_causes() == held_records.environment_error_causes(held)
    assert tally.recorded_usd == math.fsum(sum(u.cost_usd for u in t.usage.values()) for t in held)
    unretryable = sum(t.infra_error and t.failure is not None and t.failure.retryable is False for t in held)
    assert tally.unretryable_errors == unretryable


@pytest.mark.parametrize("seed", range(6))
def test_a_stores_tally_is_the_summary_of_its_file_after_reading_and_appending(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "results.jsonl"
    records = random_run(seed)
    write_lines(path, records[:50])  # with lines replaced by later ones of the same episode

    tally = RunTally()
    store = ResultStore(path, listener=tally)
    assert_tally_is_the_files(tally, path)
    for record in records[50:]:  # retries of episodes read at opening, and new ones
        store.append(record)
    store.close()
    assert_tally_is_the_files(tally, path)
    assert len(store) == len({r.episode_id for r in records})


def test_an_exact_sum_is_fsum_in_any_order_and_forgets_what_is_taken_out() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        values = [rng.choice([rng.random(), 1e-300 * rng.random(), 1e15 * rng.random(), -rng.random(), 0.1, 1 / 3])]
        values += [rng.uniform(-1, 1) * 10 ** rng.randrange(-20, 20) for _ in range(rng.randrange(12))]
        total = ExactSum()
        extra = rng.random()
        total.add(extra)
        for value in values:
            total.add(value)
        total.remove(extra)
        assert total.value == math.fsum(values)
        rng.shuffle(values)
        assert total.value == math.fsum(values)
    assert ExactSum().value == 0.0


def large_record(index: int) -> Trajectory:
    record = make_trajectory(f"counted-{index:05d}", scenario_id=f"s{index % 7}", trial=index // 7, tool_calls=3)
    return record.model_copy(update={"messages": [*record.messages, {"role": "assistant", "content": "x" * 20_000}]})


def test_a_store_counting_a_run_holds_none_of_its_records(tmp_path: Path) -> None:
    """2,000 records of 20 kB: holding them would take 40 MB; the store and its tally grow by far less, and none of
    them is left alive once the test drops its own references (other tests of the same worker may leave theirs)."""
    path = tmp_path / "results.jsonl"
    tally = RunTally()
    store = ResultStore(path, listener=tally)
    store.append(large_record(0))  # the file and its handle exist before memory is measured
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(1, 2001):
            store.append(large_record(index))
        store.append(large_record(5))  # a retry: the replaced record is read back from the file to be taken out
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    store.close()
    assert grown < 2_000_000, f"the store grew by {grown:,} bytes over 2,000 records"
    alive = [obj for obj in gc.get_objects() if isinstance(obj, Trajectory) and obj.episode_id.startswith("counted-")]
    assert not alive
    assert tally.summary.overall.episodes == 2001
    assert_tally_is_the_files(tally, path)
