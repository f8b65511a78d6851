"""Token counts of finished samples (SFT statistics), with litellm's tokenizer for the given model.

litellm uses the model's own tokenizer when it knows the model and OpenAI's cl100k otherwise; both ship with
litellm, so counting works offline. A count for an unknown model is an estimate of the student's length.
"""

from __future__ import annotations

from typing import Any

from harness.llm.litellm_setup import litellm_module

DEFAULT_MODEL = "gpt-4o"


def count_tokens(
    model: str | None = None,
    *,
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    text: str | None = None,
) -> int:
    """Tokens of a chat (messages with their tool schemas) or of a plain text."""
    name = model or DEFAULT_MODEL
    litellm = litellm_module()
    if text is not None:
        return int(litellm.token_counter(model=name, text=text))
    schemas: Any = tools or None  # OpenAI tool schemas; litellm types them as its TypedDict
    return int(litellm.token_counter(model=name, messages=messages or [], tools=schemas))
