"""Text embeddings computed while the model is still answering.

The stages that embed (theme merging after discovery, duplicate search after scenario synthesis) need every
text before they decide, but each text is known as soon as the model call that produced it returns. With the
offline model, :class:`TextVectors` starts embedding each text then, in the embedding worker thread, so that
work overlaps the model calls still in flight instead of following the last of them. Each text is embedded on
its own, so its vector depends on the text alone (not on which other texts share its batch) and is the same
whether it was embedded early, late, or on a resumed run. A remote embedding model gets one batched request
for the texts asked for, as before.
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
        self._pending: dict[str, asyncio.Task[list[float]]] = {}

    def add(self, text: str) -> None:
        """Start embedding ``text`` now (offline model only; a remote model is asked once, in :meth:`embed`)."""
        if self.early and text not in self._pending:
            self._pending[text] = asyncio.create_task(self._one(text))

    async def _one(self, text: str) -> list[float]:
        return (await embed([text], self.model))[0]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order (an ``EmbedFunction``)."""
        if not self.early:
            return await embed(texts, self.model)
        for text in texts:
            self.add(text)
        return list(await asyncio.gather(*(self._pending[text] for text in texts)))

    async def aclose(self) -> None:
        """Stop what is still being embedded and collect what failed, so nothing is left running or unread."""
        pending = list(self._pending.values())
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pending.clear()
