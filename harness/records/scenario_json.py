"""A scenario's JSON, written without pydantic walking its initial state.

A benchmark's scenario can carry its domain's whole database as the initial state (retail tasks: 1.2 MB each).
Pydantic's JSON-mode dump of such a state (typed ``Any``) inspects every value in Python: 34 ms per retail scenario,
against about 1 ms for orjson. When the state is plain JSON, orjson writes it directly, and the bytes are the ones
the pydantic dump would have given; a state holding anything else goes through pydantic with the rest.
"""

from __future__ import annotations

from collections.abc import Set

import orjson

from harness.schema import Scenario
from harness.states.encodings import READ_ONLY_STATES

# orjson writes these types itself, but not necessarily as pydantic's JSON mode does: refused here (TypeError), so
# that only plain JSON takes the fast path.
_PLAIN_JSON_ONLY = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def scenario_json(scenario: Scenario, exclude: Set[str] = frozenset(), *, sort_keys: bool = False) -> bytes:
    """``orjson.dumps(scenario.model_dump(mode="json", exclude=exclude))`` (with sorted keys when asked), byte for
    byte."""
    option = orjson.OPT_SORT_KEYS if sort_keys else 0
    if "initial_state" in exclude:
        return orjson.dumps(scenario.model_dump(mode="json", exclude=set(exclude)), option=option)
    try:
        if READ_ONLY_STATES.holds(scenario.initial_state):  # decoded from JSON, so plain; written once
            written = READ_ONLY_STATES.canonical if sort_keys else READ_ONLY_STATES.plain
            state = orjson.Fragment(written(scenario.initial_state))
        else:
            state = orjson.Fragment(orjson.dumps(scenario.initial_state, option=_PLAIN_JSON_ONLY | option))
    except TypeError:
        return orjson.dumps(scenario.model_dump(mode="json", exclude=set(exclude)), option=option)
    placeholder = scenario.model_copy(update={"initial_state": {}})
    data = placeholder.model_dump(mode="json", exclude=set(exclude))
    data["initial_state"] = state  # the key keeps its place: the dict was made with it, in field order
    return orjson.dumps(data, option=option)
