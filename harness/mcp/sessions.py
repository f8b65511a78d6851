"""One sandboxed environment instance per MCP session, created on first use and evicted when idle.

The registry knows sessions only by an opaque key (the server decides what identifies a session); it holds
one :class:`~harness.sandbox.EnvSession` per key, and at most ``max_sessions`` of them at once: a new one beyond
that is refused (:class:`SessionLimitReached`) until another ends. An instance that stayed unused for
``idle_timeout_s`` is closed; its key is remembered as expired so that a later call fails clearly instead of
silently starting over from the initial state (loading a state through the administrative operation revives the
key).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from harness.sandbox import EnvSession, SandboxPool
from harness.schema import Environment

logger = logging.getLogger(__name__)

_EXPIRED_KEYS_KEPT = 10_000
DEFAULT_MAX_SESSIONS = 64
"""Environment instances alive at once on one MCP server: twice ``harness run``'s default concurrency."""


class SessionExpired(LookupError):
    """The session's environment instance was evicted after being idle, or released by its client."""


class SessionLimitReached(LookupError):
    """A new environment instance would exceed the server's bound; ``active`` and ``limit`` say how far."""

    def __init__(self, active: int, limit: int) -> None:
        super().__init__(
            f"server at capacity: {active} of {limit} environment instances in use (harness serve --max-sessions); "
            "end an episode or retry later"
        )
        self.active = active
        self.limit = limit


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    session: EnvSession | None = None
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0


