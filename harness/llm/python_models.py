"""``python/<name>``: models served in-process by a Python function, through litellm like any other model
(litellm's provider class is in :mod:`harness.llm.providers`).

``register_python_model("scripted", handler)`` makes ``python/scripted`` answer with ``handler(request)``,
where ``request`` holds ``model``, ``messages``, ``tools`` (None when no tools were offered) and the
parameters the caller set (``temperature``, ``max_tokens``, ``seed``, ...). The handler returns an assistant
message dict (``content``, optionally ``tool_calls``, ``reasoning_content`` and ``usage`` with
``prompt_tokens``/``completion_tokens``); it may be a coroutine function. Tool calls may be given as
``{"name", "arguments"}`` with arguments as a dict; they are put in OpenAI shape.
"""

from __future__ import annotations

import copy
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from harness.llm.errors import LLMError, ModelHandlerError
from harness.llm.in_process import estimate_tokens, request_parameters

PYTHON_PROVIDER = "python"

PythonModelHandler = Callable[[dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]]

_handlers: dict[str, PythonModelHandler] = {}
_handlers_lock = threading.Lock()


def register_python_model(name: str, handler: PythonModelHandler) -> str:
    """Serve ``python/<name>`` with ``handler``; returns the model string to use."""
    if not name or "/" in name:
        raise ValueError(f"python model name must be non-empty and contain no '/': {name!r}")
    with _handlers_lock:
        _handlers[name] = handler
    return f"{PYTHON_PROVIDER}/{name}"


def unregister_python_model(name: str) -> None:
    with _handlers_lock:
        _handlers.pop(name, None)


def registered_python_models() -> list[str]:
    with _handlers_lock:
        return sorted(_handlers)


async def python_model_reply(
    model: str, messages: list[dict[str, Any]], optional_params: dict[str, Any]
) -> tuple[dict[str, Any], int, int]:
    """What the handler registered as ``model`` answers: its message, prompt tokens and completion tokens."""
    with _handlers_lock:
        handler = _handlers.get(model)
    if handler is None:
        raise ModelHandlerError(
            f"no python model is registered as {model!r} (use harness.llm.register_python_model)",
            model=f"{PYTHON_PROVIDER}/{model}",
            endpoint=PYTHON_PROVIDER,
        )
    request: dict[str, Any] = {
        "model": model,
        "messages": copy.deepcopy(messages),
        "tools": copy.deepcopy(optional_params.get("tools")),
        **request_parameters(optional_params),
    }
    import openai  # already loaded: litellm, which calls this, imports it

    try:
        result = handler(request)
        if inspect.isawaitable(result):
            result = await result
    except (LLMError, openai.OpenAIError):
        raise  # deliberate failures (e.g. a scripted rate limit) are classified like real ones
    except Exception as exc:
        raise ModelHandlerError(
            f"python model {model!r} raised {type(exc).__name__}: {exc}",
            model=f"{PYTHON_PROVIDER}/{model}",
            endpoint=PYTHON_PROVIDER,
        ) from exc
    if not isinstance(result, dict):
        raise ModelHandlerError(
            f"python model {model!r} returned {type(result).__name__}, expected a message dict",
            model=f"{PYTHON_PROVIDER}/{model}",
            endpoint=PYTHON_PROVIDER,
        )
    usage = result.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens", estimate_tokens(messages)))
    completion_tokens = int(
        usage.get("completion_tokens", estimate_tokens([result.get("content"), result.get("tool_calls")]))
    )
    return result, prompt_tokens, completion_tokens
