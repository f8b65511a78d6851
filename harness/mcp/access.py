"""The door of every HTTP server ``harness serve`` runs: one ASGI guard in front of the MCP and OpenEnv apps.

Before any route runs, a request or a WebSocket handshake must pass, in this order:

1. **Host**: its ``Host`` header names an allowed host (with or without a port). A loopback bind allows
   ``127.0.0.1``, ``localhost`` and ``::1``; ``--allow-host`` adds names. A page on a name the attacker controls
   that resolves to 127.0.0.1 (DNS rebinding) sends its own name and is refused.
2. **Origin**: a browser sends ``Origin`` on WebSocket handshakes and cross-origin POSTs. Absent (any
   non-browser client), it passes. Present, it passes only as an http(s) origin on an allowed host *and* the
   server's own port (a page the server itself would have served), or when named by ``--allow-origin``; a page
   on another site, on another port of 127.0.0.1, or with the ``null`` origin is refused.
3. **Credential**: the server's token as the first segment of the path (removed before the app sees the path)
   or as ``Authorization: Bearer <token>``, compared in constant time. A server made with ``--no-auth`` has none.
4. **Size**: an HTTP body is admitted up to ``max_request_bytes``: a larger ``Content-Length`` is refused before
   anything is read, and a body without one is counted as it arrives and refused once over. (WebSocket messages
   are bounded by the server's WebSocket layer with the same number: close code 1009.)

A refusal is 403 (Host, Origin), 401 (credential) or 413 (size), or a WebSocket handshake refused with that
status before it is accepted; its body is a JSON-RPC error whose message is the one-line reason, and the refusal is
logged at warning level. Nothing of the request reaches the app.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import socket
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from harness.jsonlimits import JSONLimits
from harness.sandbox import SandboxLimits

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
REQUEST_ENVELOPE_BYTES = 1 << 20
"""Room for what wraps the largest legitimate payload (a JSON-RPC envelope around a state)."""
_JAIL = SandboxLimits()
DEFAULT_MAX_REQUEST_BYTES = _JAIL.max_state_bytes + REQUEST_ENVELOPE_BYTES
"""The largest legitimate request: a state as large as the jail admits, plus its envelope."""
REQUEST_LIMITS = JSONLimits(
    max_depth=_JAIL.max_state_depth + 4, max_items=_JAIL.max_state_items, max_string_chars=_JAIL.max_string_chars
)
"""What the JSON of one request (a frame, a body, a tool call's arguments, a state to load) may hold: as deep and
as large as a state the jail admits, and a little more for the envelope; plain JSON numbers only (64-bit integers,
finite floats)."""
REFUSED_CODE = -32001
"""The JSON-RPC error code of a refusal's body (an implementation-defined server error); the HTTP status says
which check failed."""
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SHOWN_CHARS = 120
_READ = {b"host": "host", b"origin": "origin", b"authorization": "authorization", b"content-length": "content-length"}
_VERDICTS_KEPT = 256


class AccessError(ValueError):
    """A host name or origin given to the server that cannot be one (one line naming what would work)."""


def is_loopback(host: str) -> bool:
    """``host`` (a name or an address, IPv6 without brackets) reaches only this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


_HOST_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?")


def split_host(value: str) -> tuple[str, int | None] | None:
    """``name``, ``name:port``, ``[v6]``, ``[v6]:port`` (or a bare IPv6 address) as (lower-case name, port);
    None when it is none of those."""
    value = value.strip().lower()
    port_text = ""
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:]
    elif value.count(":") == 1:
        name, _, port_text = value.partition(":")
    else:
        name = value
    if port_text and not (port_text.isdigit() and len(port_text) <= 5):
        return None
    if ":" in name:
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
    elif _HOST_NAME.fullmatch(name) is None:
        return None
    return name, int(port_text) if port_text else None


def host_name(value: str) -> str:
    """An ``--allow-host`` value as the name the guard compares (lower case, no brackets, no port)."""
    parsed = split_host(value)
    if parsed is None:
        raise AccessError(f"--allow-host {value!r} is not a host name or an IP address (example: myhost.lan)")
    return parsed[0]


