"""Credential redaction lives in :mod:`harness.redact` (used by logs, the result store and the CLI too)."""

from harness.redact import REDACTED, RedactingFilter, redact, redact_known, register_secret, register_secret_variable

__all__ = ["REDACTED", "RedactingFilter", "redact", "redact_known", "register_secret", "register_secret_variable"]
