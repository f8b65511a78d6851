"""Per-endpoint admission: a concurrency cap, requests per minute and tokens per minute.

Requests per window use asyncio-throttle. Only one waiter polls the throttler at a time (behind a lock), so
hundreds of queued requests do not each wake up every few milliseconds, and admission is first come first
served. Tokens per window are a sliding window of (time, tokens) whose entries are settled with the real
token count once a response arrives, because the count before the request is only an estimate.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from asyncio_throttle import Throttler
from pydantic import BaseModel, ConfigDict, Field

RPM_WINDOW_MARGIN = 1.01


class EndpointLimits(BaseModel):
    """Limits for one endpoint. None means unlimited."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int | None = Field(default=64, ge=1, description="Requests in flight at once.")
    rpm: int | None = Field(default=None, ge=1, description="Requests per window (a minute by default).")
    tpm: int | None = Field(default=None, ge=1, description="Tokens (prompt + completion) per window.")
    window_seconds: float = Field(default=60.0, gt=0, description="Length of the rpm/tpm window; 60 except in tests.")


class _TokenEntry:
    __slots__ = ("t", "tokens")

    def __init__(self, t: float, tokens: int) -> None:
        self.t = t
        self.tokens = tokens


class TokenWindow:
    """At most ``limit`` tokens admitted per sliding ``period``; a request larger than the limit still
    passes when the window is empty, so it cannot wait forever."""

    def __init__(self, limit: int, period: float) -> None:
        self.limit = limit
        self.period = period
        self._entries: deque[_TokenEntry] = deque()
        self._used = 0
        self._lock = asyncio.Lock()

    def _expire(self, now: float) -> None:
        while self._entries and now - self._entries[0].t >= self.period:
            self._used -= self._entries.popleft().tokens

    async def acquire(self, tokens: int) -> _TokenEntry:
        async with self._lock:
            while True:
                now = time.monotonic()
                self._expire(now)
                if not self._entries or self._used + tokens <= self.limit:
                    entry = _TokenEntry(now, tokens)
                    self._entries.append(entry)
                    self._used += tokens
                    return entry
                await asyncio.sleep(max(self._entries[0].t + self.period - now, 0.001))

    def settle(self, entry: _TokenEntry, tokens: int) -> None:
        """Replace an entry's estimate with the real count (if it is still in the window)."""
        if entry in self._entries:
            self._used += tokens - entry.tokens
        entry.tokens = tokens


class Admission:
    """A granted request slot; ``settle`` records the real token count of the answer."""

    def __init__(self, window: TokenWindow | None, entry: _TokenEntry | None) -> None:
        self._window = window
        self._entry = entry

    def settle(self, tokens: int) -> None:
        if self._window is not None and self._entry is not None:
            self._window.settle(self._entry, tokens)


class EndpointGate:
    """Admission control for one endpoint. Create it inside the event loop that will use it."""

    def __init__(self, limits: EndpointLimits) -> None:
        self.limits = limits
        self._semaphore = asyncio.Semaphore(limits.concurrency) if limits.concurrency else None
        self._throttler: Throttler | None = None
        self._throttle_lock = asyncio.Lock()
        if limits.rpm:
            spacing = limits.window_seconds / limits.rpm
            # Admission is timed here, arrival at the provider a little later and unevenly: a window 1% longer
            # than the provider's keeps that jitter from ever pushing its count over the limit.
            self._throttler = Throttler(
                rate_limit=limits.rpm,
                period=limits.window_seconds * RPM_WINDOW_MARGIN,
                retry_interval=min(max(spacing / 4, 0.002), 0.25),
            )
        self._tokens = TokenWindow(limits.tpm, limits.window_seconds) if limits.tpm else None

    @asynccontextmanager
    async def admit(self, estimated_tokens: int) -> AsyncIterator[Admission]:
        """Hold a concurrency slot for the duration; take an rpm/tpm share just before the request goes out
        (after the slot, so requests waiting for a slot cannot bunch up inside one window)."""
        if self._semaphore is not None:
            await self._semaphore.acquire()
        try:
            if self._throttler is not None:
                async with self._throttle_lock:
                    await self._throttler.acquire()
            entry = await self._tokens.acquire(estimated_tokens) if self._tokens is not None else None
            yield Admission(self._tokens, entry)
        finally:
            if self._semaphore is not None:
                self._semaphore.release()