class SessionRegistry:
    """Environment instances keyed by session, all in one :class:`~harness.sandbox.SandboxPool`.

    ``default_state`` is what an instance starts from when its session uses a tool before loading a state.
    ``idle_timeout_s`` of None (or 0) keeps instances until their session ends or the registry closes.
    ``max_sessions`` bounds the instances alive (and being made) at once.
    """

    def __init__(
        self,
        pool: SandboxPool,
        environment: Environment,
        default_state: dict[str, Any],
        *,
        seed: int = 0,
        idle_timeout_s: float | None = 600.0,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, not {max_sessions}")
        self.pool = pool
        self.environment = environment
        self.default_state = default_state
        self.seed = seed
        self.idle_timeout_s = idle_timeout_s or None
        self.max_sessions = max_sessions
        self._opening = 0
        self._entries: dict[str, _Entry] = {}
        self._expired: OrderedDict[str, str] = OrderedDict()
        self._evictor: asyncio.Task[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        return sum(1 for entry in self._entries.values() if entry.session is not None)

    def __contains__(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.session is not None

    def knows(self, key: str) -> bool:
        """The key has an instance, is getting one, or is remembered as evicted or released."""
        return key in self._entries or key in self._expired

    # ------------------------------------------------------------------------------------------ sessions

    @contextlib.asynccontextmanager
    async def use(self, key: str) -> AsyncIterator[EnvSession]:
        """The key's instance for the duration of one operation (created from the default state on first use).

        Raises :class:`SessionExpired` when the key's instance was evicted or released.
        """
        entry = await self._acquire(key)
        try:
            async with entry.lock:
                if entry.session is None:
                    reason = self._expired.get(key)
                    if reason is not None:
                        raise SessionExpired(reason)
                    entry.session = await self._open(self.default_state, self.seed)
                    logger.info("session %s: environment %s instantiated", _short(key), self.environment.id)
                session = entry.session
            yield session
        finally:
            self._release(key, entry)

    async def load(self, key: str, state: dict[str, Any], *, seed: int | None = None) -> None:
        """Replace the key's instance by a fresh one built from ``state`` (this also revives an expired key)."""
        entry = await self._acquire(key)
        try:
            async with entry.lock:
                seed = self.seed if seed is None else seed
                if entry.session is None:
                    fresh = await self._open(state, seed)
                else:
                    fresh = await self.pool.open_session(self.environment, state, seed=seed)
                previous, entry.session = entry.session, fresh
                self._expired.pop(key, None)
            if previous is not None:
                await _close_quietly(previous)
            logger.info("session %s: state loaded", _short(key))
        finally:
            self._release(key, entry)

    async def close(self, key: str, reason: str = "the session was released by its client") -> bool:
        """Close the key's instance; later uses of the key fail with ``reason``. True if there was one."""
        entry = self._entries.get(key)
        if entry is None:
            return False
        async with entry.lock:
            session, entry.session = entry.session, None
            self._remember_expired(key, reason)
        if entry.busy == 0 and self._entries.get(key) is entry:
            del self._entries[key]
        if session is None:
            return False
        await _close_quietly(session)
        logger.info("session %s: closed (%s)", _short(key), reason)
        return True

    async def forget(self, key: str) -> None:
        """The session ended (its connection closed): close its instance and drop the key entirely."""
        await self.close(key, "the session ended")
        self._expired.pop(key, None)

    # ------------------------------------------------------------------------------------------ eviction

    async def evict_idle(self, now: float | None = None) -> list[str]:
        """Close every instance unused for longer than the idle timeout; returns their keys."""
        if self.idle_timeout_s is None:
            return []
        now = time.monotonic() if now is None else now
        stale = [
            key
            for key, entry in self._entries.items()
            if entry.session is not None and entry.busy == 0 and now - entry.last_used > self.idle_timeout_s
        ]
        reason = f"the environment instance was evicted after {self.idle_timeout_s:g} s without use"
        for key in stale:
            await self.close(key, reason)
        return stale

    def start_evictor(self) -> None:
        """Sweep for idle instances in the background until :meth:`aclose`."""
        if self.idle_timeout_s is None or self._evictor is not None:
            return
        self._evictor = asyncio.create_task(self._sweep(), name="mcp-session-evictor")

    async def _sweep(self) -> None:
        assert self.idle_timeout_s is not None
        period = min(max(self.idle_timeout_s / 4, 0.05), 30.0)
        while not self._closed:
            await asyncio.sleep(period)
            try:
                evicted = await self.evict_idle()
            except Exception:
                logger.exception("evicting idle MCP sessions failed")
                continue
            if evicted:
                logger.info("evicted %d idle environment instance(s)", len(evicted))

    async def aclose(self) -> None:
        """Stop the evictor and close every instance."""
        self._closed = True
        if self._evictor is not None:
            self._evictor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._evictor
            self._evictor = None
        for key in list(self._entries):
            await self.close(key, "the server is shutting down")

    async def __aenter__(self) -> SessionRegistry:
        self.start_evictor()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------------------------------ internals

    async def _open(self, state: dict[str, Any], seed: int) -> EnvSession:
        """A new instance, counted against ``max_sessions`` from the moment it is asked for."""
        active = len(self) + self._opening
        if active >= self.max_sessions:
            raise SessionLimitReached(active, self.max_sessions)
        self._opening += 1
        try:
            return await self.pool.open_session(self.environment, state, seed=seed)
        finally:
            self._opening -= 1

    async def _acquire(self, key: str) -> _Entry:
        if self._closed:
            raise SessionExpired("the server is shutting down")
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
        entry.busy += 1
        entry.last_used = time.monotonic()
        return entry

    def _release(self, key: str, entry: _Entry) -> None:
        entry.busy -= 1
        entry.last_used = time.monotonic()
        if entry.busy == 0 and entry.session is None and self._entries.get(key) is entry:
            del self._entries[key]

    def _remember_expired(self, key: str, reason: str) -> None:
        self._expired[key] = reason
        self._expired.move_to_end(key)
        while len(self._expired) > _EXPIRED_KEYS_KEPT:
            self._expired.popitem(last=False)


async def _close_quietly(session: EnvSession) -> None:
    try:
        await session.close()
    except Exception as exc:
        logger.warning("closing an environment instance failed: %s", exc)


def _short(key: str) -> str:
    return key if len(key) <= 24 else key[:21] + "..."
