"""The records of OpenEnv 0.10's wire protocol, written from its documented behaviour (openenv is not importable
here: it pins ``fastmcp<4``).

An OpenEnv server speaks two channels that share one session table:

- WebSocket ``/ws``: frames ``{"type": "reset"|"step"|"state"|"close"|"mcp", "data": ...}`` answered by
  ``{"type": "observation"|"state"|"error"|"mcp", "data": ...}``;
- HTTP ``POST /mcp``: JSON-RPC 2.0 with ``tools/list``, ``tools/call`` and the session methods
  ``openenv/session/create`` / ``openenv/session/close``.

An observation travels as ``{"observation": {...}, "reward": float | None, "done": bool, "metadata"?: {...}}``;
the client tells a tools listing (key ``tools``) and a tool call's answer (key ``tool_name``) apart by the keys of
``observation``.
"""

from __future__ import annotations

import logging
from enum import IntEnum, StrEnum
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from harness.jsonlimits import UnsafeJSON, check_decoded_json
from harness.mcp.access import REQUEST_LIMITS as REQUEST_JSON_LIMITS
from harness.schema import Environment

REQUEST_LIMITS = REQUEST_JSON_LIMITS
"""What one request body or frame may hold (the size in bytes is bounded before, by the access guard and the
WebSocket layer)."""
MAX_SEED = (1 << 63) - 1


class MalformedRequest(ValueError):
    """A body or frame that is not JSON, or JSON outside :data:`REQUEST_LIMITS` (the message says why)."""


def decode_request(raw: bytes | str) -> Any:
    """The JSON value of a request body or frame, within :data:`REQUEST_LIMITS`."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedRequest(f"not JSON: {exc}") from None
    try:
        check_decoded_json(value, REQUEST_LIMITS, len(raw))
    except UnsafeJSON as exc:
        raise MalformedRequest(f"the value {exc}") from None
    return value


class ErrorCode(StrEnum):
    """The ``code`` of a WebSocket error frame."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    SESSION_ERROR = "SESSION_ERROR"


class RpcCode(IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    SERVER_ERROR = -32000


class ToolErrorKind(StrEnum):
    """``error.error_type`` of a tool call that did not reach the environment."""

    INVALID_ARGS = "invalid_args"
    TOOL_NOT_FOUND = "tool_not_found"
    EXECUTION_ERROR = "execution_error"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResetData(BaseModel):
    """``reset`` parameters. Unknown keys are ignored, as OpenEnv passes a reset only the keywords it accepts."""

    model_config = ConfigDict(extra="ignore")

    seed: StrictInt | None = Field(default=None, ge=0, le=MAX_SEED)
    episode_id: str | None = Field(default=None, max_length=255)
    scenario_id: str | None = Field(default=None, max_length=255)


class TaskQuery(BaseModel):
    """The body of a task API request (``tasks``, ``num_tasks``, ``task``, ``task_range``)."""

    model_config = ConfigDict(extra="ignore")

    split: str | None = None
    index: StrictInt | None = None
    start: StrictInt | None = None
    stop: StrictInt | None = None


class ListToolsData(Strict):
    type: Literal["list_tools"]
    metadata: dict[str, Any] = Field(default_factory=dict)


class CallToolData(Strict):
    type: Literal["call_tool"]
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


McpAction = Annotated[ListToolsData | CallToolData, Field(discriminator="type")]


class StepFrame(Strict):
    type: Literal["step"]
    data: McpAction


class ResetFrame(Strict):
    type: Literal["reset"]
    data: dict[str, Any] = Field(default_factory=dict)


class BareFrame(Strict):
    """``state`` and ``close``: no payload."""

    type: Literal["state", "close"]


class McpFrame(Strict):
    type: Literal["mcp"]
    data: dict[str, Any]


IncomingFrame = Annotated[StepFrame | ResetFrame | BareFrame | McpFrame, Field(discriminator="type")]
FRAME_TYPES = ("reset", "step", "state", "close", "mcp")


class RpcRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jsonrpc: Literal["2.0"] = "2.0"
    method: str
    params: dict[str, Any] = Field(default_factory=dict)
    id: str | int | None = None


class ToolError(Strict):
    error_type: ToolErrorKind
    message: str


class Outcome(Strict):
    """What a step observed: the OpenEnv envelope's payload before it is framed."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    def envelope(self) -> dict[str, Any]:
        """``{"observation", "reward", "done", "metadata"?}``, metadata also inside the observation."""
        envelope: dict[str, Any] = {
            "observation": {**self.observation, "metadata": self.metadata},
            "reward": self.reward,
            "done": self.done,
        }
        if self.metadata:
            envelope["metadata"] = self.metadata
        return envelope


class EpisodeState(Strict):
    """The answer to ``state``: OpenEnv's ``episode_id`` and ``step_count``, then this server's own fields."""

    episode_id: str | None
    step_count: int
    session_id: str
    scenario_id: str | None
    done: bool
    reward: float | None
    termination: str | None


def frame(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "data": data}


def error_frame(code: ErrorCode, message: str, **extra: Any) -> dict[str, Any]:
    return frame("error", {"message": message, "code": code.value, **extra})


def rpc_result(request_id: str | int | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def rpc_error(request_id: str | int | None, code: RpcCode, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": int(code), "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def tool_listing(environment: Environment, extra_tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools as OpenEnv lists them: name, description and the JSON schema of the arguments."""
    tools = [
        {
            "name": spec.function.name,
            "description": spec.function.description or "",
            "input_schema": spec.function.parameters or {"type": "object", "properties": {}, "required": []},
        }
        for spec in environment.tools
    ]
    return tools + extra_tools


def first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as ``where: what`` (never the value itself)."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "message"
    return f"{where}: {error['msg']}"


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]


def shown(value: Any) -> str:
    """An outside value in a reply, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Utf8RefusalQuiet(logging.Filter):
    """uvicorn closes a WebSocket whose text frame is not UTF-8 (code 1007), and logs the decoding error with its
    traceback: a client's bad input, not a failure of the server. The record keeps its line, at warning level."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Invalid UTF-8 sequence"):
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_utf8_refusals() -> None:
    """Put :class:`Utf8RefusalQuiet` on uvicorn's logger (once)."""
    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, Utf8RefusalQuiet) for f in uvicorn_log.filters):
        uvicorn_log.addFilter(Utf8RefusalQuiet())
