"""Duplicate scenarios: the same task twice in one environment, word for word or in other words.

Two accepted scenarios of one environment are duplicates when their tasks are equal once normalized (case,
punctuation and spacing ignored), or when their embeddings (``harness.llm.embeddings``, offline
all-MiniLM-L6-v2 by default) are at least ``threshold`` similar *and* they name the same identifiers and
numbers. The second condition keeps "cancel order O-1002" and "cancel order O-1003" apart: they embed almost
alike but are different tasks. The first scenario (in attempt order) is kept; later ones are reported as
duplicates of it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel

EmbedFunction = Callable[[list[str]], Awaitable[list[list[float]]]]
DEFAULT_SIMILARITY = 0.92

_PUNCTUATION = re.compile(r"[^\w@.+-]+|(?<!\w)[.+-]|[.+-](?!\w)")
_ANCHOR = re.compile(r"[\w.@+-]*\d[\w.@+-]*|[\w.+-]+@[\w.-]+")


class Duplicate(BaseModel):
    key: str
    scenario_id: str
    of_key: str
    of_scenario_id: str
    by: Literal["text", "embedding"]
    similarity: float | None = None

    @property
    def reason(self) -> str:
        if self.by == "text":
            return f"the same task as {self.of_scenario_id}"
        return f"the same task in other words as {self.of_scenario_id} (similarity {self.similarity:.3f})"


def normalized_task(text: str) -> str:
    return " ".join(_PUNCTUATION.sub(" ", text.lower()).split())


def anchors(text: str) -> frozenset[str]:
    """The identifiers, numbers and addresses a task names: tokens with a digit, and email addresses."""
    return frozenset(match.group(0).strip(".").lower() for match in _ANCHOR.finditer(text))


async def find_duplicates(
    records: Sequence[dict[str, Any]],
    *,
    threshold: float | None = DEFAULT_SIMILARITY,
    embed: EmbedFunction | None = None,
    embedding_model: str | None = None,
) -> list[Duplicate]:
    """Duplicates among the accepted records (journal dicts with ``key`` and ``scenario``); ``threshold=None``
    compares normalized text only."""
    accepted = [r for r in records if r.get("accepted") and r.get("scenario")]
    duplicates: list[Duplicate] = []
    kept: dict[str, list[dict[str, Any]]] = {}
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for record in accepted:
        scenario = record["scenario"]
        text_key = (scenario["environment_id"], normalized_task(scenario["task"]))
        first = seen.get(text_key)
        if first is not None:
            duplicates.append(_duplicate(record, first, "text"))
            continue
        seen[text_key] = record
        kept.setdefault(scenario["environment_id"], []).append(record)
    if threshold is None:
        return duplicates
    candidates = [r for group in kept.values() if len(group) > 1 for r in group]
    if not candidates:
        return duplicates
    if embed is None:
        from harness.llm.embeddings import embed as default_embed

        async def embed_texts(texts: list[str]) -> list[list[float]]:
            return await default_embed(texts, embedding_model)

        embed = embed_texts
    import numpy as np

    vectors = np.asarray(await embed([r["scenario"]["task"] for r in candidates]), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit = {r["key"]: row for r, row in zip(candidates, vectors / norms, strict=True)}
    for group in kept.values():
        survivors: list[dict[str, Any]] = []
        for record in group:
            task = record["scenario"]["task"]
            match = None
            for earlier in survivors:
                if anchors(earlier["scenario"]["task"]) != anchors(task):
                    continue
                similarity = float(unit[record["key"]] @ unit[earlier["key"]])
                if similarity >= threshold:
                    match = _duplicate(record, earlier, "embedding", similarity)
                    break
            if match is None:
                survivors.append(record)
            else:
                duplicates.append(match)
    return duplicates


def _duplicate(
    record: dict[str, Any], first: dict[str, Any], by: Literal["text", "embedding"], similarity: float | None = None
) -> Duplicate:
    return Duplicate(
        key=record["key"],
        scenario_id=record["scenario"]["id"],
        of_key=first["key"],
        of_scenario_id=first["scenario"]["id"],
        by=by,
        similarity=round(similarity, 4) if similarity is not None else None,
    )


def mark_duplicates(records: Sequence[dict[str, Any]], duplicates: Sequence[Duplicate]) -> list[dict[str, Any]]:
    """The records with each duplicate turned into a rejection (``rejected_by="duplicate"``)."""
    by_key = {d.key: d for d in duplicates}
    marked = []
    for record in records:
        duplicate = by_key.get(record["key"])
        if duplicate is None:
            marked.append(record)
            continue
        marked.append(
            {
                **record,
                "accepted": False,
                "rejected_by": "duplicate",
                "reason": duplicate.reason,
                "duplicate_of": duplicate.of_scenario_id,
            }
        )
    return marked
