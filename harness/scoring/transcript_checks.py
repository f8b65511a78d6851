"""Helpers for checks on what the agent said: ``check(initial_state, final_state, transcript)``.

``transcript`` is the episode's list of OpenAI-style messages after the system prompt: ``user`` messages,
``assistant`` messages (``content`` text, ``tool_calls``) and ``tool`` results. A scenario whose right outcome
is "change nothing and tell the user why" needs such a check, or doing nothing would succeed.

Checks run in the sandbox, which allows the standard library only, so a check does not import these helpers:
scoring appends their source to every check that names one (:func:`with_helpers`), and the check calls them
as plain functions::

    def check(initial_state, final_state, transcript):
        return said_any(transcript, ["cannot", "not able"]) and told_user(transcript, "RES0002")

Only text the agent wrote to the user counts: tool calls, tool results and the user's own messages never do,
and an assistant turn that only calls tools has no text. The functions below are kept to pure standard-library
code because their source is what runs in the sandbox.
"""

from __future__ import annotations

import inspect
import re
from typing import Any


def agent_texts(transcript: list[dict[str, Any]]) -> list[str]:
    """The text of every assistant message that has some (tool-only turns have none)."""
    texts = []
    for message in transcript or []:
        if isinstance(message, dict) and message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, str) and content.strip():
                texts.append(content)
    return texts


def said_any(transcript: list[dict[str, Any]], phrases: str | list[str]) -> bool:
    """Whether an assistant message contains one of ``phrases`` (case and spacing ignored)."""
    wanted = [phrases] if isinstance(phrases, str) else list(phrases)
    wanted = [" ".join(str(p).lower().split()) for p in wanted if str(p).strip()]
    for text in agent_texts(transcript):
        flat = " ".join(text.lower().split())
        if any(phrase in flat for phrase in wanted):
            return True
    return False


def told_user(transcript: list[dict[str, Any]], value: Any, tolerance: float = 0.005) -> bool:
    """Whether ``value`` appears in an assistant message.

    A number matches however it is written (``35``, ``35.00``, ``$35``, ``1,035.5``) within ``tolerance``, its
    sign ignored (a refund of -35 is "35" to the user); any other value matches as a whole token, case ignored
    (``RES0002`` matches "RES0002." but not "RES00021").
    """
    if isinstance(value, bool):
        value = str(value)
    texts = agent_texts(transcript)
    if isinstance(value, int | float):
        for text in texts:
            for token in re.findall(r"-?\d[\d,]*(?:\.\d+)?", text):
                try:
                    number = float(token.replace(",", ""))
                except ValueError:
                    continue
                if abs(abs(number) - abs(value)) <= tolerance:
                    return True
        return False
    needle = str(value).strip()
    if not needle:
        return False
    pattern = re.compile(r"(?<![A-Za-z0-9])" + re.escape(needle) + r"(?![A-Za-z0-9])", re.IGNORECASE)
    return any(pattern.search(text) for text in texts)


def asked_user(transcript: list[dict[str, Any]], about: str | list[str] | None = None) -> bool:
    """Whether the agent asked the user a question (a sentence ending in '?'), about one of ``about`` if given."""
    wanted = [] if about is None else [about] if isinstance(about, str) else list(about)
    wanted = [str(w).lower() for w in wanted if str(w).strip()]
    for text in agent_texts(transcript):
        for question in re.findall(r"[^.!?\n]*\?", text):
            if not wanted or any(w in question.lower() for w in wanted):
                return True
    return False


HELPERS = (agent_texts, said_any, told_user, asked_user)
HELPER_NAMES = frozenset(f.__name__ for f in HELPERS)
_NAMED = re.compile(r"\b(" + "|".join(sorted(HELPER_NAMES)) + r")\s*\(")


def _helper_source() -> str:
    # Annotations are evaluated where the source runs, hence the typing import.
    parts = ["import re\nfrom typing import Any"]
    parts += [inspect.getsource(function) for function in HELPERS]
    return "\n\n".join(parts) + "\n"


HELPER_SOURCE = _helper_source()
"""The helpers' source, as appended to a check (appended, so the check's own line numbers stay right)."""


def uses_helpers(source: str) -> bool:
    return bool(_NAMED.search(source))


def with_helpers(source: str) -> str:
    """``source`` with the helpers' definitions appended when it calls one of them."""
    if not uses_helpers(source):
        return source
    return source.rstrip("\n") + "\n\n\n# helpers appended by harness.scoring.transcript_checks\n" + HELPER_SOURCE
