"""One rpm/tpm limiter for the whole cluster: a Ray actor that every executor's model client asks for admission.

Each request takes a ticket from the limiter actor just before it goes out (the same place the local
``EndpointGate`` takes its share) and settles the ticket with the real token count when the answer arrives.
The actor keeps one ``EndpointGate`` per endpoint, so the cluster-wide window is exactly the local one: only
where it lives changes. The concurrency cap stays local to each executor (it bounds that process's sockets).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from harness.llm import EndpointLimits, LLMClient
from harness.llm.limits import Admission, EndpointGate

UNSETTLED_TICKETS_KEPT = 100_000


class ClusterLimiter:
    """Ray actor body (``ray.remote(ClusterLimiter)``): admission to each endpoint's rpm/tpm window."""

    def __init__(self) -> None:
        self._gates: dict[str, EndpointGate] = {}
        self._admissions: dict[int, Admission] = {}
        self._tickets = itertools.count()
        self._admitted: dict[str, int] = {}

    async def admit(self, endpoint: str, limits: EndpointLimits, estimated_tokens: int) -> int:
        gate = self._gates.get(endpoint)
        if gate is None:
            gate = self._gates[endpoint] = EndpointGate(limits.model_copy(update={"concurrency": None}))
        async with gate.admit(estimated_tokens) as admission:
            ticket = next(self._tickets)
        if len(self._admissions) >= UNSETTLED_TICKETS_KEPT:  # executors that died never settle theirs
            self._admissions.pop(next(iter(self._admissions)))
        self._admissions[ticket] = admission
        self._admitted[endpoint] = self._admitted.get(endpoint, 0) + 1
        return ticket

    def settle(self, ticket: int, tokens: int | None) -> None:
        """Record the real token count of a ticket's answer (None: the request failed, keep the estimate)."""
        admission = self._admissions.pop(ticket, None)
        if admission is not None and tokens is not None:
            admission.settle(tokens)

    def admitted(self) -> dict[str, int]:
        """Requests admitted so far, per endpoint."""
        return dict(self._admitted)

    def node_id(self) -> str:
        """The Ray node this limiter runs on (the driver's, where the fleet places it)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())


class _RemoteAdmission(Admission):
    def __init__(self, limiter: Any, ticket: int) -> None:
        super().__init__(None, None)
        self._limiter = limiter
        self._ticket: int | None = ticket

    def settle(self, tokens: int) -> None:
        self._send(tokens)

    def release(self) -> None:
        self._send(None)

    def _send(self, tokens: int | None) -> None:
        if self._ticket is not None:
            self._limiter.settle.remote(self._ticket, tokens)
            self._ticket = None


class ClusterGate(EndpointGate):
    """An endpoint gate whose rpm/tpm window is the cluster limiter's; the concurrency cap stays local."""

    def __init__(self, limits: EndpointLimits, endpoint: str, limiter: Any) -> None:
        super().__init__(limits.model_copy(update={"rpm": None, "tpm": None}))
        self.limits = limits
        self._endpoint = endpoint
        self._limiter = limiter

    @asynccontextmanager
    async def admit(self, estimated_tokens: int) -> AsyncIterator[Admission]:
        if self._semaphore is not None:
            await self._semaphore.acquire()
        try:
            ticket = await self._limiter.admit.remote(self._endpoint, self.limits, estimated_tokens)
            admission = _RemoteAdmission(self._limiter, ticket)
            try:
                yield admission
            finally:
                admission.release()
        finally:
            if self._semaphore is not None:
                self._semaphore.release()


class ClusterLLMClient(LLMClient):
    """An ``LLMClient`` whose rpm/tpm limits are held by the cluster limiter actor instead of this process."""

    def __init__(self, *args: Any, limiter: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limiter = limiter

    def _gate(self, endpoint: str) -> EndpointGate:
        gate = self._gates.get(endpoint)
        if gate is None:
            limits = self.limits_for(endpoint)
            shared = bool(limits.rpm or limits.tpm)
            gate = ClusterGate(limits, endpoint, self._limiter) if shared else EndpointGate(limits)
            self._gates[endpoint] = gate
        return gate
