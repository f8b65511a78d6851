"""Typed errors of model access. Messages name the model and endpoint, never a credential."""

from __future__ import annotations


class LLMError(Exception):
    """A model call failed. ``model`` is what the caller asked for; ``endpoint`` is where it went."""

    def __init__(self, message: str, *, model: str | None = None, endpoint: str | None = None) -> None:
        super().__init__(message)
        self.model = model
        self.endpoint = endpoint


class ContextWindowExceeded(LLMError):
    """The conversation no longer fits the model's context window (never retried)."""


class EndpointUnreachable(LLMError):
    """Nothing answers at the endpoint (connection refused or no route)."""


class RequestRejected(LLMError):
    """The endpoint refused the request for a reason retrying cannot fix (400, 401, 403, 404, 422)."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        model: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(message, model=model, endpoint=endpoint)
        self.status_code = status_code


class MissingCredentials(RequestRejected):
    """The provider needs a key from the environment and none is set: no request could succeed."""


class RetriesExhausted(LLMError):
    """A transient failure (rate limit, timeout, connection error, 5xx) persisted through every attempt."""

    def __init__(self, message: str, *, attempts: int, model: str | None = None, endpoint: str | None = None) -> None:
        super().__init__(message, model=model, endpoint=endpoint)
        self.attempts = attempts


class ModelHandlerError(LLMError):
    """An in-process model (``python/<name>`` or ``local``) raised; retrying would raise again."""
