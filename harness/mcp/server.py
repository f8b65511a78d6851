"""An environment served over the Model Context Protocol (fastmcp).

Every tool of the environment becomes an MCP tool with the same JSON schema and description; a call goes
through :meth:`harness.sandbox.EnvSession.call`, so argument validation and sandboxing are those of every other
runtime. The introduction and rules are the server's instructions.

Each MCP session gets its own environment instance (see :mod:`harness.mcp.sessions`). What identifies a
session:

1. the request ``_meta`` key :data:`~harness.mcp.admin.SESSION_META_KEY`, when the client sends one;
2. otherwise the MCP session of a handshake-era connection (protocol 2025-11-25 and earlier: the
   ``Mcp-Session-Id`` over streamable HTTP, the connection itself over stdio);
3. otherwise, over stdio, the server process (a stdio server serves exactly one client).

A 2026-07-28 (sessionless) HTTP connection carries state the protocol's way: a server-minted handle passed
back as an ordinary tool argument. Such clients are listed a ``start_episode`` tool (it returns an
``episode_handle``), an ``end_episode`` tool, and an optional ``episode_handle`` argument on every environment
tool; handshake-era clients see the environment's tools exactly as declared. A sessionless request over HTTP
with neither a handle nor the ``_meta`` key identifies no client, so it is refused rather than given a shared
instance.

States loaded into a session (by the administrative method or ``start_episode``) are validated against the
environment: an object whose top-level keys and value types match the served scenarios' initial states, and
one the environment class accepts.

Administrative operations are request methods of the :data:`~harness.mcp.admin.ADMIN_EXTENSION` extension,
outside the tool listing.

Over HTTP every request first passes the :class:`~harness.mcp.access.AccessGuard` (Host, Origin, the credential,
the size of the body); at most ``max_sessions`` environment instances exist at once, and one more is refused with
the protocol's own error (a tool error, or a JSON-RPC error for the administrative methods).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

import uvicorn
from fastmcp import FastMCP
from fastmcp.server.context import Context
from fastmcp.server.dependencies import get_context
from fastmcp.server.extensions import MethodBinding, ServerExtension
from fastmcp.server.http import StreamableHTTPASGIApp
from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from harness.jsonlimits import UnsafeJSON, check_json
from harness.mcp.access import AccessGuard, AccessPolicy, listening_socket
from harness.mcp.admin import (
    ADMIN_EXTENSION,
    CLOSE_SESSION,
    DESCRIBE,
    DIFF_META_KEY,
    END_TOOL,
    ENVIRONMENT_FAILED,
    HANDLE_ARGUMENT,
    LOAD_STATE,
    READ_STATE,
    SESSION_META_KEY,
    START_TOOL,
    ClosedResult,
    DescribeResult,
    HandleParams,
    LoadStateParams,
    LoadStateResult,
    StateResult,
)
from harness.mcp.credential import make_token, server_url
from harness.mcp.replies import state_problems, tool_result
from harness.mcp.sessions import DEFAULT_MAX_SESSIONS, SessionExpired, SessionLimitReached, SessionRegistry
from harness.mcp.tools import (
    END_SCHEMA,
    START_SCHEMA,
    EnvironmentTool,
    EpisodeTool,
    ProtocolListing,
    environment_failure,
    error_observation,
)
from harness.sandbox import EnvironmentFailed, EnvironmentLoadError, SandboxError, SandboxPool
from harness.sandbox.spec import JailSpec
from harness.schema import Environment, Observation, ObservationKind, Scenario, ToolCall

logger = logging.getLogger(__name__)

ResultT = TypeVar("ResultT")

DEFAULT_IDLE_TIMEOUT_S = 600.0
_ENDED = f"the episode was ended by its client: call {START_TOOL} for a new one"
SERVER_AT_CAPACITY = -32000
"""JSON-RPC code (implementation-defined server error) of an administrative request over ``max_sessions``."""


class NoSessionError(LookupError):
    """A request that identifies no session (sessionless HTTP without the session ``_meta`` key)."""


def server_instructions(environment: Environment) -> str:
    """The introduction and the rules, as the MCP server's instructions."""
    parts = [environment.introduction.strip() or environment.summary.strip() or environment.name]
    if environment.rules:
        parts.append("Rules:\n" + "\n".join(f"- {rule}" for rule in environment.rules))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------- sessions


