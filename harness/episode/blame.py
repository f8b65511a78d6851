"""Who is at fault when an episode fails: the environment, the agent's model, the simulated user or the harness.

An environment that cannot be loaded (refused by the static checks, a constructor that raises or runs past its
budget, a missing class) or whose process dies, stops or exits on its own is an **environment failure**: the
episode ends as ``environment_error`` and is scored as its rules say (``EpisodeRules.environment_failure``); it is
never re-run, because running it again gives the same failure. Only what lies outside the environment's reach is
an **infrastructure error** (``infra_error``): the agent's model endpoint that does not answer, a simulated user
whose model fails or whose policy raises (blamed on the user simulator, so a run can tell how much of its failures
the simulator caused), a sandbox that could not start or lost its zygote, a process killed from outside (the OOM
killer, an operator), a bug of the harness. Those are not scored and ``--retry-errors`` runs them again.
"""

from __future__ import annotations

from typing import NamedTuple

from harness.llm import (
    ContextWindowExceeded,
    EndpointUnreachable,
    LLMError,
    ModelHandlerError,
    RequestRejected,
)
from harness.sandbox import EnvironmentFailed, EnvironmentLoadError, SandboxError
from harness.schema import Failure, FailureKind, FailureParty, TerminationReason
from harness.toolspec import ToolDerivationError


class Blame(NamedTuple):
    """How an exception ends an episode: the termination reason, its detail, and who is at fault (None when the
    ending is the agent's own: an unreadable agent, a context window it filled)."""

    reason: TerminationReason
    detail: str
    failure: Failure | None


def classify_failure(exc: BaseException, phase: str) -> Blame:
    """Which termination reason an exception raised during ``phase`` (agent, user, sandbox) means, and whose
    fault it is."""
    detail = f"{phase}: {type(exc).__name__}: {exc}"
    if isinstance(exc, ContextWindowExceeded):
        return Blame(TerminationReason.CONTEXT_OVERFLOW, detail, None)
    if isinstance(exc, EnvironmentLoadError | EnvironmentFailed | ToolDerivationError):
        return environment_failure(detail)
    if phase == "user" and not isinstance(exc, SandboxError):
        # The simulated user's model or policy failed: not the agent's fault, re-run it.
        kind = model_failure_kind(exc) if isinstance(exc, LLMError) else FailureKind.HARNESS
        failure = Failure(at_fault=FailureParty.USER_SIMULATOR, detail=detail, kind=kind)
        return Blame(TerminationReason.INFRA_ERROR, detail, failure)
    if isinstance(exc, LLMError):
        failure = Failure(at_fault=FailureParty.MODEL_ENDPOINT, detail=detail, kind=model_failure_kind(exc))
        return Blame(TerminationReason.INFRA_ERROR, detail, failure)
    if isinstance(exc, SandboxError):
        failure = Failure(at_fault=FailureParty.HARNESS, detail=detail, kind=FailureKind.SANDBOX)
        return Blame(TerminationReason.INFRA_ERROR, detail, failure)
    if phase == "agent":
        return Blame(TerminationReason.AGENT_ERROR, detail, None)
    # A failing loop is not the agent's fault: mark it for a re-run instead of scoring it.
    failure = Failure(at_fault=FailureParty.HARNESS, detail=detail, kind=FailureKind.HARNESS)
    return Blame(TerminationReason.INFRA_ERROR, detail, failure)


def model_failure_kind(exc: LLMError) -> FailureKind:
    """Whether a model call's failure can pass with time (unreachable, transient) or not (rejected, raising)."""
    if isinstance(exc, EndpointUnreachable):
        return FailureKind.ENDPOINT_UNREACHABLE
    if isinstance(exc, RequestRejected):
        return FailureKind.REQUEST_REJECTED
    if isinstance(exc, ModelHandlerError):
        return FailureKind.MODEL_HANDLER
    return FailureKind.TRANSIENT  # RetriesExhausted, and any other endpoint failure


def environment_failure(detail: str) -> Blame:
    failure = Failure(at_fault=FailureParty.ENVIRONMENT, detail=detail, kind=FailureKind.ENVIRONMENT)
    return Blame(TerminationReason.ENVIRONMENT_ERROR, detail, failure)
