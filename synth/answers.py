"""Asking the synthesis model for an answer and refusing answers that do not parse or validate.

Every answer is untrusted: JSON is extracted and validated against a pydantic model, and a bad answer is
sent back with the error for a bounded number of retries before the caller gets an ``AnswerError``.
Prompts ask for a short analysis before the JSON (as the papers' prompts do); that text is parsed out and put
in the answer's ``analysis`` field when its model has one, so stages can keep it in provenance.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from harness.llm import ContextWindowExceeded, LLMClient
from harness.schema import ModelSettings, Usage

logger = logging.getLogger(__name__)

AnswerModel = TypeVar("AnswerModel", bound=BaseModel)

_FENCE = re.compile(r"```(?:[a-zA-Z0-9_+-]*)\s*\n(.*?)```", re.DOTALL)
_PYTHON_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


class AnswerError(ValueError):
    """The model gave no usable answer within its retries. Deterministic, so it is persisted as an outcome;
    an unreachable model (``harness.llm.LLMError``) is not caught here: it is no verdict on the work."""


def extract_json(text: str) -> Any:
    """The JSON value in a model's reply: the whole text, a fenced block, or the outermost braces."""
    candidates = [text.strip()]
    candidates += [block.strip() for block in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    error: json.JSONDecodeError | None = None
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError as exc:
            error = error or exc
    raise ValueError(f"the answer is not JSON ({error.msg if error else 'empty answer'})")


def extract_analysis(text: str) -> str:
    """The reasoning written before the JSON answer (a leading ``Analysis:`` label removed), or ''."""
    fence = text.find("```")
    brace = text.find("{")
    cut = min(i for i in (fence, brace, len(text)) if i >= 0)
    analysis = text[:cut].strip()
    return re.sub(r"^\**\s*analysis\s*\**\s*:?\s*", "", analysis, flags=re.IGNORECASE).strip()


def extract_python(text: str) -> str:
    """The code of the first fenced Python block, or the whole reply when it has no fence."""
    blocks = _PYTHON_FENCE.findall(text)
    return (blocks[0] if blocks else text).strip("\n")


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:8]:
        where = ".".join(str(p) for p in item["loc"]) or "answer"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


@dataclass
class Asker:
    """One model in one synthesis role family; adds what each call spent to the ``usage`` it is given."""

    client: LLMClient
    settings: ModelSettings
    retries: int = 2

    async def text(self, messages: list[dict[str, Any]], role: str, usage: Usage) -> str:
        try:
            result = await self.client.chat(self.settings, messages, role=role)
        except ContextWindowExceeded as exc:
            raise AnswerError(f"the prompt does not fit the model's context window: {exc}") from exc
        if result.cached:
            usage.add(Usage(requests=1, cached_requests=1))
        else:
            spent = result.usage.model_copy()
            spent.requests = max(spent.requests, 1)
            usage.add(spent)
        content = result.message.get("content")
        return content if isinstance(content, str) else ""

    async def json(
        self, messages: list[dict[str, Any]], answer_model: type[AnswerModel], role: str, usage: Usage
    ) -> AnswerModel:
        conversation = list(messages)
        problem = ""
        for _attempt in range(self.retries + 1):
            reply = await self.text(conversation, role, usage)
            try:
                answer = answer_model.model_validate(extract_json(reply))
                if "analysis" in type(answer).model_fields and not getattr(answer, "analysis", ""):
                    answer = answer.model_copy(update={"analysis": extract_analysis(reply)})
                return answer
            except ValidationError as exc:
                problem = _describe(exc)
            except ValueError as exc:
                problem = str(exc)
            logger.debug("unusable %s answer: %s", role, problem)
            conversation = [
                *messages,
                {"role": "assistant", "content": reply},
                {
                    "role": "user",
                    "content": f"That answer is unusable: {problem}. Answer again: a short analysis, then the "
                    "JSON in one ```json block.",
                },
            ]
        raise AnswerError(f"no valid {role} answer after {self.retries + 1} tries: {problem}")
