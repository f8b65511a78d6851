"""Text embeddings computed while the model is still answering.

The stages that embed (theme merging after discovery, duplicate search after scenario synthesis) need every
text before they decide, but each text is known as soon as the model call that produced it returns. With the
offline model, :class:`TextVectors` starts embedding texts then, in the embedding worker thread, so that work
overlaps the model calls still in flight instead of following the last of them. Whatever arrived while the
previous batch was being embedded goes in the next batch: the offline model gives a text the same vector in
any batch (``harness.llm.embeddings``), so a vector does not depend on when its text arrived, and a run and its
resume decide alike. A remote embedding model gets one batched request for the texts asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from harness.llm.embeddings import embed, is_local_embedding_model

logger = logging.getLogger(__name__)


class TextVectors:
    """Embeddings of texts, started early with :meth:`add` and collected with :meth:`embed`."""

    def __init__(self, model: str | None = None):
        self.model = model
        self.early = is_local_embedding_model(model)
        self._pending: dict[str, asyncio.Future[list[float]]] = {}
        self._queued: list[str] = []
        self._worker: asyncio.Task[None] | None = None

    def add(self, text: str) -> None:
        """Start embedding ``text`` soon (offline model only; a remote model is asked once, in :meth:`embed`)."""
        if not self.early or text in self._pending:
            return
        self._pending[text] = asyncio.get_running_loop().create_future()
        self._queued.append(text)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._embed_queued())

    async def _embed_queued(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            try:
                vectors = await embed(batch, self.model)
            except Exception as exc:  # each waiting text learns why; the next batch may still succeed
                for text in batch:
                    self._settle(text, exc)
                continue
            for text, vector in zip(batch, vectors, strict=True):
                self._settle(text, vector)

    def _settle(self, text: str, outcome: list[float] | Exception) -> None:
        future = self._pending.get(text)
        if future is None or future.done():
            return
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order (an ``EmbedFunction``)."""
        if not self.early:
            return await embed(texts, self.model)
        for text in texts:
            self.add(text)
        return list(await asyncio.gather(*(self._pending[text] for text in texts)))

    async def aclose(self) -> None:
        """Stop what is still being embedded and collect what failed, so nothing is left running or unread."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
            self._worker = None
        for future in self._pending.values():
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # marks a failure as read
        self._pending.clear()
        self._queued.clear()
