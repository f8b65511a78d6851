"""Scenario lines that start from a state already read share it, and every line reads as its whole JSON does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.library import load_library
from harness.records.scenario_json import scenario_json
from harness.records.scenario_lines import SHARED_BELOW, ScenarioLines
from harness.records.versions import scenario_hash
from harness.schema import Scenario
from harness.states.encodings import READ_ONLY_STATES, StateEncodings

BIG = {"db": {f"user_{n}": {"name": f"Name {n}", "orders": list(range(n % 7)), "note": "x" * 40} for n in range(1500)}}
OTHER = {"db": {"user_0": {"name": "someone else"}}}


def line(scenario_id: str, state: Any, **extra: Any) -> bytes:
    record = {"id": scenario_id, "environment_id": "env", "initial_state": state, "task": "do it", **extra}
    return orjson.dumps(record)


def read(lines: list[bytes]) -> tuple[list[Scenario], ScenarioLines]:
    reader = ScenarioLines()
    return [reader.scenario(text) for text in lines], reader


def test_lines_that_start_alike_share_one_state_equal_to_their_own() -> None:
    assert len(orjson.dumps(BIG)) >= SHARED_BELOW
    texts = [line(f"s{n}", BIG) for n in range(5)] + [line("other", OTHER), line("s5", BIG, task="another")]
    scenarios, reader = read(texts)
    for scenario, text in zip(scenarios, texts, strict=True):
        assert scenario == Scenario.model_validate(orjson.loads(text))
    shared = [s for s in scenarios if s.id != "other"]
    assert all(s.initial_state is shared[0].initial_state for s in shared)
    assert reader.shared == 5
    assert scenarios[-1].task == "another"
    assert READ_ONLY_STATES.holds(shared[0].initial_state)


def test_a_line_is_read_as_its_whole_json_whatever_it_holds_beside_a_known_state() -> None:
    """Lines built to look like a known state where the record's initial state is another: each reads as
    ``orjson.loads`` reads it (a reader that trusted where the state's JSON appears would give BIG to each)."""
    big = orjson.dumps(BIG).decode()
    other = orjson.dumps(OTHER).decode()
    hostile = [
        # a key that ends in "initial_state (its quote escaped), holding the known state
        '{"id":"a","environment_id":"env","task":"t","gold_final_state":{"x\\"initial_state":' + big + "},"
        '"initial_state":' + other + "}",
        # the same at the top level (a record the schema refuses, as it would alone)
        '{"id":"a2","environment_id":"env","task":"t","x\\"initial_state":' + big + ',"initial_state":' + other + "}",
        # the known state one level down
        '{"id":"b","environment_id":"env","task":"t","tags":[],"initial_state":' + other + ',"provenance":'
        '{"source":"s","details":{"initial_state":' + big + "}}}",
        # two initial states: the last one counts, in either order
        '{"id":"c","environment_id":"env","task":"t","initial_state":' + big + ',"initial_state":' + other + "}",
        '{"id":"d","environment_id":"env","task":"t","initial_state":' + other + ',"initial_state":' + big + "}",
        # the known state inside a string
        '{"id":"e","environment_id":"env","initial_state":' + other + ',"task":' + orjson.dumps(big).decode() + "}",
    ]
    reader = ScenarioLines()
    first = reader.scenario(line("first", BIG))
    shared = []
    for text in hostile:
        try:
            expected: Scenario | None = Scenario.model_validate(orjson.loads(text))
        except ValueError:
            expected = None
        if expected is None:
            with pytest.raises(ValueError):
                reader.scenario(text.encode())
            continue
        scenario = reader.scenario(text.encode())
        assert scenario == expected
        shared.append(scenario.initial_state is first.initial_state)
    assert shared == [False, False, False, True, False]


def test_a_known_state_written_otherwise_is_read_whole() -> None:
    spaced = orjson.dumps(BIG, option=orjson.OPT_INDENT_2)
    text = b'{"id":"b","environment_id":"env","task":"t","initial_state":' + spaced + b"}"
    scenarios, reader = read([line("a", BIG), text])
    assert scenarios[1].initial_state == BIG
    assert scenarios[1].initial_state is not scenarios[0].initial_state
    assert reader.shared == 0


def test_a_broken_line_after_a_known_state_fails_as_it_would_alone(tmp_path: Path) -> None:
    folder = tmp_path / "lib"
    seed = load_library(None)
    environment = seed.environments[seed.scenarios[0].environment_id]
    (folder / "environments").mkdir(parents=True)
    (folder / "scenarios").mkdir()
    (folder / "environments" / f"{environment.id}.py").write_text(environment.code)
    meta = environment.model_dump(mode="json", exclude={"code"})
    (folder / "environments" / f"{environment.id}.json").write_bytes(orjson.dumps(meta))
    good = line("good", BIG, environment_id=environment.id)
    broken = good.replace(b'"id":"good"', b'"id":"broken"')[:-1]  # the closing brace cut
    unknown = line("unknown", BIG, environment_id=environment.id, colour="red")
    (folder / "scenarios" / "x.jsonl").write_bytes(b"\n".join([good, broken, unknown, good.replace(b"good", b"g2")]))
    library = load_library(folder)
    assert [s.id for s in library.scenarios] == ["good", "g2"]
    assert library.scenarios[0].initial_state is library.scenarios[1].initial_state
    assert [problem.split(":")[:2] for problem in library.problems] == [["x.jsonl", "2"], ["x.jsonl", "3"]]
    assert "colour" in library.problems[1]


def test_a_held_state_is_written_once_and_as_orjson_writes_it() -> None:
    encodings = StateEncodings(capacity=2)
    state = {"b": 1, "a": [2.5, None, "é"]}
    encodings.hold(state)
    assert encodings.plain(state) == orjson.dumps(state)
    assert encodings.canonical(state) == orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
    assert encodings.plain(state) is encodings.plain(state)
    assert encodings.canonical(state) is encodings.canonical(state)
    unheld = {"b": 1}
    assert encodings.plain(unheld) is not encodings.plain(unheld)  # written afresh: it may have changed
    others = [{"n": n} for n in range(2)]
    for other in others:
        encodings.hold(other)
    assert not encodings.holds(state)  # the oldest made room
    assert all(encodings.holds(other) for other in others)


def test_the_hashes_of_a_shared_state_are_those_of_its_own_copy() -> None:
    scenarios, _ = read([line("a", BIG), line("b", BIG)])
    copy = scenarios[1].model_copy(update={"initial_state": orjson.loads(orjson.dumps(BIG))})
    assert not READ_ONLY_STATES.holds(copy.initial_state)
    assert scenario_json(scenarios[1]) == scenario_json(copy)
    assert scenario_json(scenarios[1], sort_keys=True) == scenario_json(copy, sort_keys=True)
    assert scenario_hash(scenarios[1]) == scenario_hash(copy)


@pytest.mark.parametrize("capacity", [1, 4])
def test_only_the_last_states_are_kept_to_share(capacity: int) -> None:
    states = [{"db": {**BIG["db"], "which": n}} for n in range(3)]
    reader = ScenarioLines(capacity=capacity)
    first = [reader.scenario(line(f"a{n}", state)) for n, state in enumerate(states)]
    again = reader.scenario(line("again", states[0]))
    assert again.initial_state == states[0]
    assert (again.initial_state is first[0].initial_state) == (capacity >= 3)
