"""Environment loads that run out of time get one more try alone.

A load's limit is CPU time, so loads opened together do not push each other past it; a load whose own CPU timer
ran out is still tried once more, alone: new loads wait until it ends, and it starts once the loads in flight have
ended. An environment whose load runs out of time alone too is slow by itself (or hostile): it is not tried alone
again, so it costs one extra budget per pool, not one per session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class LoadGate:
    """Counts the loads in flight and lets one load run alone; for one event loop (the pool's)."""

    def __init__(self) -> None:
        self._condition: asyncio.Condition | None = None
        self._in_flight = 0
        self._alone = False
        self.slow: set[str] = set()
        """Environments (by code hash) whose load ran out of time alone."""

    def _ready(self) -> asyncio.Condition:
        if self._condition is None:
            self._condition = asyncio.Condition()
        return self._condition

    @contextlib.asynccontextmanager
    async def load(self) -> AsyncIterator[None]:
        """One load among others (waits while a load runs alone)."""
        condition = self._ready()
        async with condition:
            await condition.wait_for(lambda: not self._alone)
            self._in_flight += 1
        try:
            yield
        finally:
            async with condition:
                self._in_flight -= 1
                condition.notify_all()

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """One load with no other in flight: new loads wait, and it starts when those in flight have ended."""
        condition = self._ready()
        async with condition:
            await condition.wait_for(lambda: not self._alone)
            self._alone = True
            await condition.wait_for(lambda: self._in_flight == 0)
        try:
            yield
        finally:
            async with condition:
                self._alone = False
                condition.notify_all()
