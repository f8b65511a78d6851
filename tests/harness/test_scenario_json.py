"""A scenario's JSON written by orjson equals pydantic's dump byte for byte, whatever its initial state holds."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import gc
from typing import Any

import orjson
import pytest

from harness.collector import collector_paused
from harness.library import load_library
from harness.records.scenario_json import scenario_json
from harness.records.versions import SCENARIO_EXCLUDED
from harness.schema import Scenario


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: float


class Text(str):
    pass


STATES: list[dict[str, Any]] = [
    {"db": {"users": {"u1": {"name": "Ann", "balance": 10.5, "tags": ["a", "b"], "open": True, "note": None}}}},
    {"z": 1, "a": {"y": [3, 2, 1], "b": {"d": 2.0, "c": -0.0}}, "unicode": "é—✓", "big": 2**62},
    {"tuple": (1, 2, (3, 4))},
    {"when": datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC), "day": datetime.date(2024, 5, 1)},
    {"set": {3, 1, 2}},
    {"colour": Colour.RED, "point": Point(1, 2.5), "text": Text("s")},
    {"nested": {"keys": {1: "one", 2: "two"}}},
    {"nan": float("nan"), "inf": float("inf")},
]


def scenario(state: dict[str, Any]) -> Scenario:
    base = load_library(None).scenarios[0]
    return base.model_copy(update={"initial_state": state})


@pytest.mark.parametrize("state", STATES, ids=range(len(STATES)))
@pytest.mark.parametrize("sort_keys", [False, True])
@pytest.mark.parametrize("exclude", [frozenset(), frozenset({"provenance"}), SCENARIO_EXCLUDED])
def test_the_fast_dump_is_pydantics_dump_byte_for_byte(
    state: dict[str, Any], sort_keys: bool, exclude: frozenset[str]
) -> None:
    record = scenario(state)
    option = orjson.OPT_SORT_KEYS if sort_keys else 0
    expected = orjson.dumps(record.model_dump(mode="json", exclude=set(exclude)), option=option)
    assert scenario_json(record, exclude, sort_keys=sort_keys) == expected


def test_every_bundled_scenario_dumps_as_pydantic_does() -> None:
    for record in load_library(None).scenarios:
        assert scenario_json(record) == orjson.dumps(record.model_dump(mode="json"))


def test_the_collector_is_paused_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
