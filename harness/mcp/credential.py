"""The access credential of ``harness serve``: made, read, checked, and kept out of what a client records.

A server's credential is one random token. A client passes it as the first segment of the URL's path
(``http://127.0.0.1:8765/<token>/mcp``; OpenEnv's clients build ``<base>/mcp`` and ``<base>/ws`` from a base URL,
and keep such a prefix) or as ``Authorization: Bearer <token>``. A token is URL-safe text, so it stands in a path
as it is; any path segment of :data:`MIN_TOKEN_CHARS` or more URL-safe characters is taken for one when a URL is
shown or recorded (:func:`public_url`), so that what identifies a server in a run folder never holds it.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from harness.redact import REDACTED, register_secret

TOKEN_VARIABLE = "HARNESS_SERVE_TOKEN"
"""The environment variable that fixes a server's token (the other way is ``--token-file``; never argv)."""
TOKEN_BYTES = 32
"""Random bytes of a token the server makes (``secrets.token_urlsafe``: 43 characters)."""
MIN_TOKEN_CHARS = 32
"""Characters a fixed token needs at least; also what makes a URL's path segment count as a token."""
MAX_TOKEN_CHARS = 512
_TOKEN = re.compile(r"[A-Za-z0-9._~-]+")


class CredentialError(ValueError):
    """A fixed token that cannot be used (its message is one line naming what would work)."""


def make_token() -> str:
    """A fresh random token (``TOKEN_BYTES`` bytes of entropy), registered as a secret."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    register_secret(token)
    return token


def check_token(token: str, source: str) -> str:
    """``token`` when it can be a credential (URL-safe characters, long enough), else :class:`CredentialError`."""
    if not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS or _TOKEN.fullmatch(token) is None:
        raise CredentialError(
            f"the token from {source} must be {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} characters among letters, "
            "digits and '._~-' (python -c 'import secrets; print(secrets.token_urlsafe(32))' makes one)"
        )
    register_secret(token)
    return token


def read_token_file(path: Path) -> str:
    """The token in ``path`` (its first line). The file must be the user's own and unreadable by others, as
    ssh asks of a private key: a token others can read is no credential against them."""
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):
            raise CredentialError(f"--token-file {path} is not a regular file")
        if status.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CredentialError(
                f"--token-file {path} can be read or written by other users (mode {stat.S_IMODE(status.st_mode):o}): "
                f"chmod 600 {path}"
            )
        if status.st_uid != os.geteuid():
            raise CredentialError(f"--token-file {path} belongs to another user")
        with path.open("rb") as handle:
            text = handle.read(MAX_TOKEN_CHARS + 2).decode("utf-8", errors="replace")
    except OSError as exc:
        raise CredentialError(f"cannot read --token-file {path}: {exc.strerror or exc}") from None
    lines = text.splitlines()
    return check_token(lines[0].strip() if lines else "", f"--token-file {path}")


def fixed_token(token_file: Path | None) -> str | None:
    """The token fixed by ``--token-file`` or :data:`TOKEN_VARIABLE`, or None (the server then makes one)."""
    from_environment = os.environ.get(TOKEN_VARIABLE)
    if token_file is not None and from_environment is not None:
        raise CredentialError(f"give the token by --token-file or by {TOKEN_VARIABLE}, not both")
    if token_file is not None:
        return read_token_file(token_file)
    if from_environment is not None:
        return check_token(from_environment.strip(), TOKEN_VARIABLE)
    return None


def server_url(host: str, port: int, token: str | None, path: str = "") -> str:
    """The URL a client of a server at ``host:port`` passes: the token (when there is one) as the path's first
    segment, then ``path``."""
    shown = f"[{host}]" if ":" in host else host
    prefix = f"/{token}" if token else ""
    return f"http://{shown}:{port}{prefix}{path}"


def is_token_like(segment: str) -> bool:
    return len(segment) >= MIN_TOKEN_CHARS and _TOKEN.fullmatch(segment) is not None


def url_credentials(url: str) -> list[str]:
    """The credentials a URL holds: token-like path segments and a password in its user part."""
    parts = urlsplit(url)
    found = [segment for segment in parts.path.split("/") if is_token_like(segment)]
    if parts.password:
        found.append(parts.password)
    return found


def public_url(url: str) -> str:
    """``url`` with every credential it holds replaced by ``[redacted]`` (what is shown, hashed and recorded)."""
    parts = urlsplit(url)
    path = "/".join(REDACTED if is_token_like(segment) else segment for segment in parts.path.split("/"))
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", f":{REDACTED}@", 1)
    return urlunsplit(parts._replace(path=path, netloc=netloc))


def public_target(target: str) -> str:
    """An MCP target (a URL or a stdio command) as it may be shown and recorded; registers its credentials."""
    text = target.strip()
    if not text.startswith(("http://", "https://")):
        return target
    for credential in url_credentials(text):
        register_secret(credential)
    return public_url(text)


__all__ = [
    "MIN_TOKEN_CHARS",
    "TOKEN_BYTES",
    "TOKEN_VARIABLE",
    "CredentialError",
    "check_token",
    "fixed_token",
    "is_token_like",
    "make_token",
    "public_target",
    "public_url",
    "read_token_file",
    "server_url",
    "url_credentials",
]
