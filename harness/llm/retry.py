"""What is retried, how long to wait, and how a failed call is reported.

Transient: rate limits (429), timeouts, connection errors and 5xx. These are retried with exponential
backoff and jitter, waiting exactly ``Retry-After`` when the endpoint sends one. Everything else (400, 401,
403, 404, 422, context overflow) raises at once. A connection refused by an endpoint that has never answered
this client is given only ``unreachable_attempts`` tries before :class:`EndpointUnreachable`, so a missing
server is reported in seconds rather than after the whole backoff schedule.
"""

from __future__ import annotations

import email.utils
import random
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp
import httpx
from pydantic import BaseModel, ConfigDict, Field
from tenacity import RetryCallState

from harness.llm.errors import ContextWindowExceeded, LLMError, ModelHandlerError, RequestRejected

RETRYABLE_STATUS = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))
_UNREACHABLE_TEXT = (
    "connection refused",
    "connect call failed",
    "cannot connect to host",
    "name or service not known",
    "nodename nor servname",
    "no route to host",
    "network is unreachable",
)


class RetryPolicy(BaseModel):
    """Retry schedule. The defaults suit real endpoints; tests pass small values."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=6, ge=1, description="Attempts in all, the first included.")
    initial_backoff: float = Field(default=1.0, ge=0, description="Seconds before the first retry.")
    max_backoff: float = Field(default=60.0, ge=0)
    jitter: float = Field(default=1.0, ge=0, description="Up to this many random seconds added to a wait.")
    max_retry_after: float = Field(default=300.0, ge=0, description="Cap on a Retry-After the server asks for.")
    unreachable_attempts: int = Field(
        default=2, ge=1, description="Attempts while an endpoint that never answered refuses connections."
    )
    timeout_attempts: int = Field(
        default=2,
        ge=1,
        description="Attempts that may end in a timeout: a request that hangs twice is unlikely to answer a third "
        "time, and each try costs a whole request timeout.",
    )


class TransientFailure(Exception):
    """An attempt failed in a way that may pass; carries what the retry schedule needs."""

    def __init__(
        self,
        reason: str,
        detail: str,
        *,
        retry_after: float | None = None,
        unreachable: bool = False,
        timed_out: bool = False,
    ) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.retry_after = retry_after
        self.unreachable = unreachable
        self.timed_out = timed_out


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def parse_retry_after(headers: Mapping[str, str] | Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    try:
        milliseconds = headers.get("retry-after-ms")
        if milliseconds is not None:
            return max(float(milliseconds) / 1000.0, 0.0)
        value = headers.get("retry-after")
    except (AttributeError, ValueError):
        return None
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _status_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _retry_after_of(exc: BaseException) -> float | None:
    for link in exception_chain(exc):
        for attribute in ("litellm_response_headers", "headers"):
            found = parse_retry_after(getattr(link, attribute, None))
            if found is not None:
                return found
        response = getattr(link, "response", None)
        found = parse_retry_after(getattr(response, "headers", None))
        if found is not None:
            return found
    return None


def _is_unreachable(exc: BaseException) -> bool:
    for link in exception_chain(exc):
        if isinstance(link, ConnectionRefusedError | aiohttp.ClientConnectorError | httpx.ConnectError):
            return True
        text = str(link).lower()
        if any(marker in text for marker in _UNREACHABLE_TEXT):
            return True
    return False


def _is_connection_failure(exc: BaseException) -> bool:
    for link in exception_chain(exc):
        if isinstance(
            link,
            ConnectionError | TimeoutError | aiohttp.ClientError | httpx.TransportError,
        ):
            return True
        if type(link).__name__ in ("APIConnectionError", "APITimeoutError", "Timeout"):
            return True
    return False


def _litellm_error(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is litellm's exception class ``name``; never, when litellm was not loaded (then nothing
    could have raised one, and classifying a failure is no reason to spend seconds importing it)."""
    litellm = sys.modules.get("litellm")
    return litellm is not None and isinstance(exc, getattr(litellm, name))


def _is_timeout(exc: BaseException) -> bool:
    for link in exception_chain(exc):
        if isinstance(link, TimeoutError | httpx.TimeoutException | aiohttp.ServerTimeoutError):
            return True
        if _litellm_error(link, "Timeout"):
            return True
        if type(link).__name__ in ("APITimeoutError", "Timeout", "ReadTimeout"):
            return True
    return False


def classify(
    exc: BaseException, *, model: str, endpoint: str, timeout: float | None = None
) -> TransientFailure | LLMError:
    """Turn what litellm raised into a :class:`TransientFailure` (retry) or a typed error (raise).

    ``timeout`` is the request timeout in seconds, named in the message when a request runs out of it."""
    for link in exception_chain(exc):
        if isinstance(link, LLMError):
            return link
    if _litellm_error(exc, "ContextWindowExceededError"):
        return ContextWindowExceeded(
            f"{model}: the conversation does not fit the context window ({_short(exc)})",
            model=model,
            endpoint=endpoint,
        )
    status = _status_code(exc)
    if _is_timeout(exc):
        reason = f"timed out after {timeout:g} s" if timeout is not None else "timed out"
        return TransientFailure(reason, _short(exc) or "no answer in time", timed_out=True)
    if _litellm_error(exc, "RateLimitError") or status == 429:
        return TransientFailure("rate limited (429)", _short(exc), retry_after=_retry_after_of(exc))
    if status is not None and status not in RETRYABLE_STATUS:
        return RequestRejected(
            f"{model}: request rejected by {endpoint} ({status}): {_short(exc)}",
            status_code=status,
            model=model,
            endpoint=endpoint,
        )
    if _is_unreachable(exc):
        return TransientFailure("unreachable", _short(exc), unreachable=True)
    if _is_connection_failure(exc):
        return TransientFailure("connection error", _short(exc))
    if status is not None:
        return TransientFailure(f"server error ({status})", _short(exc), retry_after=_retry_after_of(exc))
    return ModelHandlerError(f"{model}: {type(exc).__name__}: {_short(exc)}", model=model, endpoint=endpoint)


def _short(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class RetryWait:
    """tenacity ``wait``: the server's Retry-After when given (capped), else exponential backoff
    (``initial_backoff * 2**(retry - 1)``, capped at ``max_backoff``) plus up to ``jitter`` random seconds."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        failure = outcome.exception() if outcome is not None else None
        if isinstance(failure, TransientFailure) and failure.retry_after is not None:
            return min(failure.retry_after, self.policy.max_retry_after)
        exponent = min(retry_state.attempt_number - 1, 60)
        backoff = min(self.policy.initial_backoff * 2.0**exponent, self.policy.max_backoff)
        return backoff + random.uniform(0.0, self.policy.jitter)
