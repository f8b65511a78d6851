"""How a check request carries its episodes' inputs: the request's JSON, a NUL byte, then each episode's initial
state, final state and transcript as the bytes of their JSON, each episode headed by the three sizes. A text the
request already carried is not carried again: its size field names the earlier one instead (the episodes of a
scenario start from the same state, and one that changed nothing ends in it too).

The states are the largest part of a request (retail tasks: 1.2 MB each). As raw bytes after the JSON they are written
once and sliced on arrival; as JSON strings inside the request they would be escaped by the harness and unescaped
by the check process, every quote of them. Used by both sides: the harness (``check_batches``, ``pool``) and the
check process (``runtime``, ``check_runner``). Standard library and orjson only.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

SEPARATOR = b"\0"
"""Ends the request's JSON (orjson never writes a NUL byte: JSON escapes it inside strings)."""
_SIZES = struct.Struct("<III")
_EARLIER = 1 << 31
"""A size field with this bit set carries no text: the rest of the field is the index of an earlier text of the
request (three per episode, in order), which this one repeats."""

ReceivedInputs = tuple[memoryview, memoryview, memoryview]
"""One episode's initial state, final state and transcript, each the bytes of its JSON, as the check process
reads them."""


EpisodeInputs = tuple[bytes, bytes, bytes]
"""One episode's initial state, final state and transcript, each the bytes of its JSON. Kept apart until they are
written to the channel (headed by their sizes), so that a large state is never copied into a request of its own."""


def check_request_parts(message: dict[str, Any], episodes: list[EpisodeInputs]) -> list[bytes]:
    """A request's body, in the order it is written: ``message`` and the inputs of ``episodes``, each text that
    repeats an earlier one replaced by its index."""
    parts = [orjson.dumps(message) + SEPARATOR]
    texts: list[bytes] = []
    for episode in episodes:
        fields: list[int] = []
        carried: list[bytes] = []
        for text in episode:
            if len(text) >= _EARLIER:
                raise ValueError(f"a check input of {len(text):,} bytes: the most a request carries is 2 GiB")
            earlier = _index_of(text, texts)
            if earlier is None:
                fields.append(len(text))
                carried.append(text)
            else:
                fields.append(_EARLIER | earlier)
            texts.append(text)
        parts.append(_SIZES.pack(*fields))
        parts.extend(carried)
    return parts


def _index_of(text: bytes, texts: list[bytes]) -> int | None:
    for index, earlier in enumerate(texts):
        if earlier is text or (len(earlier) == len(text) and earlier == text):
            return index
    return None


def check_request(message: dict[str, Any], episodes: list[EpisodeInputs]) -> bytes:
    """A request's body as one text (see :func:`check_request_parts`)."""
    return b"".join(check_request_parts(message, episodes))


def read_check_request(body: bytes | bytearray) -> tuple[dict[str, Any], list[ReceivedInputs]]:
    """The request's message and each episode's inputs (views into ``body``); ``ValueError`` when the inputs do
    not add up."""
    head, _, tail = body.partition(SEPARATOR)
    message: dict[str, Any] = orjson.loads(head)
    view = memoryview(tail)
    inputs: list[ReceivedInputs] = []
    texts: list[memoryview] = []
    offset = 0
    while offset < len(view):
        if offset + _SIZES.size > len(view):
            raise ValueError("a check request ends inside an episode's header")
        fields = _SIZES.unpack_from(view, offset)
        offset += _SIZES.size
        for field in fields:
            if field & _EARLIER:
                index = field & ~_EARLIER
                if index >= len(texts):
                    raise ValueError("a check request repeats a text it has not carried")
                texts.append(texts[index])
                continue
            if offset + field > len(view):
                raise ValueError("a check request ends inside an episode's inputs")
            texts.append(view[offset : offset + field])
            offset += field
        inputs.append((texts[-3], texts[-2], texts[-1]))
    return message, inputs
