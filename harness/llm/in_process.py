"""Shared pieces of the in-process models: request unpacking and message normalising (no litellm here)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import orjson

# Parameters an in-process model is handed (besides messages and tools) when the caller set them.
FORWARDED_PARAMETERS = ("temperature", "top_p", "max_tokens", "seed", "stop", "tool_choice", "extra_body")


def estimate_tokens(data: Any) -> int:
    """A cheap token estimate (about four bytes of JSON per token) for models that do not count."""
    return max(1, len(orjson.dumps(data, default=str)) // 4)


def normalize_tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """Accept ``{"name", "arguments"}`` or the OpenAI shape; arguments may be a dict or JSON text."""
    function = call.get("function") if isinstance(call.get("function"), Mapping) else call
    assert isinstance(function, Mapping)
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments).decode()
    return {
        "id": str(call.get("id") or f"call_{uuid.uuid4().hex[:12]}"),
        "type": "function",
        "function": {"name": str(function.get("name", "")), "arguments": arguments},
    }


def normalize_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """An assistant message dict in OpenAI shape (without None tool_calls)."""
    normalized: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    tool_calls = message.get("tool_calls")
    if tool_calls:
        normalized["tool_calls"] = [normalize_tool_call(call) for call in tool_calls]
    if message.get("reasoning_content"):
        normalized["reasoning_content"] = message["reasoning_content"]
    return normalized


def request_parameters(optional_params: Mapping[str, Any]) -> dict[str, Any]:
    return {name: optional_params[name] for name in FORWARDED_PARAMETERS if optional_params.get(name) is not None}
