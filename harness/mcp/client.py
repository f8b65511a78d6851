"""An environment reached over MCP, with the surface the episode loop uses from a sandbox session.

:class:`McpToolSession` connects to a server (a command spawned over stdio, or a streamable HTTP URL) with the
fastmcp client, lists its tools (to build :class:`~harness.schema.ToolSpec` records and an
:class:`~harness.schema.Environment`), loads a scenario's initial state, runs tool calls and reads the state
back for scoring. State goes through administrative operations the agent never sees, in one of two styles:

- ``extension``: the request methods of :data:`~harness.mcp.admin.ADMIN_EXTENSION` (what ``harness serve``
  offers);
- ``tools``: EnvFactory's style, a pair of tools (``load_scenario(state)`` and ``save_scenario() -> state``
  by default) that are removed from the tools the agent is shown.
"""

from __future__ import annotations

import json
import logging
import shlex
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from harness.mcp.admin import (
    ADMIN_EXTENSION,
    DIFF_META_KEY,
    END_TOOL,
    HANDLE_ARGUMENT,
    OBSERVATION_META_KEY,
    SESSION_META_KEY,
    START_TOOL,
    ClosedResult,
    CloseSessionRequest,
    DescribeRequest,
    DescribeResult,
    HandleParams,
    LoadStateParams,
    LoadStateRequest,
    LoadStateResult,
    ReadStateRequest,
    StateResult,
)
from harness.mcp.credential import public_target
from harness.sandbox import EnvironmentFailed, EnvironmentLoadError, SandboxError
from harness.sandbox.arguments import CallRejected, validate_call
from harness.schema import (
    DiffEntry,
    Environment,
    FunctionSpec,
    Observation,
    ObservationKind,
    Provenance,
    ToolCall,
    ToolSpec,
)
from harness.states.diff import diff_values

logger = logging.getLogger(__name__)

AdminStyle = Literal["auto", "extension", "tools"]
_KINDS = {kind.value: kind for kind in ObservationKind}


class McpConnectionError(SandboxError):
    """The MCP server could not be reached, or failed at the protocol level (an infrastructure error)."""


class McpAdminError(McpConnectionError):
    """An administrative operation (load or read the state) failed."""


@dataclass(frozen=True)
class McpTarget:
    """Where an MCP environment server is: a streamable HTTP ``url``, or a ``command`` to spawn over stdio.

    A URL may hold the server's credential (``harness serve`` prints one with its token as the path's first
    segment): it is registered as a secret, and the target is shown (``str``, ``repr``) without it."""

    url: str | None = None
    command: tuple[str, ...] = ()
    env: dict[str, str] | None = field(default=None, compare=False)
    cwd: str | None = None

    def __post_init__(self) -> None:
        if (self.url is None) == (not self.command):
            raise ValueError("an MCP target is either a URL or a command")
        if self.url is not None:
            public_target(self.url)  # registers the URL's credential as a secret

    def __repr__(self) -> str:
        return f"McpTarget({str(self)!r})"

    @classmethod
    def parse(cls, text: str) -> McpTarget:
        """``http(s)://...`` is a URL; anything else is a command line (split like a shell would)."""
        text = text.strip()
        if text.startswith(("http://", "https://")):
            return cls(url=text)
        command = tuple(shlex.split(text))
        if not command:
            raise ValueError("an empty MCP target")
        return cls(command=command)

    def __str__(self) -> str:
        """The target as it may be shown or recorded: a URL's credential replaced."""
        return public_target(self.url) if self.url is not None else shlex.join(self.command)

    def client(self, *, mode: str, timeout_s: float) -> Client[Any]:
        transport: StdioTransport | StreamableHttpTransport
        if self.url is not None:
            transport = StreamableHttpTransport(self.url)
        else:
            transport = StdioTransport(
                self.command[0], list(self.command[1:]), env=self.env, cwd=self.cwd, keep_alive=False
            )
        return Client(transport, mode=mode, timeout=timeout_s, init_timeout=timeout_s)


