"""The litellm custom provider behind the ``local`` alias: the embedded model, run in a worker thread.

Generation is CPU-bound and the model holds one KV cache, so calls are serialized: an asyncio lock per event
loop queues callers without occupying executor threads, and a thread lock guards the model across loops.
The model module is imported only when the first call arrives (it needs the ``local`` extra).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

from litellm import CustomLLM
from litellm.types.utils import ModelResponse

from harness.llm.errors import ContextWindowExceeded, ModelHandlerError
from harness.llm.in_process import build_model_response

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


class LocalModelProvider(CustomLLM):
    """Answers ``harness_local/<anything>`` with the embedded model."""

    async def acompletion(  # type: ignore[override]  # litellm calls it by keyword; we take what we use
        self, model: str, messages: list[dict[str, Any]], *args: Any, optional_params: dict[str, Any], **kwargs: Any
    ) -> ModelResponse:
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
        return build_model_response(
            completion.message, LOCAL_MODEL_STRING, int(completion.prompt_tokens), int(completion.completion_tokens)
        )


def _translate(exc: Exception) -> Exception:
    kind = type(exc).__name__
    if kind == "LocalContextWindowExceeded":
        return ContextWindowExceeded(f"local: {exc}", model="local", endpoint=LOCAL_PROVIDER)
    if kind == "LocalModelUnavailable" or isinstance(exc, ImportError):
        return ModelHandlerError(f"the local model is unavailable: {exc}", model="local", endpoint=LOCAL_PROVIDER)
    return ModelHandlerError(f"the local model failed: {kind}: {exc}", model="local", endpoint=LOCAL_PROVIDER)
