"""What the harness accepts as a JSON value: bounded nesting, size and numbers that every reader can carry.

Values that come from a jailed process (tool results, states, check answers) and the records the harness writes
(``results.jsonl``) pass through :func:`check_json` before they are used or stored, so a value nested hundreds of
levels deep, holding millions of entries, or a number JSON cannot carry is refused with the reason instead of
failing later where it is written, read back or shown. Error texts from a jailed process are cut by
:func:`cut_text`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ERROR_TEXT_LIMIT = 2_000
"""Characters kept of an error text that came from a jailed process (the rest is replaced by a marker)."""

_INT_MIN = -(1 << 63)
_INT_MAX = (1 << 64) - 1
"""The integers orjson writes and reads back as integers (signed or unsigned 64-bit)."""
_INFINITY = float("inf")
_UNBOUNDED = 1 << 62


@dataclass(frozen=True)
class JSONLimits:
    """Bounds on one JSON value. ``None`` leaves that dimension unbounded."""

    max_depth: int
    """Containers nested in one another (``[[1]]`` is 2 deep)."""
    max_items: int | None = None
    """Keys and items of all containers together."""
    max_string_chars: int | None = None
    """Characters of any one string or key."""


class UnsafeJSON(ValueError):
    """A value outside the limits, or one that JSON cannot carry; the message completes "the value ..."."""


def check_json(value: object, limits: JSONLimits) -> None:
    """Raise :class:`UnsafeJSON` unless ``value`` is plain JSON within ``limits``.

    Plain JSON: dicts with string keys, lists, strings, booleans, ``None``, finite floats and integers orjson
    writes (64-bit). Tuples are refused like any other type: what is checked must be what decoding gives back.
    The walk goes level by level and checks the common scalars inline: it runs on every tool call's reply.
    """
    max_depth, max_items, max_string = limits.max_depth, limits.max_items, limits.max_string_chars
    string_limit = max_string if max_string is not None else _UNBOUNDED
    items = 0
    depth = 0
    level: list[object] = [value]
    while level:
        depth += 1
        deeper: list[object] = []
        for node in level:
            members: Iterable[object]
            if type(node) is dict:
                for key in node:
                    if type(key) is not str:
                        raise UnsafeJSON(f"holds a key of type {type(key).__name__}, not a string")
                    if len(key) > string_limit:
                        raise UnsafeJSON(f"holds a key of {len(key):,} characters; the limit is {string_limit:,}")
                members = node.values()
            elif type(node) is list:
                members = node
            else:
                _check_scalar(node, max_string)
                continue
            if depth > max_depth:
                raise UnsafeJSON(f"nests more than {max_depth} levels deep")
            items += len(node)
            for member in members:
                if member is None or member is True or member is False:
                    continue
                kind = type(member)
                if kind is dict or kind is list:
                    deeper.append(member)
                elif kind is str:
                    if len(member) > string_limit:
                        _check_scalar(member, max_string)
                else:
                    _check_scalar(member, max_string)
        if max_items is not None and items > max_items:
            raise UnsafeJSON(f"holds more than {max_items:,} keys and items")
        level = deeper


def check_decoded_json(value: object, limits: JSONLimits, string_bound: int) -> None:
    """:func:`check_json` for a value orjson decoded, at a fraction of its cost.

    ``string_bound`` bounds the characters of every string and key of the value: the length of its encoding
    always does (no string is longer than its encoding), and :func:`longest_string_bound` gives a tighter one.
    orjson only decodes string keys, finite floats and 64-bit integers; so unless that bound is above the
    string limit, only the nesting and the count of keys and items are left to check, and those only need the
    containers.
    """
    if limits.max_string_chars is not None and string_bound > limits.max_string_chars:
        check_json(value, limits)
        return
    max_depth, max_items = limits.max_depth, limits.max_items
    items = 0
    depth = 0
    level: list[Any] = [value] if type(value) is dict or type(value) is list else []
    while level:
        depth += 1
        if depth > max_depth:
            raise UnsafeJSON(f"nests more than {max_depth} levels deep")
        deeper: list[Any] = []
        for node in level:
            items += len(node)
            members = node.values() if type(node) is dict else node
            deeper += [member for member in members if type(member) is dict or type(member) is list]
        if max_items is not None and items > max_items:
            raise UnsafeJSON(f"holds more than {max_items:,} keys and items")
        level = deeper


QUOTE_STRIDE = 1 << 16
"""Bytes of the stretches :func:`longest_string_bound` looks for a quote in."""


def longest_string_bound(encoded: bytes, stride: int = QUOTE_STRIDE) -> int:
    """A bound on the characters of any string or key decoded from the JSON text ``encoded``, in a few searches.

    A decoded string has no more characters than bytes between its quotes (an escape or a multi-byte character
    is several bytes for one character). Unless the text holds an escaped quote (the two bytes backslash and
    quote; then the text's length is the bound), no string holds a quote byte, so each lies within a run of
    bytes between two quote bytes. The text is cut into stretches of ``stride`` bytes: a run long enough to
    cover a whole stretch (any run of 2·stride − 1 bytes does) is measured exactly from that stretch; every
    other run is shorter than 2·stride − 1.
    """
    size = len(encoded)
    if size < 2 * stride or (b"\\" in encoded and b'\\"' in encoded):  # one byte is found faster than two
        return size
    longest = 2 * stride - 2
    start = 0
    while start < size:
        end = min(start + stride, size)
        if encoded.find(b'"', start, end) >= 0:
            start = end
            continue
        after = encoded.find(b'"', end)
        after = size if after < 0 else after
        longest = max(longest, after - encoded.rfind(b'"', 0, start) - 1)
        start = after + 1
    return longest


def _check_scalar(node: object, max_string: int | None) -> None:
    if node is None or isinstance(node, bool):
        return
    if isinstance(node, str):
        if max_string is not None and len(node) > max_string:
            raise UnsafeJSON(f"holds a string of {len(node):,} characters; the limit is {max_string:,}")
    elif isinstance(node, int):
        if not _INT_MIN <= node <= _INT_MAX:
            raise UnsafeJSON(f"holds the integer {node}, which does not fit in 64 bits")
    elif isinstance(node, float):
        if node != node or node in (_INFINITY, -_INFINITY):
            raise UnsafeJSON(f"holds the number {node}, which JSON cannot carry")
    else:
        raise UnsafeJSON(f"holds a value of type {type(node).__name__}, which is not JSON")


def cut_text(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters cut]"
