"""Keep credentials out of log records, error messages and stored results.

Two nets. The exact values the harness knows to be secret are replaced wherever they appear: every variable an
alias names with ``api_key_env``, every key passed in (:func:`register_secret`), the Hugging Face token (from
``HF_TOKEN`` or the token file ``huggingface-cli login`` writes) and any environment variable whose name says
key, token, secret, password or credential. Key-shaped strings (``sk-...``, ``hf_...``, ``Bearer ...``) and the
values of key-like fields (``api_key=...``, ``?key=...``, ``"token": "..."``) are replaced in messages too.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

_SECRET_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-~+/=]{8,}"),
)
# A key-like field name, then ``=``/``:`` (JSON quotes allowed), then its value up to a delimiter; a bare
# ``key`` only as a query parameter (``?key=...``), since "key: order_id" is ordinary text.
_SECRET_FIELD = re.compile(
    r"(?i)(\b(?:[a-z0-9]+[_-])?(?:api[_-]?key|token|secret|password|passwd|credential|auth)s?|(?<=[?&])key)"
    r"(['\"]?\s*[:=]\s*['\"]?)(?!\d+\b)([^\s'\"&,;}\]]{4,})"
)
_SECRET_VARIABLE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CRED)", re.IGNORECASE)
_MIN_SECRET_LENGTH = 6
REDACTED = "[redacted]"

_registered: set[str] = set()
_named_variables: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Redact this exact value from now on (an API key passed in, a token read from a file)."""
    if value and len(value) >= _MIN_SECRET_LENGTH:
        with _lock:
            _registered.add(value)


def register_secret_variable(name: str | None) -> None:
    """Redact the value of this environment variable (an alias's ``api_key_env``), read now and at every use."""
    if name:
        register_secret(os.environ.get(name))
        with _lock:
            _named_variables.add(name)


def _hf_token_file() -> Path:
    explicit = os.environ.get("HF_TOKEN_PATH")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    )
    return Path(home).expanduser() / "token"


_token_file_cache: dict[Path, tuple[float, str | None]] = {}


def _hf_token_from_file() -> str | None:
    path = _hf_token_file()
    try:
        modified = path.stat().st_mtime
        cached = _token_file_cache.get(path)
        if cached is not None and cached[0] == modified:
            return cached[1]
        token = path.read_text().strip() or None
    except OSError:
        return None
    _token_file_cache[path] = (modified, token)
    return token


_values_cache: tuple[object, list[str]] | None = None


def _environment_snapshot() -> dict[bytes, bytes] | dict[str, str]:
    # os.environ's own mapping of raw bytes (CPython on POSIX): copying and comparing it is a few microseconds,
    # where decoding every variable and matching its name is a millisecond per call.
    raw = getattr(os.environ, "_data", None)
    return dict(raw) if isinstance(raw, dict) else dict(os.environ)


def secret_values() -> list[str]:
    """Every value known to be secret, longest first (so a value containing another is replaced whole).

    Recomputed whenever the environment, the registered values or the token file change; otherwise the last
    answer is reused (the harness redacts every record it writes, so this runs once per episode or more)."""
    global _values_cache
    environment = _environment_snapshot()
    with _lock:
        registered = frozenset(_registered)
        named = frozenset(_named_variables)
    token = _hf_token_from_file()
    key = (environment, registered, named, token)
    cached = _values_cache
    if cached is not None and cached[0] == key:
        return list(cached[1])
    values = set(registered)
    for name, value in os.environ.items():
        if (name in named or _SECRET_VARIABLE.search(name)) and len(value) >= _MIN_SECRET_LENGTH:
            values.add(value)
    if token and len(token) >= _MIN_SECRET_LENGTH:
        values.add(token)
    answer = sorted(values, key=len, reverse=True)
    _values_cache = (key, answer)
    return list(answer)


def redact_known(text: str, values: list[str] | None = None) -> str:
    """Replace only the exact values known to be secret (safe on any record: it never touches other data)."""
    for value in secret_values() if values is None else values:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redact(text: str) -> str:
    """Replace known secret values, key-shaped strings and the values of key-like fields in a message."""
    text = redact_known(text)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return _SECRET_FIELD.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with :func:`redact` (attached to litellm's loggers and the CLI's handler)."""

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