class McpToolSession:
    """One environment instance on an MCP server, used like :class:`harness.sandbox.EnvSession`.

    ``mode`` is the fastmcp connection mode: ``"auto"`` (the default) speaks the sessionless 2026-07-28
    protocol when the server does, ``"legacy"`` pins a handshake-era protocol whose MCP session identifies the
    instance. On a sessionless connection to a server that offers the handle pattern (``start_episode``), the
    session starts an episode, keeps the handle and adds it to every call; the handle's tools and argument
    are removed from :attr:`tools`, so the agent never sees them. Against other sessionless servers a random
    session key travels in each request's ``_meta``. ``record_diffs`` asks for each call's state diff (from the
    server when it offers them, else by reading the state before and after).
    """

    def __init__(
        self,
        target: McpTarget | str,
        *,
        mode: str = "auto",
        admin: AdminStyle = "auto",
        load_tool: str = "load_scenario",
        save_tool: str = "save_scenario",
        record_diffs: bool = True,
        timeout_s: float = 60.0,
    ) -> None:
        self.target = target if isinstance(target, McpTarget) else McpTarget.parse(target)
        self.mode = mode
        self.admin: AdminStyle = admin
        self.load_tool = load_tool
        self.save_tool = save_tool
        self.record_diffs = record_diffs
        self.timeout_s = timeout_s
        self.tools: list[ToolSpec] = []
        self.instructions: str | None = None
        self.server_name: str = ""
        self._tool_index: dict[str, ToolSpec] = {}
        self._admin_tools: dict[str, ToolSpec] = {}
        self._client: Client[Any] | None = None
        self._session_key = uuid.uuid4().hex
        self._sessionless = False
        self._uses_handles = False
        self._handle: str | None = None
        self._last_state: dict[str, Any] | None = None
        self._closed = False

    # ------------------------------------------------------------------------------------------ lifecycle

    async def connect(self) -> McpToolSession:
        """Connect, read the instructions and the tool listing, and settle the administrative style."""
        if self._client is not None:
            return self
        client = self.target.client(mode=self.mode, timeout_s=self.timeout_s)
        try:
            await client.__aenter__()
        except Exception as exc:
            raise McpConnectionError(f"cannot connect to the MCP server {self.target}: {exc}") from exc
        self._client = client
        try:
            self._sessionless = client.protocol_version in MODERN_PROTOCOL_VERSIONS
            self.instructions = client.instructions
            info = client.server_info
            self.server_name = info.name if info is not None else ""
            listing = await client.list_tools()
        except Exception as exc:
            await self._disconnect()
            raise McpConnectionError(f"listing the tools of {self.target} failed: {exc}") from exc
        specs = [
            ToolSpec(
                function=FunctionSpec(
                    name=tool.name,
                    description=tool.description or "",
                    parameters=dict(tool.input_schema or {"type": "object", "properties": {}}),
                )
            )
            for tool in listing
        ]
        self.admin = self._settle_admin_style(client, {spec.name for spec in specs})
        hidden = {self.load_tool, self.save_tool} if self.admin == "tools" else set()
        names = {spec.name for spec in specs}
        self._uses_handles = self._sessionless and self.admin == "extension" and START_TOOL in names
        if self._uses_handles:
            hidden |= {START_TOOL, END_TOOL}
            specs = [_without_handle(spec) for spec in specs]
        self._admin_tools = {spec.name: spec for spec in specs if spec.name in hidden}
        self.tools = [spec for spec in specs if spec.name not in hidden]
        self._tool_index = {spec.name: spec for spec in self.tools}
        return self

    def _settle_admin_style(self, client: Client[Any], tool_names: set[str]) -> AdminStyle:
        if self.admin != "auto":
            return self.admin
        capabilities = client.server_capabilities
        extensions = getattr(capabilities, "extensions", None) or {}
        if ADMIN_EXTENSION in extensions:
            return "extension"
        if self.load_tool in tool_names and self.save_tool in tool_names:
            return "tools"
        return "extension"

    async def close(self) -> None:
        """Release the server's instance and disconnect (a stdio server process ends with it)."""
        if self._closed:
            return
        self._closed = True
        if self._client is not None and self.admin == "extension":
            try:
                await self._client.session.send_request(CloseSessionRequest(params=self._handle_params()), ClosedResult)
            except Exception as exc:
                logger.debug("releasing the MCP session on %s failed: %s", self.target, exc)
        await self._disconnect()

    async def _disconnect(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        try:
            await client.__aexit__(None, None, None)
        except Exception as exc:
            logger.warning("disconnecting from the MCP server %s failed: %s", self.target, exc)

    async def __aenter__(self) -> McpToolSession:
        return await self.connect()

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    # -------------------------------------------------------------------------------------- the record

    def environment(self, environment_id: str | None = None, *, name: str | None = None) -> Environment:
        """An :class:`Environment` record of the served environment: its tools from the listing, its
        introduction from the server's instructions. It has no code: it is only reachable over MCP."""
        self._require_client()
        env_id = environment_id or self.server_name or "mcp-environment"
        return Environment(
            id=env_id,
            name=name or self.server_name or env_id,
            introduction=self.instructions or "",
            tools=list(self.tools),
            class_name="",
            code="",
            provenance=Provenance(source="mcp", details={"target": str(self.target), "admin": self.admin}),
        )

    async def served_environment_id(self) -> str | None:
        """The environment id the server says it serves (None when it does not say: not ``harness serve``)."""
        client = self._require_client()
        if self.admin != "extension":
            return None
        try:
            result = await client.session.send_request(DescribeRequest(), DescribeResult)
        except Exception as exc:
            logger.debug("%s does not describe itself: %s", self.target, exc)
            return None
        return result.environment_id

    # ------------------------------------------------------------------------------------- admin state

    async def _start_episode(self) -> None:
        """Start an episode the 2026-07-28 way and keep its handle."""
        payload = await self._admin_tool(START_TOOL, {})
        handle = payload.get(HANDLE_ARGUMENT) if isinstance(payload, dict) else None
        if not isinstance(handle, str):
            raise McpAdminError(f"{START_TOOL!r} on {self.target} returned no {HANDLE_ARGUMENT}: {payload!r:.200}")
        self._handle = handle

    async def load_state(self, state: dict[str, Any], *, seed: int = 0) -> None:
        """Make this session's instance a fresh one built from ``state``."""
        client = self._require_client()
        try:
            if self.admin == "tools":
                await self._admin_tool(self.load_tool, self._load_arguments(state))
            else:
                if self._uses_handles and self._handle is None:
                    await self._start_episode()
                params = LoadStateParams.model_validate(
                    {"state": state, "seed": seed, "handle": self._handle, "_meta": self._request_meta()}
                )
                await client.session.send_request(LoadStateRequest(params=params), LoadStateResult)
        except (McpAdminError, EnvironmentLoadError):
            raise
        except MCPError as exc:
            if _environment_failed(exc):
                raise EnvironmentLoadError(f"the environment served at {self.target} failed: {exc}") from exc
            raise McpAdminError(f"loading a state into {self.target} failed: {exc}") from exc
        except Exception as exc:
            raise McpAdminError(f"loading a state into {self.target} failed: {exc}") from exc
        self._last_state = None

    async def state(self, *, shared: bool = False) -> dict[str, Any]:
        """The instance's current state (for scoring); always a fresh object (``shared`` changes nothing)."""
        client = self._require_client()
        try:
            if self.admin == "tools":
                value = await self._admin_tool(self.save_tool, {})
                if not isinstance(value, dict):
                    raise McpAdminError(f"{self.save_tool!r} did not return a state object: {value!r:.200}")
                return value
            result = await client.session.send_request(ReadStateRequest(params=self._handle_params()), StateResult)
        except McpAdminError:
            raise
        except MCPError as exc:
            if _environment_failed(exc):
                raise EnvironmentFailed(f"the environment served at {self.target} failed: {exc}") from exc
            raise McpAdminError(f"reading the state from {self.target} failed: {exc}") from exc
        except Exception as exc:
            raise McpAdminError(f"reading the state from {self.target} failed: {exc}") from exc
        return result.state

    def _load_arguments(self, state: dict[str, Any]) -> dict[str, Any]:
        """The load tool's single parameter receives the state; with several parameters, the state is the
        argument object itself."""
        spec = self._admin_tools.get(self.load_tool)
        properties = list(((spec.function.parameters if spec else {}) or {}).get("properties") or {})
        return {properties[0]: state} if len(properties) == 1 else dict(state)

    async def _admin_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        result = await self._require_client().call_tool_mcp(
            name, arguments, meta=self._request_meta(), timeout=self.timeout_s
        )
        text = _text_of(result)
        if result.is_error:
            details = (result.meta or {}).get(OBSERVATION_META_KEY)
            if isinstance(details, dict) and details.get("process_ended") is True:
                raise EnvironmentLoadError(f"the environment served at {self.target} failed: {text[:500]}")
            raise McpAdminError(f"{name!r} failed on {self.target}: {text[:500]}")
        payload = result.structured_content if result.structured_content is not None else _parse_json(text)
        # fastmcp wraps a non-object return value as {"result": value}.
        if isinstance(payload, dict) and set(payload) == {"result"} and isinstance(payload["result"], dict):
            return payload["result"]
        return payload

    # --------------------------------------------------------------------------------------- tool calls

    async def call(self, call: ToolCall) -> tuple[Observation, list[DiffEntry]]:
        """Run one tool call on the server. Failures of the call itself come back as error observations."""
        client = self._require_client()
        if call.arguments is None or call.name not in self._tool_index:
            try:
                validate_call(call, self._tool_index)
            except CallRejected as rejected:
                observation = Observation(tool_call_id=call.id, name=call.name, kind=rejected.kind, error=str(rejected))
                return observation, []
        assert call.arguments is not None
        server_diffs = self.record_diffs and self.admin == "extension"
        meta = self._request_meta()
        arguments = dict(call.arguments)
        if self._uses_handles:
            if self._handle is None:
                await self._start_episode()
            arguments[HANDLE_ARGUMENT] = self._handle
        if server_diffs:
            meta[DIFF_META_KEY] = True
        before = self._last_state
        if self.record_diffs and not server_diffs and before is None:
            before = await self.state()
        try:
            result = await client.call_tool_mcp(call.name, arguments, meta=meta, timeout=self.timeout_s)
        except MCPError as exc:
            raise McpConnectionError(f"tool call {call.name!r} failed at the protocol level: {exc}") from exc
        except Exception as exc:
            raise McpConnectionError(f"tool call {call.name!r} to {self.target} failed: {exc}") from exc
        observation, diff = observation_from_result(call, result)
        if self.record_diffs and diff is None and before is not None:
            after = await self.state()
            diff = [DiffEntry.model_validate(entry) for entry in diff_values(before, after)]
            self._last_state = after
        return observation, diff or []

    # -------------------------------------------------------------------------------------------- helpers

    def _request_meta(self) -> dict[str, Any]:
        return {SESSION_META_KEY: self._session_key} if self._sessionless and not self._uses_handles else {}

    def _handle_params(self) -> HandleParams:
        return HandleParams.model_validate({"handle": self._handle, "_meta": self._request_meta()})

    def _require_client(self) -> Client[Any]:
        if self._closed:
            raise McpConnectionError("the MCP session is closed")
        if self._client is None:
            raise McpConnectionError("the MCP session is not connected (call connect() first)")
        return self._client


def _without_handle(spec: ToolSpec) -> ToolSpec:
    """The tool as the agent should see it: without the episode handle argument."""
    parameters = dict(spec.function.parameters or {})
    properties = dict(parameters.get("properties") or {})
    if HANDLE_ARGUMENT not in properties:
        return spec
    properties.pop(HANDLE_ARGUMENT)
    parameters["properties"] = properties
    if isinstance(parameters.get("required"), list):
        parameters["required"] = [name for name in parameters["required"] if name != HANDLE_ARGUMENT]
    return spec.model_copy(update={"function": spec.function.model_copy(update={"parameters": parameters})})


def observation_from_result(call: ToolCall, result: CallToolResult) -> tuple[Observation, list[DiffEntry] | None]:
    """An MCP tool result as an observation (and the call's diff, when the server sent one).

    A result from ``harness serve`` carries its observation kind in ``_meta``; for any other server, an error
    result or a ``{"success": false}`` object is a tool error, as in the sandbox runtime.
    """
    text = _text_of(result)
    payload = result.structured_content if result.structured_content is not None else _parse_json(text)
    details = (result.meta or {}).get(OBSERVATION_META_KEY)
    if isinstance(details, dict) and details.get("kind") in _KINDS:
        kind = _KINDS[details["kind"]]
        diff_entries = details.get("diff")
        diff = [DiffEntry.model_validate(d) for d in diff_entries] if isinstance(diff_entries, list) else None
        if kind is ObservationKind.OK:
            return Observation(tool_call_id=call.id, name=call.name, content=payload), diff
        content = payload if kind is ObservationKind.TOOL_ERROR and details.get("has_content") else None
        error = details.get("error") or text
        ended = details.get("process_ended") is True
        observation = Observation(
            tool_call_id=call.id, name=call.name, kind=kind, content=content, error=str(error), process_ended=ended
        )
        return observation, diff
    if result.is_error:
        return (
            Observation(
                tool_call_id=call.id,
                name=call.name,
                kind=ObservationKind.TOOL_ERROR,
                content=payload if isinstance(payload, dict) else None,
                error=text or "the tool reported an error",
            ),
            None,
        )
    if isinstance(payload, dict) and payload.get("success") is False:
        error = payload.get("error") or payload.get("message") or "the tool reported failure"
        observation = Observation(
            tool_call_id=call.id, name=call.name, kind=ObservationKind.TOOL_ERROR, content=payload, error=str(error)
        )
        return observation, None
    return Observation(tool_call_id=call.id, name=call.name, content=payload), None


def _text_of(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content if getattr(block, "type", "") == "text")


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


__all__ = [
    "McpAdminError",
    "McpConnectionError",
    "McpTarget",
    "McpToolSession",
    "observation_from_result",
]


def _environment_failed(exc: MCPError) -> bool:
    """Whether an administrative method's error says the environment failed (``admin.ENVIRONMENT_FAILED``)."""
    data = getattr(exc, "data", None)
    return isinstance(data, dict) and data.get("environment_failed") is True
