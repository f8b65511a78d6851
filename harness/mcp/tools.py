"""The tools an environment server lists: the environment's own, and the handle pattern's ``start_episode`` /
``end_episode`` (listed to sessionless 2026-07-28 clients only, with the optional ``episode_handle`` argument added
to every environment tool). A tool only checks its arguments are plain JSON within the request limits, then hands
the call to the server that bound it (:meth:`EnvironmentTool.bound`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastmcp.server.context import Context
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools.base import Tool, ToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import PrivateAttr

from harness.jsonlimits import UnsafeJSON, check_json
from harness.mcp.access import REQUEST_LIMITS
from harness.mcp.admin import HANDLE_ARGUMENT, START_TOOL
from harness.mcp.replies import tool_result
from harness.schema import Observation, ObservationKind, ToolCall

ToolDispatch = Callable[[str, dict[str, Any]], Awaitable[ToolResult]]


def error_observation(
    call: ToolCall, kind: ObservationKind, message: str, *, process_ended: bool = False
) -> Observation:
    return Observation(tool_call_id=call.id, name=call.name, kind=kind, error=message, process_ended=process_ended)


def environment_failure(call: ToolCall, exc: Exception) -> Observation:
    """The observation of a call whose environment failed (its class could not be built, or its process kept
    ending on its own): the environment's failure, as ``harness run`` records it, never the sandbox's."""
    return error_observation(call, ObservationKind.TOOL_EXCEPTION, str(exc), process_ended=True)


class EnvironmentTool(Tool):
    """An environment tool: its schema and description as declared, its calls sent to the session's instance."""

    _dispatch: ToolDispatch | None = PrivateAttr(default=None)

    def bound(self, dispatch: ToolDispatch) -> EnvironmentTool:
        """This tool, its calls going to ``dispatch(name, arguments)``."""
        self._dispatch = dispatch
        return self

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        assert self._dispatch is not None, "EnvironmentTool used without a dispatcher"
        try:
            check_json(arguments, REQUEST_LIMITS)
        except UnsafeJSON as exc:
            call = ToolCall(id="refused", name=self.name, arguments={})
            message = f"the arguments are not usable: the value {exc}"
            return tool_result(error_observation(call, ObservationKind.INVALID_ARGUMENTS, message))
        return await self._dispatch(self.name, arguments)


class EpisodeTool(EnvironmentTool):
    """``start_episode`` / ``end_episode``: the handle pattern's tools, listed to 2026-07-28 clients only."""


HANDLE_SCHEMA = {
    "type": "string",
    "description": f"The episode handle returned by {START_TOOL}; it selects your environment instance.",
}
START_SCHEMA = {
    "type": "object",
    "properties": {
        "scenario_id": {"type": "string", "description": "Start from this scenario's initial state."},
        "seed": {"type": "integer", "description": "Seed of the frozen clock, uuid and random generators."},
    },
    "required": [],
}
END_SCHEMA = {"type": "object", "properties": {HANDLE_ARGUMENT: HANDLE_SCHEMA}, "required": [HANDLE_ARGUMENT]}


def with_handle(parameters: dict[str, Any]) -> dict[str, Any]:
    """A tool's schema with the optional episode handle added (for 2026-07-28 listings)."""
    schema = dict(parameters or {"type": "object"})
    schema["properties"] = {**(schema.get("properties") or {}), HANDLE_ARGUMENT: HANDLE_SCHEMA}
    return schema


def is_sessionless_http(ctx: Context | None) -> bool:
    """A 2026-07-28 request over HTTP: nothing but a handle (or a _meta key) can tie it to an episode."""
    request_context = ctx.request_context if ctx is not None else None
    if request_context is None or ctx is None or ctx.transport == "stdio":
        return False
    return request_context.protocol_version in MODERN_PROTOCOL_VERSIONS


class ProtocolListing(Middleware):
    """Lists the handle pattern only to sessionless HTTP clients; handshake-era clients and stdio (one client
    per server process) see the declared tools."""

    async def on_list_tools(self, context: MiddlewareContext[Any], call_next: Any) -> Sequence[Tool]:
        tools: Sequence[Tool] = await call_next(context)
        if not is_sessionless_http(context.fastmcp_context):
            return [tool for tool in tools if not isinstance(tool, EpisodeTool)]
        listed: list[Tool] = []
        for tool in tools:
            if isinstance(tool, EpisodeTool):
                listed.append(tool)
            else:
                listed.append(tool.model_copy(update={"parameters": with_handle(tool.parameters)}))
        return listed


__all__ = [
    "END_SCHEMA",
    "HANDLE_SCHEMA",
    "START_SCHEMA",
    "EnvironmentTool",
    "EpisodeTool",
    "ProtocolListing",
    "ToolDispatch",
    "error_observation",
    "is_sessionless_http",
    "with_handle",
]
