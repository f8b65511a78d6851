"""One environment served to OpenEnv 0.10 clients: the HTTP + WebSocket contract of OpenEnv's ``create_app``.

Each OpenEnv session holds one :class:`~harness.train.jailed_episode.JailedEpisode`, so every tool call runs in a
jailed session of the shared :class:`~harness.sandbox.SandboxPool`. ``reset(scenario_id=...)`` opens the
scenario's episode; ``step`` takes OpenEnv's MCP actions (``list_tools``, ``call_tool``). The episode ends when
the agent calls :data:`FINISH_TOOL` (its ``answer`` is the agent's last message), or on its own when the episode
rules end it (the step limit, an environment failure); that observation carries ``done`` and the reward of the
rules' checks. A session is created by a WebSocket that names none, or by ``openenv/session/create`` (what
``MCPToolClient`` does before attaching its WebSocket); at most ``max_sessions`` exist at once. A session unused for
``idle_timeout_s`` is destroyed, whether a WebSocket holds it or not (WebSocket pings are not use); its WebSocket is
closed with code 1001.

Every request passes the :class:`~harness.mcp.access.AccessGuard` first; bodies and frames are JSON within
:data:`~harness.train.openenv_wire.REQUEST_LIMITS`, and anything else gets the protocol's error reply.

Scenarios are listed through OpenEnv's task API (:mod:`harness.train.openenv_tasks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from pydantic import TypeAdapter, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from harness.mcp.access import AccessGuard, AccessPolicy
from harness.mcp.server import server_instructions
from harness.rules.protocols import agent_turn_from_message
from harness.sandbox.arguments import CallRejected, validate_call
from harness.schema import Environment, ObservationKind, Scenario
from harness.train.jailed_episode import EpisodeSettings, JailedEpisode
from harness.train.openenv_tasks import TaskApi
from harness.train.openenv_wire import (
    FRAME_TYPES,
    BareFrame,
    CallToolData,
    EpisodeState,
    ErrorCode,
    IncomingFrame,
    MalformedRequest,
    McpFrame,
    Outcome,
    ResetData,
    ResetFrame,
    RpcCode,
    RpcRequest,
    StepFrame,
    ToolError,
    ToolErrorKind,
    decode_request,
    error_frame,
    first_error,
    frame,
    quiet_utf8_refusals,
    rpc_error,
    rpc_result,
    shown,
    tool_listing,
    validation_errors,
)

logger = logging.getLogger(__name__)

FINISH_TOOL = "finish"
FINISH_LISTING = {
    "name": FINISH_TOOL,
    "description": "End the episode: say your final answer to the user. The episode is then scored.",
    "input_schema": {
        "type": "object",
        "properties": {"answer": {"type": "string", "description": "Your final message to the user."}},
        "required": [],
    },
}
_frames: TypeAdapter[Any] = TypeAdapter(IncomingFrame)
IDLE_CLOSE_CODE = 1001
"""WebSocket close code of a session destroyed for being idle ("going away": its server side is gone)."""


class RequestRefused(Exception):
    """A request this server answers with an error, the session untouched."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.EXECUTION_ERROR, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra


