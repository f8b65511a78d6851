"""The one place litellm is imported and configured, on first use: :func:`litellm_module`.

Importing litellm costs about two seconds of CPU, so the commands that never call a model through it (imports,
validation, exports, reports, ``--help``) do not pay for it; this module itself only sets the variables below.

- ``LITELLM_LOCAL_MODEL_COST_MAP=True`` is set before the import, or litellm fetches a cost map from the
  network when imported. OpenAI-compatible calls take litellm's direct HTTP route unless
  ``HARNESS_LITELLM_OPENAI_SDK=1`` (see :mod:`harness.llm.transport`).
- litellm's loggers lose their own stderr handler, propagate to ours at WARNING and pass through a filter
  that redacts credentials; its "debug info" banners are switched off.
- litellm queues an async success-logging coroutine per call on a process-wide worker whose queue belongs to
  the first event loop that used it (so a later loop breaks it, and shutting a loop down can hang on it).
  We register no litellm callbacks, so when none are registered that coroutine is closed instead of queued;
  this also saves about a tenth of litellm's CPU per call.
- The in-process providers (``python/<name>`` and the embedded ``local`` model) are registered.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Coroutine
from types import ModuleType
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
if os.environ.get("HARNESS_LITELLM_OPENAI_SDK", "").lower() not in ("1", "true", "yes"):
    # litellm's direct HTTP route to OpenAI-compatible endpoints (see harness.llm.transport).
    os.environ.setdefault("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "True")

from harness.redact import RedactingFilter

LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")

_configured: ModuleType | None = None
_configure_lock = threading.Lock()


def litellm_module() -> ModuleType:
    """litellm, imported and configured the first time it is asked for."""
    global _configured
    if _configured is None:
        with _configure_lock:
            if _configured is None:
                import litellm

                _configure()
                _configured = litellm
    return _configured


def _quiet_logging() -> None:
    import litellm

    litellm.suppress_debug_info = True
    litellm.set_verbose = False
    litellm.turn_off_message_logging = True
    for name in LITELLM_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = True
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())


def _has_async_callbacks() -> bool:
    import litellm

    return bool(
        litellm.callbacks or litellm._async_success_callback or litellm.success_callback or litellm.input_callback
    )


class _CallbackFreeLoggingWorker:
    """Stands in for litellm's global logging worker: runs nothing when no callbacks are registered,
    defers to the original worker otherwise."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def ensure_initialized_and_enqueue(self, async_coroutine: Coroutine[Any, Any, Any]) -> None:
        if _has_async_callbacks():
            self.original.ensure_initialized_and_enqueue(async_coroutine)
        else:
            async_coroutine.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


def _install_logging_worker() -> None:
    from litellm.litellm_core_utils import logging_worker

    current = logging_worker.GLOBAL_LOGGING_WORKER
    if not isinstance(current, _CallbackFreeLoggingWorker):
        stand_in = _CallbackFreeLoggingWorker(current)
        logging_worker.GLOBAL_LOGGING_WORKER = stand_in  # type: ignore[assignment]  # a duck-typed LoggingWorker


def _register_custom_provider(provider: str, handler: Any) -> None:
    import litellm

    entries = [e for e in litellm.custom_provider_map if e.get("provider") != provider]
    entries.append({"provider": provider, "custom_handler": handler})
    litellm.custom_provider_map = entries


def _configure() -> None:
    _quiet_logging()
    _install_logging_worker()
    from harness.llm.local_provider import LOCAL_PROVIDER
    from harness.llm.providers import LocalModelProvider, PythonModelProvider
    from harness.llm.python_models import PYTHON_PROVIDER

    _register_custom_provider(PYTHON_PROVIDER, PythonModelProvider())
    _register_custom_provider(LOCAL_PROVIDER, LocalModelProvider())