def split_origin(value: str) -> tuple[str, str, int] | None:
    """An ``Origin`` header as (scheme, host name, port); None unless it is exactly an http(s) origin."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    if parts.username is not None or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def origin_text(value: str) -> str:
    """An ``--allow-origin`` value in the form the guard compares (``scheme://host:port``)."""
    parsed = split_origin(value)
    if parsed is None:
        raise AccessError(f"--allow-origin {value!r} is not an http(s) origin (example: http://localhost:3000)")
    return _origin_key(*parsed)


def _origin_key(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://{host}:{port}"


class AccessPolicy(BaseModel):
    """Who may use a server: the hosts and origins it answers, its credential, the size of what it reads."""

    model_config = ConfigDict(frozen=True)

    token: str | None = Field(default=None, repr=False)
    """The credential; None serves without one (``--no-auth``)."""
    allowed_hosts: frozenset[str] = frozenset(LOOPBACK_HOSTS)
    """Host names a request's ``Host`` may name (lower case; IPv6 without brackets)."""
    allowed_origins: frozenset[str] = frozenset()
    """Origins (``scheme://host:port``) admitted besides the server's own."""
    max_request_bytes: int = Field(default=DEFAULT_MAX_REQUEST_BYTES, gt=0)
    """Bytes of one HTTP body or WebSocket message."""

    @classmethod
    def for_bind(
        cls,
        bind_host: str,
        *,
        token: str | None,
        hosts: Iterable[str] = (),
        origins: Iterable[str] = (),
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    ) -> AccessPolicy:
        """The policy of a server bound to ``bind_host``: the loopback names, an address it was bound to by
        name, and the extra ``hosts``; :class:`AccessError` for a host or origin that cannot be one."""
        allowed = set(LOOPBACK_HOSTS) | {host_name(host) for host in hosts}
        bind = bind_host.strip("[]").lower()
        if not is_wildcard(bind):
            allowed.add(bind)
        return cls(
            token=token,
            allowed_hosts=frozenset(allowed),
            allowed_origins=frozenset(origin_text(origin) for origin in origins),
            max_request_bytes=max_request_bytes,
        )

    # ------------------------------------------------------------------------------------------- checks

    def host_problem(self, value: str | None) -> str | None:
        if value is None:
            return "the request has no Host header"
        parsed = split_host(value)
        if parsed is None or parsed[0] not in self.allowed_hosts:
            return f"Host {_shown(value)} is not a host this server answers (harness serve --allow-host)"
        return None

    def origin_problem(self, value: str | None, server_port: int | None) -> str | None:
        if value is None:
            return None
        parsed = split_origin(value)
        if parsed is not None:
            scheme, host, port = parsed
            if host in self.allowed_hosts and port == server_port:
                return None
            if _origin_key(scheme, host, port) in self.allowed_origins:
                return None
        return f"Origin {_shown(value)} may not use this server (harness serve --allow-origin)"

    def credential_path(self, path: str, authorization: str | None) -> str | None:
        """The path the app sees when the request holds the credential (the token's path segment removed);
        None when it does not hold it."""
        if self.token is None:
            return path
        expected = self.token.encode()
        first, slash, rest = path[1:].partition("/")
        if hmac.compare_digest(first.encode(), expected):
            return slash + rest if slash else "/"
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), expected):
            return path
        return None