class ToolCallRefused(RequestRefused):
    """A tool call that did not reach the environment (unknown tool, arguments its schema rejects)."""

    def __init__(self, kind: ToolErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class OpenEnvSession:
    id: str
    slot: JailedEpisode
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    episode_id: str | None = None
    step_count: int = 0
    websocket_attached: bool = False
    close_when_detached: bool = False
    last_used: float = field(default_factory=time.monotonic)
    final: Outcome | None = None
    holder: asyncio.Task[Any] | None = None
    """The task of the WebSocket that holds the session (the idle sweep cancels it to close the socket)."""
    evicted: bool = False

    def touch(self) -> None:
        self.last_used = time.monotonic()


def scalar_reward(slot: JailedEpisode) -> float | None:
    """The episode's reward as the rules score it (the composite when the rules weigh one), None if unscored."""
    outcome = slot.outcome
    if outcome is None or outcome.reward is None:
        return None
    reward = outcome.reward
    return reward.composite if reward.composite is not None else reward.state_reward


class OpenEnvServer:
    """The session table and the protocol's operations; :meth:`app` puts them behind OpenEnv's routes."""

    def __init__(
        self,
        settings: EpisodeSettings,
        pool: Any,
        environment: Environment,
        *,
        max_sessions: int,
        idle_timeout_s: float | None,
        default_scenario_id: str | None,
        seed: int = 0,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.environment = environment
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.default_scenario_id = default_scenario_id
        self.seed = seed
        self.sessions: dict[str, OpenEnvSession] = {}
        self._table_lock = asyncio.Lock()

    @property
    def scenarios(self) -> list[Scenario]:
        return list(self.settings.scenarios.values())

    # ------------------------------------------------------------------------------------------ sessions

    async def create_session(self) -> OpenEnvSession:
        async with self._table_lock:
            await self._evict_idle()
            if len(self.sessions) >= self.max_sessions:
                raise RequestRefused(
                    f"server at capacity: {len(self.sessions)} of {self.max_sessions} sessions in use "
                    "(harness serve --max-sessions); close a session or retry later",
                    ErrorCode.CAPACITY_REACHED,
                    active_sessions=len(self.sessions),
                    max_sessions=self.max_sessions,
                )
            session = OpenEnvSession(secrets.token_hex(16), JailedEpisode(self.settings, self.pool))
            self.sessions[session.id] = session
            logger.info("OpenEnv session %s opened (%d active)", session.id, len(self.sessions))
            return session

    async def destroy_session(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        async with session.lock:
            await session.slot.close()
        logger.info("OpenEnv session %s closed (%d active)", session_id, len(self.sessions))

    async def _evict_idle(self) -> None:
        """Destroy the sessions unused past the idle timeout. A session a WebSocket holds is ended by its own
        handler, which this cancels: it closes the socket (code 1001) and destroys the session."""
        for session in [s for s in self.sessions.values() if self._idle(s)]:
            logger.info("OpenEnv session %s idle for over %g s: evicted", session.id, self.idle_timeout_s)
            if session.websocket_attached and session.holder is not None:
                session.evicted = True
                session.holder.cancel()
            elif not session.websocket_attached:
                await self.destroy_session(session.id)

    def _idle(self, session: OpenEnvSession) -> bool:
        """Unused (no data frame, no request) for longer than the idle timeout, and not in the middle of one."""
        if self.idle_timeout_s is None or session.lock.locked() or session.evicted:
            return False
        return time.monotonic() - session.last_used > self.idle_timeout_s

    async def _sweep(self) -> None:
        assert self.idle_timeout_s is not None
        period = min(max(self.idle_timeout_s / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(period)
            async with self._table_lock:
                await self._evict_idle()

    def session(self, session_id: Any) -> OpenEnvSession:
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise RequestRefused(f"Unknown session_id: {session_id}", ErrorCode.SESSION_ERROR)
        session.touch()
        return session

    async def close_all(self) -> None:
        for session_id in list(self.sessions):
            await self.destroy_session(session_id)

    # ------------------------------------------------------------------------------------------ episodes

    async def reset(self, session: OpenEnvSession, data: dict[str, Any]) -> Outcome:
        try:
            request = ResetData.model_validate(data)
        except ValidationError as exc:
            raise RequestRefused(f"invalid reset parameters: {first_error(exc)}", ErrorCode.VALIDATION_ERROR) from None
        scenario_id = request.scenario_id or self.default_scenario_id
        if scenario_id is None:
            raise RequestRefused(f"no scenario to reset to: {self.environment.id} serves none")
        if scenario_id not in self.settings.scenarios:
            known = ", ".join(sorted(self.settings.scenarios)) or "none"
            raise RequestRefused(f"no scenario {scenario_id!r} for environment {self.environment.id!r}; known: {known}")
        async with session.lock:
            await session.slot.open(scenario_id, seed=self.seed if request.seed is None else request.seed)
            session.episode_id = request.episode_id or f"{scenario_id}-{secrets.token_hex(4)}"
            session.step_count = 0
            session.final = None
            scenario = self.settings.scenarios[scenario_id]
            observation = {
                "scenario_id": scenario_id,
                "episode_id": session.episode_id,
                "task": scenario.task,
                "instructions": server_instructions(self.environment),
            }
            if session.slot.episode is None:
                session.final = self._ended(session, observation)
                return session.final
            return Outcome(observation=observation)

    def list_tools(self) -> Outcome:
        return Outcome(observation={"tools": tool_listing(self.environment, [FINISH_LISTING])})

    async def call_tool(self, session: OpenEnvSession, name: str, arguments: dict[str, Any]) -> Outcome:
        """One tool call. Refusals that leave the episode running raise :class:`ToolCallRefused`."""
        async with session.lock:
            slot = session.slot
            if slot.episode is None:
                if session.final is not None:
                    raise RequestRefused(
                        f"the episode has ended ({slot.outcome.reason if slot.outcome else 'ended'}): "
                        "call reset for a new one"
                    )
                raise RequestRefused("no episode in progress: call reset(scenario_id=...) first")
            session.step_count += 1
            if name == FINISH_TOOL:
                await slot.end(str(arguments.get("answer") or ""))
                session.final = self._ended(session, {"tool_name": name, "result": "The episode has ended."})
                return session.final
            message = _assistant_call(name, arguments)
            call = agent_turn_from_message(message).tool_calls[0]
            try:
                validate_call(call, {tool.function.name: tool for tool in self.environment.tools})
            except CallRejected as exc:
                kind = (
                    ToolErrorKind.TOOL_NOT_FOUND
                    if exc.kind is ObservationKind.UNKNOWN_TOOL
                    else ToolErrorKind.INVALID_ARGS
                )
                raise ToolCallRefused(kind, str(exc)) from None
            observations = await slot.step(message)
            text = "\n".join(str(o.get("content") or "") for o in observations if o.get("role") == "tool")
            observation = {"tool_name": name, "result": text}
            if slot.episode is None:
                session.final = self._ended(session, observation)
                return session.final
            return Outcome(observation=observation, metadata={"step_count": session.step_count})

    def _ended(self, session: OpenEnvSession, observation: dict[str, Any]) -> Outcome:
        outcome = session.slot.outcome
        metadata: dict[str, Any] = {"step_count": session.step_count}
        if outcome is not None:
            metadata["termination"] = outcome.reason
            if outcome.detail:
                metadata["termination_detail"] = outcome.detail
            if outcome.reward is not None:
                metadata["reward_breakdown"] = outcome.reward.model_dump(mode="json")
        return Outcome(observation=observation, reward=scalar_reward(session.slot), done=True, metadata=metadata)

    def state(self, session: OpenEnvSession) -> EpisodeState:
        outcome = session.slot.outcome
        scenario = session.slot.scenario
        return EpisodeState(
            episode_id=session.episode_id,
            step_count=session.step_count,
            session_id=session.id,
            scenario_id=scenario.id if scenario is not None else None,
            done=session.final is not None,
            reward=scalar_reward(session.slot) if session.final is not None else None,
            termination=outcome.reason if outcome is not None and session.final is not None else None,
        )

    async def step(self, session: OpenEnvSession, frame_: StepFrame) -> Outcome:
        action = frame_.data
        if not isinstance(action, CallToolData):
            return self.list_tools()
        try:
            return await self.call_tool(session, action.tool_name, action.arguments)
        except ToolCallRefused as exc:
            error = ToolError(error_type=exc.kind, message=str(exc))
            return Outcome(observation={"tool_name": action.tool_name, "result": None, "error": error.model_dump()})

    # ------------------------------------------------------------------------------------------ JSON-RPC

    async def rpc(self, body: Any, attached: OpenEnvSession | None = None) -> dict[str, Any]:
        """One JSON-RPC request of ``POST /mcp`` (or an ``mcp`` frame of a WebSocket attached to ``attached``)."""
        try:
            request = RpcRequest.model_validate(body)
        except ValidationError as exc:
            request_id = body.get("id") if isinstance(body, dict) else None
            return rpc_error(request_id, RpcCode.INVALID_REQUEST, f"Invalid request: {first_error(exc)}")
        params, request_id = request.params, request.id
        try:
            if request.method == "openenv/session/create":
                session = attached or await self.create_session()
                return rpc_result(request_id, {"session_id": session.id})
            if request.method == "openenv/session/close":
                return rpc_result(request_id, await self._close_by_rpc(params.get("session_id"), attached))
            if request.method == "tools/list":
                return rpc_result(request_id, {"tools": self.list_tools().observation["tools"]})
            if request.method == "tools/call":
                name = params.get("name")
                arguments = params.get("arguments") or {}
                if not isinstance(name, str) or not name or not isinstance(arguments, dict):
                    return rpc_error(
                        request_id, RpcCode.INVALID_PARAMS, "tools/call needs a 'name' and an object 'arguments'"
                    )
                if attached is None and "session_id" not in params:
                    raise RequestRefused("tools/call needs a 'session_id' (from openenv/session/create)")
                session = attached or self.session(params["session_id"])
                outcome = await self.call_tool(session, name, arguments)
                return rpc_result(request_id, _call_result(outcome))
            return rpc_error(request_id, RpcCode.METHOD_NOT_FOUND, f"Method not found: {request.method}")
        except RequestRefused as exc:
            code = RpcCode.SERVER_ERROR if exc.code is ErrorCode.CAPACITY_REACHED else RpcCode.INVALID_PARAMS
            return rpc_error(request_id, code, str(exc), exc.extra or None)

    async def _close_by_rpc(self, session_id: Any, attached: OpenEnvSession | None) -> dict[str, Any]:
        if not isinstance(session_id, str) or not session_id:
            raise RequestRefused("Invalid params - 'session_id' is required")
        if attached is not None and attached.id == session_id:
            raise RequestRefused("Cannot close the session of this WebSocket through MCP: send a close frame")
        session = self.session(session_id)
        if session.websocket_attached:
            session.close_when_detached = True
            return {"session_id": session_id, "closed": False, "closing": True}
        await self.destroy_session(session_id)
        return {"session_id": session_id, "closed": True}

    # ------------------------------------------------------------------------------------------ WebSocket

    async def websocket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        session: OpenEnvSession | None = None
        owned = False
        requested: str | None = None
        try:
            requested = websocket.query_params.get("session_id")
            if requested:
                wanted = self.session(requested)
                if wanted.websocket_attached:
                    raise RequestRefused(
                        f"Session {requested} already has an attached WebSocket", ErrorCode.SESSION_ERROR
                    )
                session = wanted
            else:
                session = await self.create_session()
                owned = True
            session.websocket_attached = True
            session.holder = asyncio.current_task()
            while True:
                raw = await _next_frame(websocket)
                session.touch()
                reply = await self._answer(session, raw)
                if reply is None:
                    break
                session.touch()
                await websocket.send_text(json.dumps(reply))
        except WebSocketDisconnect:
            pass
        except RequestRefused as exc:
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.send_text(json.dumps(error_frame(exc.code, str(exc), **exc.extra)))
        except asyncio.CancelledError:
            if session is None or not session.evicted:
                raise
            _uncancel()  # the idle sweep's cancellation, handled here: the socket is closed below
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close(IDLE_CLOSE_CODE, f"session idle for over {self.idle_timeout_s:g} s")
        finally:
            if session is not None:
                session.holder = None
                if owned or session.evicted or session.close_when_detached:
                    await self.destroy_session(session.id)
                elif requested:
                    session.websocket_attached = False
                    session.touch()
            if websocket.application_state is not WebSocketState.DISCONNECTED:
                with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                    await websocket.close()

    async def _answer(self, session: OpenEnvSession, raw: str | bytes) -> dict[str, Any] | None:
        """The reply frame to one incoming frame; None for ``close``. A bad frame gets an error frame."""
        try:
            message = decode_request(raw)
        except MalformedRequest as exc:
            return error_frame(ErrorCode.INVALID_JSON, f"Invalid JSON: {exc}")
        kind = message.get("type") if isinstance(message, dict) else None
        if not isinstance(kind, str) or kind not in FRAME_TYPES:
            return error_frame(ErrorCode.UNKNOWN_TYPE, f"Unknown message type: {shown(kind)}")
        try:
            incoming = _frames.validate_python(message)
        except ValidationError as exc:
            return error_frame(
                ErrorCode.VALIDATION_ERROR, f"Invalid message: {first_error(exc)}", errors=validation_errors(exc)
            )
        session.touch()
        try:
            if isinstance(incoming, ResetFrame):
                return frame("observation", (await self.reset(session, incoming.data)).envelope())
            if isinstance(incoming, StepFrame):
                return frame("observation", (await self.step(session, incoming)).envelope())
            if isinstance(incoming, McpFrame):
                return frame("mcp", await self.rpc(incoming.data, attached=session))
            assert isinstance(incoming, BareFrame)
            if incoming.type == "close":
                return None
            return frame("state", self.state(session).model_dump())
        except RequestRefused as exc:
            return error_frame(exc.code, str(exc), **exc.extra)
        except Exception as exc:
            logger.exception("OpenEnv session %s: %s failed", session.id, kind)
            return error_frame(ErrorCode.EXECUTION_ERROR, f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------------------------------ HTTP

    async def _mcp_endpoint(self, request: Request) -> Response:
        try:
            body = decode_request(await request.body())
        except MalformedRequest as exc:
            return JSONResponse(rpc_error(None, RpcCode.PARSE_ERROR, f"Parse error: {exc}"))
        try:
            return JSONResponse(await self.rpc(body))
        except Exception as exc:
            logger.exception("OpenEnv /mcp request failed")
            request_id = body.get("id") if isinstance(body, dict) else None
            return JSONResponse(rpc_error(request_id, RpcCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))

    def app(self) -> Starlette:
        environment = self.environment

        async def health(_: Request) -> Response:
            return JSONResponse({"status": "healthy"})

        async def metadata(_: Request) -> Response:
            return JSONResponse(
                {
                    "name": environment.id,
                    "description": environment.summary or environment.name,
                    "readme_content": server_instructions(environment),
                    "version": None,
                    "author": None,
                    "documentation_url": None,
                }
            )

        async def schema(_: Request) -> Response:
            return JSONResponse(
                {
                    "action": TypeAdapter(CallToolData).json_schema(),
                    "observation": {"type": "object"},
                    "reset_observation": {"type": "object"},
                    "state": EpisodeState.model_json_schema(),
                }
            )

        async def list_environments(_: Request) -> Response:
            return JSONResponse([environment.id])

        tasks = TaskApi(environment, lambda: self.scenarios)

        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            sweeper = asyncio.create_task(self._sweep()) if self.idle_timeout_s is not None else None
            try:
                yield
            finally:
                if sweeper is not None:
                    sweeper.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await sweeper
                await self.close_all()

        return Starlette(
            routes=[
                Route("/health", health, methods=["GET"]),
                Route("/metadata", metadata, methods=["GET"]),
                Route("/schema", schema, methods=["GET"]),
                Route("/mcp", self._mcp_endpoint, methods=["POST"]),
                Route("/list_environments", list_environments, methods=["GET"]),
                Route("/{env_name}/{operation}", tasks.endpoint, methods=["GET", "POST"]),
                WebSocketRoute("/ws", self.websocket),
            ],
            lifespan=lifespan,
        )

    def http_server(self, access: AccessPolicy, host: str, port: int, *, log_level: str = "warning") -> uvicorn.Server:
        """A uvicorn server for :meth:`app` behind the access guard; run it with ``serve()``."""
        quiet_utf8_refusals()
        config = uvicorn.Config(
            AccessGuard(self.app(), access),
            host=host,
            port=port,
            log_level=log_level,
            log_config=None,  # uvicorn's records go through the process's handlers, which redact secrets
            access_log=False,
            lifespan="on",
            ws="websockets-sansio",
            ws_max_size=access.max_request_bytes,
            timeout_graceful_shutdown=2,
        )
        return uvicorn.Server(config)

    async def serve(self, access: AccessPolicy, host: str, port: int, *, sock: socket.socket | None = None) -> None:
        """Serve (on ``sock`` when given) until interrupted, then close every session's jailed episode."""
        try:
            await self.http_server(access, host, port).serve(sockets=[sock] if sock is not None else None)
        finally:
            await self.close_all()


async def _next_frame(websocket: WebSocket) -> str | bytes:
    """The next data frame, text or binary. Pings and pongs never reach here: the WebSocket layer answers them."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    text = message.get("text")
    if text is not None:
        return str(text)
    return bytes(message.get("bytes") or b"")


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _assistant_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": f"call_{secrets.token_hex(4)}", **call}]}


def _call_result(outcome: Outcome) -> dict[str, Any]:
    """A ``tools/call`` result: ``data`` is what ``MCPToolClient.call_tool`` returns; done and reward ride along."""
    text = str(outcome.observation.get("result") or "")
    return {
        "content": [{"type": "text", "text": text}],
        "data": text,
        "is_error": False,
        "done": outcome.done,
        "reward": outcome.reward,
        "metadata": outcome.metadata,
    }
