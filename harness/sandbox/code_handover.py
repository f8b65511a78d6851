"""Environment code compiled in the harness, once, and handed to every zygote of a pool: each session process
of that environment then runs the code it inherited, with no unmarshalling and no bytecode in its open request.

The zygote reads only these bytes, the harness's own (``zygote.Zygote.load_code``), never what a child compiled.
"""

from __future__ import annotations

import asyncio
import logging
import marshal
from collections.abc import Callable

from harness.sandbox.children import Zygote, ZygoteFailed
from harness.sandbox.environment_code import compile_environment

logger = logging.getLogger(__name__)

MAX_HANDED_BYTES = 64 << 20
"""The compiled code (marshalled) a pool hands its zygotes at most; an environment beyond it is compiled by its
first session, as one whose code does not compile here is (which then reports what is wrong with it)."""


class CodeHandover:
    """The environments whose compiled code every zygote of one pool has, by source key."""

    def __init__(self, zygotes: Callable[[], list[Zygote]], limit_bytes: int | None = None):
        self.zygotes = zygotes
        """The pool's zygotes now (one that is replaced is handed everything first: ``hand_all``)."""
        self.limit_bytes = MAX_HANDED_BYTES if limit_bytes is None else limit_bytes
        self.marshalled: dict[str, bytes] = {}
        """What is being or has been handed over (a zygote that starts is handed all of it)."""
        self.size = 0
        self.handed: set[str] = set()
        """What every zygote has been sent: sessions of these open with the key alone."""
        self._handing: dict[str, asyncio.Future[bool]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.handed

    async def hand(self, key: str, source: str) -> bool:
        """Compile ``source`` (whose key is ``key``) and hand it to every zygote, once per key; whether its
        sessions may open with the key alone. A caller that comes while it is being sent waits for that: its
        fork request must not reach a zygote before the code does."""
        if key in self.handed:
            return True
        handing = self._handing.get(key)
        if handing is None:
            handing = self._handing[key] = asyncio.ensure_future(self._hand_over(key, source))
        return await asyncio.shield(handing)

    async def _hand_over(self, key: str, source: str) -> bool:
        try:
            data = marshal.dumps(compile_environment(source))
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, OverflowError):
            return False
        if self.size + len(data) > self.limit_bytes:
            return False
        # Known before it is sent: a zygote started meanwhile is handed it with the rest (hand_all).
        self.marshalled[key] = data
        self.size += len(data)
        for zygote in list(self.zygotes()):
            try:
                await zygote.preload(key, data)
            except ZygoteFailed:
                pass  # that zygote is replaced before its next fork, and its replacement is handed everything
            except OSError as exc:  # no memory file to carry it: its sessions get the bytecode instead
                logger.info("environment code could not be handed to the sandbox: %s", exc)
                del self.marshalled[key]
                self.size -= len(data)
                return False
        self.handed.add(key)
        return True

    async def hand_all(self, zygote: Zygote) -> None:
        """Everything handed so far, to a zygote that has just started (before it forks for the pool)."""
        for key, data in list(self.marshalled.items()):
            try:
                await zygote.preload(key, data)
            except ZygoteFailed:
                return


__all__ = ["MAX_HANDED_BYTES", "CodeHandover"]
