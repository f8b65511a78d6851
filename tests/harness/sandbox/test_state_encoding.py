"""How a session writes its instance's attributes as JSON (``runtime.dumps``): objects by their public attributes,
sets sorted, the sandbox's dates as ISO text, anything else as its ``str``. The common case (an object whose
attributes are a plain dict) has a fast path; it must write exactly what the general rule writes."""

from __future__ import annotations

import datetime
from typing import Any

import orjson
import pydantic

from harness.sandbox import runtime
from harness.sandbox.shims import FrozenDate, FrozenDateTime


def general_rule(value: Any) -> Any:
    """The rule as written before the fast path, kept here as the reference."""
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, FrozenDate | FrozenDateTime):
        return value.isoformat()
    if hasattr(value, "__dict__"):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


def by_general_rule(value: Any) -> bytes:
    return orjson.dumps(value, default=general_rule, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


class Address(pydantic.BaseModel):
    street: str
    zip: str


class User(pydantic.BaseModel):
    name: str
    addresses: list[Address]
    tags: set[str]
    born: datetime.date | None = None


class Plain:
    def __init__(self) -> None:
        self.visible = 1
        self._hidden = 2
        self.nested = {"k": [Address(street="a", zip="1")]}


class TaggedSet(set):  # type: ignore[type-arg]
    pass


class LaterDate(FrozenDate):
    pass


class Slotted:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 3


class Weird:
    def __init__(self) -> None:
        self.__dict__[5] = "a non-string key"


def test_the_fast_path_writes_what_the_general_rule_writes():
    tagged = TaggedSet({"b", "a"})
    tagged.note = "kept out"  # type: ignore[attr-defined]
    later = LaterDate(2024, 5, 1)
    later.extra = "x"  # type: ignore[attr-defined]
    values = [
        User(name="n", addresses=[Address(street="s", zip="z")], tags={"y", "x"}, born=datetime.date(2020, 1, 2)),
        Plain(),
        tagged,
        later,
        FrozenDateTime(2024, 5, 1, 12, 0),
        Address,  # a class: its attributes are a mappingproxy
        Slotted(),
        frozenset({3, 1, 2}),
        {"many": [Plain(), Plain()], "set": {1, 2}},
    ]
    for value in values:
        assert runtime.dumps(value) == by_general_rule(value), value


def test_a_non_string_attribute_name_fails_as_under_the_general_rule():
    failures = []
    for encode in (runtime.dumps, by_general_rule):
        try:
            encode(Weird())
        except orjson.JSONEncodeError as exc:
            failures.append(type(exc))
    assert failures == [orjson.JSONEncodeError, orjson.JSONEncodeError]


class Flexible:
    def __init__(self, **attributes: Any) -> None:
        self.__dict__.update(attributes)


def test_objects_of_one_class_with_other_attributes_are_each_written_by_the_general_rule():
    """The fast path remembers, per class, the names of an object written whole; objects of that class with other
    names (a private one added, one more, one fewer) are written by their own attributes."""
    runtime._PUBLIC_ATTRIBUTES.clear()
    objects = [
        Flexible(a=1, b=2),
        Flexible(a=3, b=4),  # the remembered names
        Flexible(a=5, b=6, _secret="kept out"),
        Flexible(a=7, b=8, c=9),
        Flexible(a=10),
        Flexible(b=11, a=12),  # the same names in another order: written in its own order
        Flexible(),
        Flexible(a=13, b=14),
    ]
    for value in objects:
        assert runtime.dumps(value) == by_general_rule(value), vars(value)
    assert runtime.dumps(objects) == by_general_rule(objects)
    assert b"kept out" not in runtime.dumps(objects)
    odd = Flexible(a=1, b=2)
    odd.__dict__[5] = "a non-string key"
    try:
        runtime.dumps(odd)
    except orjson.JSONEncodeError:
        pass
    else:
        raise AssertionError("an object with a non-string attribute name was written")