def _connection_of(ctx: Context) -> Any | None:
    """The SDK connection behind a request, for its teardown hook. The SDK keeps it on the session object
    without a public accessor (fastmcp reads it the same way); without it, idle eviction still applies."""
    request_context = ctx.request_context
    session = getattr(request_context, "session", None)
    return getattr(session, "_connection", None)


class _SessionKeys:
    """Maps a request to its session key, and closes the session's instance when its connection ends."""

    def __init__(self, registry: SessionRegistry):
        self.registry = registry

    @staticmethod
    def mint() -> tuple[str, str]:
        """A new episode handle and its session key."""
        handle = secrets.token_urlsafe(18)
        return handle, f"handle:{handle}"

    def key(self, ctx: Context, handle: str | None = None) -> str:
        if handle is not None:
            # A handle is valid while the registry knows its key: alive, or remembered as evicted or ended (then
            # the call says so); nothing else is kept per handle, so handles cannot pile up.
            if not self.registry.knows(f"handle:{handle}"):
                raise NoSessionError(
                    f"unknown or released {HANDLE_ARGUMENT} {handle!r}: call {START_TOOL} for a new episode"
                )
            return f"handle:{handle}"
        request_context = ctx.request_context
        if request_context is None:
            raise NoSessionError("no MCP request is in progress")
        meta = request_context.meta or {}
        explicit = meta.get(SESSION_META_KEY)
        if isinstance(explicit, str) and explicit:
            return f"client:{explicit}"
        if request_context.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            key = f"mcp:{ctx.session_id}"
            self._close_with_connection(ctx, key)
            return key
        if ctx.transport == "stdio":
            return "stdio"
        raise NoSessionError(
            "this server keeps one environment instance per episode, and a sessionless (2026-07-28) request "
            f"over HTTP does not name one: call {START_TOOL} and pass the {HANDLE_ARGUMENT} it returns to "
            "every tool call, or connect with a session-bearing protocol version (2025-11-25; fastmcp: "
            f"Client(url, mode='legacy')), or send a session key of your choice in the request _meta under "
            f"{SESSION_META_KEY!r}"
        )

    def _close_with_connection(self, ctx: Context, key: str) -> None:
        connection = _connection_of(ctx)
        if connection is None:
            return
        state = getattr(connection, "state", None)
        if not isinstance(state, dict) or state.get("envharness_session_key") == key:
            return
        state["envharness_session_key"] = key
        registry = self.registry

        async def forget() -> None:
            await registry.forget(key)

        connection.exit_stack.push_async_callback(forget)


# -------------------------------------------------------------------------------------------- the server


