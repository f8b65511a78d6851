"""Keep credentials out of log records and error messages."""

from __future__ import annotations

import logging
import os
import re

_SECRET_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{8,}"),
    re.compile(r"(?i)(api[_-]?key|token|secret|password)(['\"]?\s*[:=]\s*['\"]?)([^\s'\",}]{4,})"),
)
_SECRET_VARIABLE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
REDACTED = "[redacted]"


def _secret_values() -> list[str]:
    return sorted(
        (value for name, value in os.environ.items() if _SECRET_VARIABLE.search(name) and len(value) >= 8),
        key=len,
        reverse=True,
    )


def redact(text: str) -> str:
    """Replace values of secret-looking environment variables and key-shaped strings."""
    for value in _secret_values():
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern in _SECRET_PATTERNS[:3]:
        text = pattern.sub(REDACTED, text)
    return _SECRET_PATTERNS[3].sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with :func:`redact` (attached to litellm's loggers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: keep it as is rather than lose it
            return True
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg = cleaned
            record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True
