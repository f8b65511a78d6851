"""Identifiers that become file names: checked against one safe pattern before anything is written."""

from __future__ import annotations

import re

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class UnsafeIdentifier(ValueError):
    """An id that cannot be a file name (a path separator, '..', a leading dot, odd characters, too long)."""


def is_safe_id(value: str) -> bool:
    return isinstance(value, str) and _SAFE_ID.fullmatch(value) is not None and ".." not in value


def require_safe_id(value: str, what: str) -> str:
    """``value`` itself when it is safe as a file name; otherwise UnsafeIdentifier naming ``what``."""
    if not is_safe_id(value):
        raise UnsafeIdentifier(
            f"{what} {value!r} cannot be used as a file name: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..'"
        )
    return value
