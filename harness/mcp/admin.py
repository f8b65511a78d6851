"""The wire vocabulary shared by the MCP server and client: administrative methods and ``_meta`` keys.

Administrative operations (load a scenario's initial state into this session, read its state for scoring,
release it) are custom JSON-RPC request methods of the MCP extension :data:`ADMIN_EXTENSION` (SEP-2133),
not tools: they never appear in ``tools/list``, so an agent that works from the tool listing cannot see or
call them.
"""

from __future__ import annotations

from typing import Any, Literal

from mcp_types import Request, RequestParams, Result
from pydantic import Field

ADMIN_EXTENSION = "io.github.envharness/admin"
"""Identifier of the administrative extension."""

LOAD_STATE = "envharness/load_state"
READ_STATE = "envharness/read_state"
CLOSE_SESSION = "envharness/close_session"

SESSION_META_KEY = "io.github.envharness/session"
"""Request ``_meta`` key holding a client-chosen session key. Needed only where the protocol has no session
(2026-07-28 connections over HTTP); it takes precedence over the MCP session when given."""

OBSERVATION_META_KEY = "io.github.envharness/observation"
"""Result ``_meta`` key of a tool call: ``{"kind": ObservationKind, "error": str | None, "process_ended": bool}``
(``process_ended``: the environment failed, its class could not be built or its process kept ending on its own)
and, when the request asked for it, ``"diff"`` (the state changes of the call)."""

ENVIRONMENT_FAILED = {"environment_failed": True}
"""The ``data`` of an administrative method's error when the environment failed (not the sandbox, not the
request): a client scores its episode as the environment's failure."""

DIFF_META_KEY = "io.github.envharness/diff"
"""Request ``_meta`` flag: include the call's state diff in the result's observation metadata."""

DESCRIBE = "envharness/describe"

START_TOOL = "start_episode"
"""Tool that mints an episode handle (listed to 2026-07-28 clients only)."""
END_TOOL = "end_episode"
"""Tool that releases an episode handle's instance (listed to 2026-07-28 clients only)."""
HANDLE_ARGUMENT = "episode_handle"
"""Optional argument of every environment tool, as listed to 2026-07-28 clients: the handle from
:data:`START_TOOL`. The protocol's way to carry state across sessionless calls."""


class HandleParams(RequestParams):
    """Parameters of an administrative request; ``handle`` picks the episode when the caller has one."""

    handle: str | None = None


class LoadStateParams(HandleParams):
    """Replace this session's environment instance with one built from ``state`` (or, when ``state`` is
    None, from the initial state of ``scenario_id`` in the server's library, or the server's default state)."""

    state: dict[str, Any] | None = None
    scenario_id: str | None = None
    seed: int = Field(default=0, ge=-(1 << 63), lt=1 << 63)


class LoadStateResult(Result):
    environment_id: str
    scenario_id: str | None = None


class StateResult(Result):
    state: dict[str, Any]


class ClosedResult(Result):
    closed: bool


class LoadStateRequest(Request[LoadStateParams, Literal["envharness/load_state"]]):
    method: Literal["envharness/load_state"] = "envharness/load_state"


class DescribeResult(Result):
    """What the server serves: the environment id (so a client can refuse scenarios of another environment)
    and the names of the handle pattern's tool and argument."""

    environment_id: str
    start_tool: str = START_TOOL
    end_tool: str = END_TOOL
    handle_argument: str = HANDLE_ARGUMENT


class ReadStateRequest(Request[HandleParams, Literal["envharness/read_state"]]):
    method: Literal["envharness/read_state"] = "envharness/read_state"
    params: HandleParams = HandleParams()


class CloseSessionRequest(Request[HandleParams, Literal["envharness/close_session"]]):
    method: Literal["envharness/close_session"] = "envharness/close_session"
    params: HandleParams = HandleParams()


class DescribeRequest(Request[RequestParams, Literal["envharness/describe"]]):
    method: Literal["envharness/describe"] = "envharness/describe"
    params: RequestParams = RequestParams()