class Refusal(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class AccessGuard:
    """ASGI middleware that admits a request to ``app`` only under ``policy`` (see the module's docstring).

    ``refused`` counts the refusals by status, for whoever watches the server.
    """

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app = app
        self.policy = policy
        self.refused: Counter[int] = Counter()
        self._hosts: dict[str, str | None] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        try:
            admitted = self._admitted(scope, headers)
            if kind == "http":
                receive = await self._bounded_body(headers.get("content-length"), receive)
        except Refusal as refusal:
            self.refused[refusal.status] += 1
            what = "a WebSocket handshake" if kind == "websocket" else f"a {scope.get('method', 'HTTP')} request"
            logger.warning("refused %s from %s: %s", what, _client(scope), refusal.reason)
            if kind == "websocket":
                await _refuse_handshake(scope, receive, send, refusal)
            else:
                await _refuse_request(send, refusal)
            return
        await self.app(admitted, receive, send)

    def _admitted(self, scope: Scope, headers: dict[str, str]) -> Scope:
        policy = self.policy
        host = headers.get("host")
        problem = self._hosts.get(host) if host is not None else policy.host_problem(None)
        if host is not None and host not in self._hosts:
            problem = policy.host_problem(host)
            if len(self._hosts) >= _VERDICTS_KEPT:
                self._hosts.clear()
            self._hosts[host] = problem
        if problem is None:
            origin = headers.get("origin")
            if origin is not None:
                server = scope.get("server")
                problem = policy.origin_problem(origin, server[1] if server else None)
        if problem is not None:
            raise Refusal(403, problem)
        path = policy.credential_path(scope["path"], headers.get("authorization"))
        if path is None:
            raise Refusal(401, "this server needs its credential: the URL it printed, or Authorization: Bearer <token>")
        if path == scope["path"]:
            return scope
        prefix = b"/" + (policy.token or "").encode()
        raw: bytes | None = scope.get("raw_path")
        rest = raw[len(prefix) :] if raw is not None and raw.startswith(prefix) else path.encode()
        return {**scope, "path": path, "raw_path": rest or b"/"}

    async def _bounded_body(self, declared: str | None, receive: Receive) -> Receive:
        """Read the body as it arrives, refusing it once over the limit; the app then reads the same messages."""
        limit = self.policy.max_request_bytes
        if declared is not None:
            if not declared.strip().isdigit():
                raise Refusal(400, "Content-Length is not a number")
            if int(declared) > limit:
                raise Refusal(413, f"the body of {int(declared):,} bytes is over this server's {limit:,} bytes")
        held: deque[Message] = deque()
        size = 0
        while True:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > limit:
                raise Refusal(413, f"the body is over this server's {limit:,} bytes")
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return held.popleft() if held else await receive()

        return replay


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening (port 0: any free one), ready for ``uvicorn.Server.serve``.

    Clients that connect before the server runs wait in its backlog instead of being refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _headers(scope: Scope) -> dict[str, str]:
    """The headers the guard reads (ASGI gives names in lower case). A header sent twice with different values
    becomes unusable: no check passes it."""
    found: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name = _READ.get(raw_name)
        if name is None:
            continue
        value = raw_value.decode("latin-1")
        if found.setdefault(name, value) != value:
            found[name] = "\x00conflicting values"
    return found


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "an unknown client"


def _shown(value: str) -> str:
    text = value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "..."
    return repr(text)


def _refusal_body(refusal: Refusal) -> bytes:
    """A JSON-RPC error (what both servers speak on ``/mcp``; MCP clients show its message) holding the reason."""
    error = {"code": REFUSED_CODE, "message": refusal.reason, "data": {"status": refusal.status}}
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()


async def _refuse_request(send: Send, refusal: Refusal) -> None:
    body = _refusal_body(refusal)
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if refusal.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse_handshake(scope: Scope, receive: Receive, send: Send, refusal: Refusal) -> None:
    """Refuse before ``websocket.accept``: an HTTP answer with the reason when the server can send one, else a
    plain close (the server answers the handshake with 403)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    extensions: dict[str, Any] = scope.get("extensions") or {}
    if "websocket.http.response" not in extensions:
        await send({"type": "websocket.close", "code": 1008, "reason": refusal.reason[:120]})
        return
    body = _refusal_body(refusal)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "websocket.http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "LOOPBACK_HOSTS",
    "REQUEST_LIMITS",
    "AccessError",
    "AccessGuard",
    "AccessPolicy",
    "is_loopback",
    "is_wildcard",
    "listening_socket",
]