class EnvironmentServer:
    """An environment served over MCP: the fastmcp server, its per-session instances and the sandbox pool.

    Use as an async context manager (it starts the idle evictor and, when it owns the pool, the pool), then
    :meth:`serve_stdio` or :meth:`serve_http`. ``scenarios`` lets clients load a scenario by id; the default
    state of a session that uses a tool before loading one is ``initial_state`` (``{}`` when None). Without
    ``pool`` the server makes its own from ``jail`` (made where the code's origin is known, as
    ``Library.jail``; the default runs local code).
    """

    def __init__(
        self,
        environment: Environment,
        *,
        initial_state: dict[str, Any] | None = None,
        scenarios: Sequence[Scenario] = (),
        pool: SandboxPool | None = None,
        jail: JailSpec | None = None,
        idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
        seed: int = 0,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if not environment.tools:
            raise ValueError(f"environment {environment.id!r} has no tools to serve")
        self.environment = environment
        self.scenarios = {s.id: s for s in scenarios if s.environment_id == environment.id}
        self._owns_pool = pool is None
        self.pool = pool if pool is not None else (jail or JailSpec()).pool()
        self.registry = SessionRegistry(
            self.pool,
            environment,
            dict(initial_state or {}),
            seed=seed,
            idle_timeout_s=idle_timeout_s,
            max_sessions=max_sessions,
        )
        self._keys = _SessionKeys(self.registry)
        self.mcp = self._build()

    # ----------------------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> EnvironmentServer:
        if self._owns_pool:
            await self.pool.start()
        self.registry.start_evictor()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.registry.aclose()
        if self._owns_pool:
            await self.pool.close()

    async def serve_stdio(self) -> None:
        """Serve one client over stdin/stdout until it disconnects."""
        await self.mcp.run_stdio_async(show_banner=False, log_level="WARNING")

    def http_app(self, access: AccessPolicy, *, path: str = "/mcp") -> AccessGuard:
        """The streamable HTTP app at ``path`` behind the access guard of ``access``."""
        # The HTTP session ends when its instance is evicted, so a client never keeps a session without state.
        app = self.mcp.http_app(path=path, transport="http", session_idle_timeout=self.registry.idle_timeout_s)
        bounded = _SdkBounds(app, max_body_bytes=access.max_request_bytes, max_sessions=self.registry.max_sessions)
        return AccessGuard(bounded, access)

    def http_server(
        self,
        access: AccessPolicy,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        path: str = "/mcp",
        log_level: str = "warning",
    ) -> uvicorn.Server:
        """A uvicorn server for streamable HTTP at ``http://host:port{path}``; run it with ``serve()``."""
        config = uvicorn.Config(
            self.http_app(access, path=path),
            host=host,
            port=port,
            log_level=log_level,
            log_config=None,  # uvicorn's records go through the process's handlers, which redact secrets
            access_log=False,
            lifespan="on",
            ws="none",
            timeout_graceful_shutdown=2,
        )
        return uvicorn.Server(config)

    async def serve_http(
        self,
        access: AccessPolicy,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        path: str = "/mcp",
        sock: socket.socket | None = None,
        log_level: str = "warning",
    ) -> None:
        """Serve streamable HTTP at ``http://host:port{path}`` (on ``sock`` when given) until interrupted."""
        server = self.http_server(access, host, port, path=path, log_level=log_level)
        await server.serve(sockets=[sock] if sock is not None else None)

    # ------------------------------------------------------------------------------------------ building

    def _build(self) -> FastMCP:
        server: FastMCP = FastMCP(
            name=self.environment.name or self.environment.id,
            instructions=server_instructions(self.environment),
            mask_error_details=False,
        )
        for spec in self.environment.tools:
            tool = EnvironmentTool(
                name=spec.function.name,
                description=spec.function.description,
                parameters=spec.function.parameters or {"type": "object", "properties": {}, "required": []},
            )
            server.add_tool(tool.bound(self._call_tool))
        start = EpisodeTool(
            name=START_TOOL,
            description=(
                f"Start an episode on {self.environment.name or self.environment.id}: a fresh environment instance "
                f"(from a scenario's initial state, or the default one). Returns the {HANDLE_ARGUMENT} to pass "
                "to every other tool."
            ),
            parameters=START_SCHEMA,
        )
        end = EpisodeTool(
            name=END_TOOL, description="End an episode and release its environment instance.", parameters=END_SCHEMA
        )
        server.add_tool(start.bound(self._start_episode))
        server.add_tool(end.bound(self._end_episode))
        server.add_middleware(ProtocolListing())
        server.add_extension(_AdminExtension(self))
        return server

    def check_state(self, state: Any) -> dict[str, Any]:
        """STATE if it fits this environment (see :func:`state_problems`), else ``ValueError``."""
        references = [self.registry.default_state, *(s.initial_state for s in self.scenarios.values())]
        problems = state_problems(state, references)
        if problems:
            raise ValueError(f"not a state of {self.environment.id}: " + "; ".join(problems))
        return dict(state)

    async def _start_episode(self, _name: str, arguments: dict[str, Any]) -> ToolResult:
        scenario_id = arguments.get("scenario_id")
        seed = arguments.get("seed", self.registry.seed)
        call = ToolCall(id="start", name=START_TOOL, arguments=arguments)
        if scenario_id is not None and scenario_id not in self.scenarios:
            known = ", ".join(sorted(self.scenarios)) or "none"
            message = f"unknown scenario {scenario_id!r} (known: {known})"
            return tool_result(error_observation(call, ObservationKind.INVALID_ARGUMENTS, message))
        if not isinstance(seed, int) or isinstance(seed, bool) or not -(1 << 63) <= seed < 1 << 63:
            return tool_result(
                error_observation(call, ObservationKind.INVALID_ARGUMENTS, "seed must be a 64-bit integer")
            )
        state = self.scenarios[scenario_id].initial_state if scenario_id is not None else self.registry.default_state
        handle, key = self._keys.mint()
        try:
            await self.registry.load(key, state, seed=seed)
        except (EnvironmentLoadError, EnvironmentFailed) as exc:
            return tool_result(environment_failure(call, exc))
        except (SandboxError, SessionLimitReached) as exc:
            return tool_result(error_observation(call, ObservationKind.SANDBOX_ERROR, str(exc)))
        payload = {HANDLE_ARGUMENT: handle, "environment_id": self.environment.id, "scenario_id": scenario_id}
        return tool_result(Observation(tool_call_id=call.id, name=START_TOOL, content=payload))

    async def _end_episode(self, _name: str, arguments: dict[str, Any]) -> ToolResult:
        handle = arguments.get(HANDLE_ARGUMENT)
        call = ToolCall(id="end", name=END_TOOL, arguments=arguments)
        if not isinstance(handle, str) or not self.registry.knows(f"handle:{handle}"):
            return tool_result(error_observation(call, ObservationKind.INVALID_ARGUMENTS, f"unknown {HANDLE_ARGUMENT}"))
        closed = await self.registry.close(f"handle:{handle}", _ENDED)
        return tool_result(Observation(tool_call_id=call.id, name=END_TOOL, content={"closed": closed}))

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        ctx = get_context()
        call_id = f"mcp_{ctx.request_id}" if ctx.request_context is not None else "mcp_call"
        arguments = dict(arguments)
        handle = arguments.pop(HANDLE_ARGUMENT, None)
        call = ToolCall(id=call_id, name=name, arguments=arguments)
        meta = (ctx.request_context.meta if ctx.request_context is not None else None) or {}
        want_diff = bool(meta.get(DIFF_META_KEY))
        try:
            if handle is not None and not isinstance(handle, str):
                raise NoSessionError(f"{HANDLE_ARGUMENT} must be the string {START_TOOL} returned")
            key = self._keys.key(ctx, handle)
            async with self.registry.use(key) as session:
                observation, diff = await session.call(call)
        except (NoSessionError, SessionExpired) as exc:
            return tool_result(error_observation(call, ObservationKind.TOOL_ERROR, str(exc)))
        except SessionLimitReached as exc:
            return tool_result(error_observation(call, ObservationKind.SANDBOX_ERROR, str(exc)))
        except (EnvironmentLoadError, EnvironmentFailed) as exc:
            return tool_result(environment_failure(call, exc))
        except SandboxError as exc:
            logger.warning("tool call %s failed in the sandbox: %s", name, exc)
            return tool_result(error_observation(call, ObservationKind.SANDBOX_ERROR, str(exc)))
        return tool_result(observation, diff if want_diff else None)

    # --------------------------------------------------------------------------------------- admin calls

    async def load_state(self, params: LoadStateParams) -> LoadStateResult:
        key = self._keys.key(get_context(), params.handle)
        scenario_id = params.scenario_id
        if params.state is not None:
            state = params.state
            try:
                check_json(state, self.pool.reply_limits.state)  # what reading it back admits
            except UnsafeJSON as exc:
                raise MCPError(code=INVALID_PARAMS, message=f"not a usable state: the value {exc}") from exc
        elif scenario_id is not None:
            scenario = self.scenarios.get(scenario_id)
            if scenario is None:
                raise MCPError(code=INVALID_PARAMS, message=f"unknown scenario {scenario_id!r}")
            state = scenario.initial_state
        else:
            state = self.registry.default_state
        try:
            state = self.check_state(state)
        except ValueError as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
        try:
            await self.registry.load(key, state, seed=params.seed)
        except SessionLimitReached as exc:
            raise _at_capacity(exc) from exc
        except (EnvironmentLoadError, EnvironmentFailed) as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc), data=ENVIRONMENT_FAILED) from exc
        except SandboxError as exc:
            raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from exc
        return LoadStateResult(environment_id=self.environment.id, scenario_id=scenario_id)

    async def read_state(self, params: HandleParams | None = None) -> StateResult:
        key = self._keys.key(get_context(), params.handle if params else None)
        try:
            async with self.registry.use(key) as session:
                return StateResult(state=await session.state())
        except SessionExpired as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
        except SessionLimitReached as exc:
            raise _at_capacity(exc) from exc
        except (EnvironmentLoadError, EnvironmentFailed) as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc), data=ENVIRONMENT_FAILED) from exc
        except SandboxError as exc:
            raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from exc

    async def close_session(self, params: HandleParams | None = None) -> ClosedResult:
        handle = params.handle if params else None
        key = self._keys.key(get_context(), handle)
        if handle is not None:
            return ClosedResult(closed=await self.registry.close(key, _ENDED))
        return ClosedResult(closed=await self.registry.close(key))

    def describe(self) -> DescribeResult:
        return DescribeResult(environment_id=self.environment.id)


