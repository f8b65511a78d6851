"""Reading a library's scenario lines, each initial state decoded once however many scenarios start from it.

The scenarios of a benchmark domain mostly start from the same database (retail tasks: 114 lines, each carrying the
same 1.2 MB). Decoded line by line, a library holds a copy per scenario (870 MB for retail) and spends most of its
load decoding them. Here a line whose initial state is, byte for byte, the JSON of a state already read shares that
state's object, and only the rest of the line is decoded.

Nothing in the line is taken on trust. The candidate's JSON is looked for after ``"initial_state":``; the line is
then decoded with that span replaced by a string no file can hold (a random token drawn for each reader), and the
span is the initial state only if the decoded record's ``initial_state`` is that token. A complete JSON value put in
place of another complete value leaves the rest of the document as it was, so the record is exactly the one the
whole line decodes to. Any other line is decoded whole. States are shared, so none may be changed: each is held by
``state_encodings.READ_ONLY_STATES``, with the JSON written for the comparison.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import Any

import orjson

from harness.schema import Scenario
from harness.states.encodings import READ_ONLY_STATES

_KEY = b'"initial_state":'
SHARED_BELOW = 64 * 1024
"""States whose JSON is shorter than this are decoded with their line: looking for them would cost more."""


class ScenarioLines:
    """Reads scenario lines, sharing the initial states of the last ``capacity`` distinct large states read."""

    def __init__(self, capacity: int = 4) -> None:
        self.capacity = capacity
        self._states: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
        self._token = f"initial state {secrets.token_hex(16)}"
        self._token_json = orjson.dumps(self._token)
        self.shared = 0
        """Lines whose initial state was an earlier one's."""

    def scenario(self, line: bytes) -> Scenario:
        """The line's scenario (``Scenario.model_validate(orjson.loads(line))``), its initial state the object of
        an earlier line's when they are the same; ``ValueError`` (or pydantic's) when the line is not one."""
        for encoded, state in reversed(self._states.items()):
            record = self._without_state(line, encoded)
            if record is not None:
                scenario = Scenario.model_validate(record)
                scenario.initial_state = state
                self._states.move_to_end(encoded)
                self.shared += 1
                return scenario
        scenario = Scenario.model_validate(orjson.loads(line))
        if len(line) >= SHARED_BELOW:
            encoded = orjson.dumps(scenario.initial_state)
            if len(encoded) >= SHARED_BELOW:
                self._states[encoded] = scenario.initial_state
                READ_ONLY_STATES.hold(scenario.initial_state, encoded)
                while len(self._states) > self.capacity:
                    self._states.popitem(last=False)
        return scenario

    def _without_state(self, line: bytes, encoded: bytes) -> dict[str, Any] | None:
        """The line's record with an empty initial state, when its initial state is ``encoded`` (see the module's
        docstring); else None."""
        if len(line) < len(encoded):
            return None
        start = line.find(_KEY + encoded)
        if start < 0:
            return None
        start += len(_KEY)
        try:
            record = orjson.loads(line[:start] + self._token_json + line[start + len(encoded) :])
        except orjson.JSONDecodeError:
            return None
        if not isinstance(record, dict) or record.get("initial_state") != self._token:
            return None
        record["initial_state"] = {}
        return record


__all__ = ["SHARED_BELOW", "ScenarioLines"]
