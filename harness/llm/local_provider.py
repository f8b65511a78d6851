"""The embedded model behind the ``local`` alias, run in a worker thread (litellm's provider class is in
:mod:`harness.llm.providers`).

Generation is CPU-bound and the model holds one KV cache, so calls are serialized: an asyncio lock per event
loop queues callers without occupying executor threads, and a thread lock guards the model across loops.
The model module is imported only when the first call arrives (it needs the ``local`` extra).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

from harness.llm.errors import ContextWindowExceeded, ModelHandlerError

LOCAL_PROVIDER = "harness_local"
LOCAL_MODEL_STRING = f"{LOCAL_PROVIDER}/gemma-3-270m"

_model_lock = threading.Lock()
_loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _loop_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _loop_locks.get(loop)
    if lock is None:
        lock = _loop_locks[loop] = asyncio.Lock()
    return lock


def _complete(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, options: dict[str, Any]) -> Any:
    from harness.llm.local import get_local_model

    with _model_lock:
        return get_local_model().complete(messages, tools, **options)


async def local_model_reply(
    messages: list[dict[str, Any]], optional_params: dict[str, Any]
) -> tuple[dict[str, Any], int, int]:
    """The embedded model's answer: its message, prompt tokens and completion tokens."""
    options = {
        name: optional_params[name]
        for name in ("temperature", "max_tokens", "seed")
        if optional_params.get(name) is not None
    }
    tools = optional_params.get("tools") or None
    try:
        async with _loop_lock():
            completion = await asyncio.to_thread(_complete, messages, tools, options)
    except Exception as exc:
        raise _translate(exc) from exc
    return completion.message, int(completion.prompt_tokens), int(completion.completion_tokens)


def _translate(exc: Exception) -> Exception:
    kind = type(exc).__name__
    if kind == "LocalContextWindowExceeded":
        return ContextWindowExceeded(f"local: {exc}", model="local", endpoint=LOCAL_PROVIDER)
    if kind == "LocalModelUnavailable" or isinstance(exc, ImportError):
        return ModelHandlerError(f"the local model is unavailable: {exc}", model="local", endpoint=LOCAL_PROVIDER)
    return ModelHandlerError(f"the local model failed: {kind}: {exc}", model="local", endpoint=LOCAL_PROVIDER)