def _at_capacity(exc: SessionLimitReached) -> MCPError:
    return MCPError(code=SERVER_AT_CAPACITY, message=str(exc), data={"active": exc.active, "limit": exc.limit})


class _SdkBounds:
    """Gives the MCP SDK's session manager (made when the app starts) this server's bounds: its own body limit
    (4 MiB by default, below a legitimate state) raised to the guard's, and its handshake-era sessions bounded
    like the environment instances. fastmcp passes neither."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_sessions: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_sessions = max_sessions
        routes = getattr(app, "routes", [])
        self.endpoints = [
            route.endpoint
            for route in routes
            if isinstance(route, Route) and isinstance(route.endpoint, StreamableHTTPASGIApp)
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def started(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                self.apply()
            await send(message)

        await self.app(scope, receive, started)

    def apply(self) -> None:
        for endpoint in self.endpoints:
            manager = endpoint.session_manager
            if manager is None:
                continue
            manager.max_sessions = self.max_sessions
            manager.max_request_body_size = self.max_body_bytes
            limit = getattr(manager, "asgi_app", None)
            if limit is not None and hasattr(limit, "max_body_size"):
                limit.max_body_size = self.max_body_bytes


class _AdminExtension(ServerExtension):
    """The administrative request methods, outside the tool listing."""

    identifier = ADMIN_EXTENSION

    def __init__(self, owner: EnvironmentServer):
        self._owner = owner

    def clone(self) -> ServerExtension:
        return _AdminExtension(self._owner)

    def settings(self) -> dict[str, Any]:
        return {
            "methods": [LOAD_STATE, READ_STATE, CLOSE_SESSION, DESCRIBE],
            "environment_id": self._owner.environment.id,
            "start_tool": START_TOOL,
            "handle_argument": HANDLE_ARGUMENT,
        }

    def methods(self) -> Sequence[MethodBinding]:
        owner = self._owner

        async def load(_ctx: Any, params: LoadStateParams) -> LoadStateResult:
            return await _admin_call(owner.load_state(params))

        async def read(_ctx: Any, params: HandleParams) -> StateResult:
            return await _admin_call(owner.read_state(params))

        async def close(_ctx: Any, params: HandleParams) -> ClosedResult:
            return await _admin_call(owner.close_session(params))

        async def describe(_ctx: Any, _params: RequestParams) -> DescribeResult:
            return owner.describe()

        return (
            MethodBinding(LOAD_STATE, LoadStateParams, load),
            MethodBinding(READ_STATE, HandleParams, read),
            MethodBinding(CLOSE_SESSION, HandleParams, close),
            MethodBinding(DESCRIBE, RequestParams, describe),
        )


async def _admin_call(operation: Awaitable[ResultT]) -> ResultT:
    try:
        return await operation
    except NoSessionError as exc:
        raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc


# ---------------------------------------------------------------------------------------- entry points


@contextlib.asynccontextmanager
async def running_http_server(
    server: EnvironmentServer,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    path: str = "/mcp",
    access: AccessPolicy | None = None,
) -> AsyncIterator[str]:
    """Serve ``server`` over streamable HTTP in this event loop; yields the endpoint URL (port 0: any free one).

    ``access`` defaults to a loopback policy with a fresh token; the URL yielded holds the token as its path
    prefix. The HTTP server, the sessions' instances and (when the server owns it) the sandbox pool are shut down
    on exit.
    """
    access = access if access is not None else AccessPolicy.for_bind(host, token=make_token())
    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    http = server.http_server(access, host, bound_port, path=path)
    try:
        async with server:
            task = asyncio.create_task(http.serve(sockets=[sock]), name="mcp-http-server")
            try:
                while not http.started:
                    if task.done():
                        task.result()
                        raise RuntimeError("the MCP HTTP server stopped while starting")
                    await asyncio.sleep(0.01)
                yield server_url(host, bound_port, access.token, path)
            finally:
                http.should_exit = True
                try:
                    await asyncio.wait_for(task, timeout=10)
                except TimeoutError:
                    logger.warning("the MCP HTTP server did not stop in time; cancelling it")
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
    finally:
        sock.close()
