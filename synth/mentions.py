"""What a synthesized request must say, so that an agent can do what the reference did.

An agent can only act on what it is told or can look up. A request therefore has to mention:

- every value the user provides (arguments classed as user-provided on the tool graph), including the keys and
  values inside dicts and lists (``items={"P-201": 2}`` names product P-201);
- the identifier of every record a state-changing call acts on (which order to cancel, which card to pay with),
  unless an earlier call of the chain pins it down: its result holds exactly one value under that name (the
  ``user_id`` that ``find_user_by_email`` returns), or the record was created by the chain itself.

Free-text arguments (masked) and one-character values are not required: any wording is as good.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from synth.gates import GateOutcome
from synth.graph import is_identifier_name


class CallFacts(Protocol):
    """What :mod:`synth.mentions` reads of an executed call."""

    name: str
    arguments: dict[str, Any]
    result: Any
    changed_state: bool
    user_arguments: list[str]
    masked_arguments: list[str]


def scalar_texts(value: Any) -> list[str]:
    """The scalar values inside ``value`` as text, dict keys included (booleans and nulls say nothing)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, str | int | float):
        return [str(value)]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in [str(key), *scalar_texts(item)]]
    if isinstance(value, list):
        return [text for item in value for text in scalar_texts(item)]
    return []


def _values_under(value: Any, name: str) -> Iterator[Any]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == name and not isinstance(item, dict | list):
                yield item
            yield from _values_under(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from _values_under(item, name)


def pinned_by_earlier(name: str, value: Any, earlier: Sequence[CallFacts]) -> bool:
    """An earlier call's result holds exactly this one value under ``name``: the agent cannot pick another."""
    for call in earlier:
        found = {str(item) for item in _values_under(call.result, name)}
        if found == {str(value)}:
            return True
    return False


def state_texts(state: dict[str, Any]) -> set[str]:
    return set(scalar_texts(state))


def call_mentions(call: CallFacts, earlier: Sequence[CallFacts], initial_texts: set[str]) -> list[str]:
    """The values a request must mention for this call (see the module docstring)."""
    found: list[str] = []
    for name, value in call.arguments.items():
        if name in call.masked_arguments:
            continue
        if name in call.user_arguments:
            candidates = scalar_texts(value)
        elif (
            call.changed_state
            and is_identifier_name(name)
            and isinstance(value, str | int)
            and not isinstance(value, bool)
            and str(value) in initial_texts
            and not pinned_by_earlier(name, value, earlier)
        ):
            candidates = [str(value)]
        else:
            candidates = []
        found += [text for text in candidates if len(text) > 1 and text not in found]
    return found


def required_mentions(calls: Sequence[CallFacts], initial_state: dict[str, Any]) -> list[list[str]]:
    """Per call, the values its request must mention."""
    texts = state_texts(initial_state)
    return [call_mentions(call, calls[:index], texts) for index, call in enumerate(calls)]


def mentions(text: str, value: str) -> bool:
    return value.lower() in text.lower()


def gate_mentions(task: str, required: Sequence[str]) -> GateOutcome:
    """The whole request (every turn) mentions every required value."""
    missing = sorted({value for value in required if not mentions(task, value)})
    details = {"required": len(set(required)), "missing": missing}
    if missing:
        return GateOutcome(
            gate="mentions",
            passed=False,
            reason=f"the request never mentions {missing}: an agent cannot know them",
            details=details,
        )
    return GateOutcome(gate="mentions", passed=True, details=details)
