"""A sandbox pool on an event loop of its own thread, for trainers that call environments synchronously.

Trainers such as TRL call tools and rewards as plain functions. The jail is asyncio, so it runs on a background
loop and each synchronous call waits for its coroutine there; the trainer's process never runs environment code.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from harness.sandbox.spec import JailSpec

T = TypeVar("T")


class JailThread:
    """One event loop thread and the :class:`SandboxPool` that lives on it."""

    def __init__(self, jail: JailSpec | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="harness-jail-loop", daemon=True)
        self._thread.start()
        self.pool = (jail or JailSpec()).pool()
        self._closed = False

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the jail's loop and wait for its result (its exception is raised here)."""
        if self._closed:
            coroutine.close()
            raise RuntimeError("the jail thread is closed")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def run_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the jail's loop and await it from another event loop (an async trainer's)."""
        if self._closed:
            coroutine.close()
            raise RuntimeError("the jail thread is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def close(self) -> None:
        """Stop the pool's zygotes and the loop; idempotent."""
        if self._closed:
            return
        try:
            self.run(self.pool.close())
        finally:
            self._closed = True
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
            self.loop.close()
