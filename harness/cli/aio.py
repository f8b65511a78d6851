"""``asyncio.run`` for the commands: the coroutine's value is handed back outside the task.

``asyncio.run`` puts a SIGINT handler holding the main task in place and, on the way out, compares the handler with
``signal.getsignal``, which tries to turn it into a ``signal.Handlers`` member and so formats its ``repr``: the
task's, with its result. For an import that is every scenario with its whole initial state (3.6 s of a 39 s
retail import went into that string). A task whose value is ``None`` costs nothing to show.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_to_end(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on a fresh event loop, as ``asyncio.run`` does, and return its value."""
    values: list[T] = []

    async def main() -> None:
        values.append(await coroutine)

    asyncio.run(main())
    return values[0]
