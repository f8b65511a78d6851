"""JSON from a file someone else wrote, decoded under a budget: bytes, values and nesting.

A few megabytes of ``[[],[],...]`` decode into hundreds of millions of Python objects. The number of values a
text can hold is bounded by its count of ``[``, ``{`` and ``,`` bytes (each value after the first in a container
follows a comma; each container opens with a bracket), so that count is taken first, on the bytes, and a text
over the budget is refused before anything is decoded; :func:`count_values` lets a reader take it chunk by chunk
and stop early. Nesting is bounded after decoding by walking the containers only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from harness.errors import BadInput
from harness.jsonlimits import JSONLimits, UnsafeJSON, check_decoded_json


class UnsafeFile(BadInput):
    """A file that is refused: outside its root, a symlink, too large, or JSON over its budget."""


@dataclass(frozen=True)
class ReadBudget:
    """What one file may cost to read."""

    max_bytes: int = 256 << 20
    """Bytes of the file (a whole release's largest data file is tens of MB)."""
    max_values: int = 10_000_000
    """Upper bound on the JSON values of the file (``[``, ``{`` and ``,`` bytes, plus one)."""
    max_depth: int = 128
    """Containers nested in one another."""
    max_line_bytes: int | None = None
    """Bytes of one line of a JSON-lines file (None: ``max_bytes``)."""
    max_line_values: int | None = None
    """JSON values of one line of a JSON-lines file (None: ``max_values``)."""

    @property
    def line_bytes(self) -> int:
        return self.max_bytes if self.max_line_bytes is None else self.max_line_bytes

    @property
    def line_values(self) -> int:
        return self.max_values if self.max_line_values is None else self.max_line_values


DEFAULT_BUDGET = ReadBudget()
"""A file of a downloaded source: a release's largest data file is tens of MB."""

RELEASE_BUDGET = ReadBudget(max_values=2_000_000, max_line_bytes=16 << 20)
"""A benchmark's release read by an importer. Its largest data file is 14 MB holding 340,000 JSON values (τ²'s
telecom tasks) and a JSON-lines task is tens of KB; a file built to expand is refused after 2,000,000 values (a
JSON-lines file, decoded line by line, after about 120 MB of Python objects) and a line after 16 MB."""

SOURCE_TEXT_BYTES = 4 << 20
"""The largest text file of a source read whole: a module, a policy, a wiki (the largest released ones are
under 200 KB; environment code over 1,000,000 characters is refused by the lint anyway)."""

LICENSE_TEXT_BYTES = 64 << 10
"""The largest licence text an importer copies into its records: a longer one (licences are 1-35 KB) is refused,
naming the file, rather than cut, so that a record never carries part of a licence."""

RUN_FOLDER_BUDGET = ReadBudget(
    max_bytes=1 << 62, max_values=1 << 62, max_line_bytes=256 << 20, max_line_values=20_000_000
)
"""A run folder's files: ``results.jsonl`` grows with the run (no bound on the file), each line is bounded."""


def count_values(chunk: bytes) -> int:
    """An upper bound on the values ``chunk`` adds to a JSON text (strings may hold some of these bytes too)."""
    return chunk.count(b",") + chunk.count(b"[") + chunk.count(b"{")


def decode_json(data: bytes, label: str, budget: ReadBudget = DEFAULT_BUDGET) -> Any:
    """The JSON value of ``data`` (named ``label`` in errors), refused with one line when over ``budget``."""
    values = count_values(data) + 1
    if values > budget.max_values:
        raise UnsafeFile(f"{label}: holds up to {values:,} JSON values; the limit is {budget.max_values:,}")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UnsafeFile(f"{label}: is not JSON: {exc}") from None
    check_nesting(value, label, budget)
    return value


def check_nesting(value: Any, label: str, budget: ReadBudget) -> None:
    try:
        check_decoded_json(value, JSONLimits(max_depth=budget.max_depth, max_items=budget.max_values), 0)
    except UnsafeJSON as exc:
        raise UnsafeFile(f"{label}: the JSON value {exc}") from None


class JsonAllowance:
    """One budget of values shared by many JSON texts of one source: the JSON held in strings of a JSON file (a
    release that stores fields as JSON strings). The file's own budget bounds each text; this bounds them together.
    """

    def __init__(self, budget: ReadBudget = DEFAULT_BUDGET) -> None:
        self.budget = budget
        self.left = budget.max_values

    def decode(self, text: str | bytes, label: str) -> Any:
        """The JSON value of ``text``. Over the allowance, or nested too deep: :class:`UnsafeFile`; text that is
        not JSON: ``orjson.JSONDecodeError`` (a ``ValueError``), for the caller to report with its record."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        if len(data) > self.budget.max_bytes:
            raise UnsafeFile(f"{label}: a JSON text of {len(data):,} bytes; the limit is {self.budget.max_bytes:,}")
        values = count_values(data) + 1
        if values > self.left:
            raise UnsafeFile(
                f"{label}: its JSON texts hold more than {self.budget.max_values:,} values in all (an amplification "
                "bomb?)"
            )
        self.left -= values
        value = orjson.loads(data)
        check_nesting(value, label, self.budget)
        return value
