"""A direct route to OpenAI-compatible chat completions (vLLM, OpenAI), bypassing litellm's request pipeline.

Through litellm one call costs about 1.5 ms of CPU on top of the HTTP request (logging objects, parameter
mapping, response model construction); at hundreds of requests per second that is the runner's ceiling on a
small machine. For the two providers that speak the OpenAI wire format as-is (``hosted_vllm/``, ``openai/``)
this module posts the request itself on the client's shared aiohttp pool and reads the answer with orjson.
Limits, retries, the cache and usage accounting are the client's, exactly as on the litellm route, and errors
are raised as exceptions that :func:`harness.llm.retry.classify` reads the same way (status code, headers).
``HARNESS_LLM_ROUTE=litellm`` sends these providers through litellm instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from harness.llm.errors import ContextWindowExceeded

ROUTE_VARIABLE = "HARNESS_LLM_ROUTE"
DIRECT_PROVIDERS = frozenset({"hosted_vllm", "openai"})

# Parameters of a litellm request that are not part of the OpenAI request body.
_NOT_IN_BODY = frozenset(
    {"model", "timeout", "max_retries", "num_retries", "api_base", "api_key", "client", "extra_body", "extra_headers"}
)
_CONTEXT_OVERFLOW = re.compile(
    r"context length|context window|context_length_exceeded|maximum context|too many tokens|prompt is too long",
    re.IGNORECASE,
)


def direct_route_enabled() -> bool:
    return os.environ.get(ROUTE_VARIABLE, "direct").lower() != "litellm"


class EndpointHTTPError(Exception):
    """A non-2xx answer. ``status_code`` and ``headers`` are what the retry classifier reads."""

    def __init__(self, status_code: int, message: str, headers: Mapping[str, str]):
        super().__init__(f"{status_code}: {message}")
        self.status_code = status_code
        self.headers = headers


@dataclass
class _Function:
    name: str
    arguments: str


@dataclass
class _ToolCall:
    id: str
    function: _Function


@dataclass
class _Message:
    content: str | None
    tool_calls: list[_ToolCall] | None
    reasoning_content: str | None


@dataclass
class _Choice:
    message: _Message
    finish_reason: str | None


@dataclass
class _Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass
class DirectResponse:
    """The parts of a chat completion the client reads, shaped like litellm's response objects."""

    choices: list[_Choice]
    usage: _Usage | None


def request_body(request: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of a litellm-style request: provider prefix dropped, ``extra_body`` merged in."""
    body = {key: value for key, value in request.items() if key not in _NOT_IN_BODY and value is not None}
    body["model"] = str(request["model"]).split("/", 1)[1]
    extra = request.get("extra_body")
    if extra:
        body.update(extra)
    return body


def parse_response(data: dict[str, Any]) -> DirectResponse:
    choices = []
    for choice in data.get("choices") or []:
        message = choice.get("message") or {}
        calls = [
            _ToolCall(
                id=str(call.get("id") or ""),
                function=_Function(
                    name=str((call.get("function") or {}).get("name") or ""),
                    arguments=_arguments_text((call.get("function") or {}).get("arguments")),
                ),
            )
            for call in message.get("tool_calls") or []
        ]
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        choices.append(
            _Choice(
                message=_Message(content=message.get("content"), tool_calls=calls or None, reasoning_content=reasoning),
                finish_reason=choice.get("finish_reason"),
            )
        )
    usage = data.get("usage")
    return DirectResponse(
        choices=choices,
        usage=_Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        if isinstance(usage, dict)
        else None,
    )


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return orjson.dumps(arguments).decode()


async def post_chat_completion(
    session: aiohttp.ClientSession,
    request: dict[str, Any],
    *,
    api_base: str,
    api_key: str | None,
    model: str,
    endpoint: str,
) -> DirectResponse:
    """POST one chat completion; raise what the classifier understands on failure."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    headers.update(request.get("extra_headers") or {})
    timeout = request.get("timeout")
    async with session.post(
        api_base.rstrip("/") + "/chat/completions",
        data=orjson.dumps(request_body(request)),
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=float(timeout)) if timeout else None,
    ) as response:
        raw = await response.read()
        if response.status >= 400:
            text = raw.decode(errors="replace")[:1000]
            if response.status in (400, 413) and _CONTEXT_OVERFLOW.search(text):
                raise ContextWindowExceeded(
                    f"{model}: the conversation does not fit the context window ({text[:300]})",
                    model=model,
                    endpoint=endpoint,
                )
            raise EndpointHTTPError(response.status, text, response.headers.copy())  # case-insensitive
    try:
        return parse_response(orjson.loads(raw))
    except (orjson.JSONDecodeError, AttributeError, TypeError) as exc:
        raise EndpointHTTPError(
            502, f"the endpoint answered with something that is not a completion: {exc}", {}
        ) from exc
