"""The in-process models as litellm custom providers: ``python/<name>`` and the embedded ``local`` model.

Imported only when litellm is (see :func:`harness.llm.litellm_setup.litellm_module`), which registers both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from litellm import CustomLLM
from litellm.types.utils import ModelResponse

from harness.llm.in_process import normalize_message
from harness.llm.local_provider import LOCAL_MODEL_STRING, local_model_reply
from harness.llm.python_models import python_model_reply


def build_model_response(
    message: Mapping[str, Any], model: str, prompt_tokens: int, completion_tokens: int
) -> ModelResponse:
    normalized = normalize_message(message)
    finish_reason = "tool_calls" if normalized.get("tool_calls") else "stop"
    return ModelResponse(
        model=model,
        choices=[{"index": 0, "finish_reason": finish_reason, "message": normalized}],
        usage={
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    )


class PythonModelProvider(CustomLLM):
    """Dispatches ``python/<name>`` to the handler registered under that name."""

    async def acompletion(  # type: ignore[override]  # litellm calls it by keyword; we take what we use
        self, model: str, messages: list[dict[str, Any]], *args: Any, optional_params: dict[str, Any], **kwargs: Any
    ) -> ModelResponse:
        message, prompt_tokens, completion_tokens = await python_model_reply(model, messages, optional_params)
        return build_model_response(message, model, prompt_tokens, completion_tokens)


class LocalModelProvider(CustomLLM):
    """Answers ``harness_local/<anything>`` with the embedded model."""

    async def acompletion(  # type: ignore[override]  # litellm calls it by keyword; we take what we use
        self, model: str, messages: list[dict[str, Any]], *args: Any, optional_params: dict[str, Any], **kwargs: Any
    ) -> ModelResponse:
        message, prompt_tokens, completion_tokens = await local_model_reply(messages, optional_params)
        return build_model_response(message, LOCAL_MODEL_STRING, prompt_tokens, completion_tokens)
