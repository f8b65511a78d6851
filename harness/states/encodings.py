"""The JSON of states nobody changes, written once per state instead of once per use.

A large state is written to JSON many times in a run: each session's open request carries it, each check request
carries an episode's initial and final state, and a scenario's hashes (library fingerprint, ``versions``,
screening) write it with sorted keys. A retail database takes about 1 ms to write and 3.5 ms with sorted keys,
and every scenario of the domain starts from the same one. States that are never changed once made (a library's
initial states, shared between the scenarios that start alike; the states a pool's sessions started from, read
with ``shared=True``) are *held* here, and their JSON is written the first time it is asked for and kept.

Held states are found by identity, so holding a state is a promise that nothing changes it: a held state that
changed would be written as it was. Only states decoded from JSON are held (their JSON is plain, so either writing
is byte for byte ``orjson.dumps`` of the value). The last ``capacity`` states held are kept, each with a reference
that keeps its identity its own.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass
class _Held:
    state: Any
    plain: bytes | None = None
    canonical: bytes | None = None


class StateEncodings:
    """States that are never changed, with their JSON as written so far (see the module's docstring)."""

    def __init__(self, capacity: int = 32) -> None:
        self.capacity = capacity
        self._held: OrderedDict[int, _Held] = OrderedDict()

    def hold(self, state: Any, plain: bytes | None = None) -> None:
        """Promise that ``state`` (decoded from JSON) is never changed; ``plain``: its JSON when already known
        (``orjson.dumps(state)``, byte for byte)."""
        held = self._held.get(id(state))
        if held is None or held.state is not state:
            held = self._held[id(state)] = _Held(state)
        if plain is not None and held.plain is None:
            held.plain = plain
        self._held.move_to_end(id(state))
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)

    def holds(self, state: Any) -> bool:
        return self._find(state) is not None

    def plain(self, state: Any) -> bytes:
        """``orjson.dumps(state)``; written once for a held state."""
        held = self._find(state)
        if held is None:
            return orjson.dumps(state)
        if held.plain is None:
            held.plain = orjson.dumps(state)
        return held.plain

    def canonical(self, state: Any) -> bytes:
        """``orjson.dumps(state, option=orjson.OPT_SORT_KEYS)``; written once for a held state."""
        held = self._find(state)
        if held is None:
            return orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
        if held.canonical is None:
            held.canonical = orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
        return held.canonical

    def _find(self, state: Any) -> _Held | None:
        held = self._held.get(id(state))
        if held is None or held.state is not state:
            return None
        self._held.move_to_end(id(state))
        return held


READ_ONLY_STATES = StateEncodings()
"""The process's held states: a library's initial states and the states its pools' sessions started from."""

__all__ = ["READ_ONLY_STATES", "StateEncodings"]
