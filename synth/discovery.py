"""Discovery: from a task set to environment themes (the skeleton paper's task-driven environment discovery).

A model keeps the tasks that imply a domain-specific stateful system (a binary verdict with a reason),
infers an environment description from each kept task, and descriptions closer than a cosine-similarity
threshold are merged into one theme that remembers every task that motivated it.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from pathlib import Path
from typing import Any

import orjson

from harness.llm.embeddings import cosine, embed
from harness.schema import Usage
from synth.answers import AnswerError, Asker
from synth.dedup import EmbedFunction
from synth.records import InferredEnvironment, TaskOutcome, TaskVerdict, Theme
from synth.templates import load_template, similar_examples

logger = logging.getLogger(__name__)

DEFAULT_COLUMN = "task"


class TaskSourceError(ValueError):
    pass


def _task_text(record: Any, column: str) -> str | None:
    if isinstance(record, str):
        return record
    if isinstance(record, dict):
        value = record.get(column)
        if isinstance(value, str):
            return value
        if value is not None:
            return orjson.dumps(value).decode()
    return None


def load_tasks(source: str, column: str | None = None, limit: int | None = None, split: str = "train") -> list[str]:
    """Task texts from a JSON Lines file (field ``column``, default ``task``) or a Hub dataset id / dataset
    folder read with ``datasets.load_dataset``. Empty and repeated tasks are dropped; order is kept."""
    column = column or DEFAULT_COLUMN
    path = Path(source)
    texts: list[str] = []
    if path.is_file():
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                text = _task_text(orjson.loads(line), column)
            except orjson.JSONDecodeError as exc:
                raise TaskSourceError(f"{path}:{number}: not JSON ({exc})") from None
            if text is None:
                raise TaskSourceError(f"{path}:{number}: no text field {column!r}")
            texts.append(text)
    else:
        # Imported by name: the repository's data folder is also called ``datasets``.
        datasets_library = importlib.import_module("datasets")
        try:
            dataset = datasets_library.load_dataset(source, split=split)
        except Exception as exc:
            raise TaskSourceError(f"{source!r} is neither a JSON Lines file nor a loadable dataset: {exc}") from exc
        if column not in dataset.column_names:
            raise TaskSourceError(f"dataset {source!r} has no column {column!r} (columns: {dataset.column_names})")
        texts = [t for t in (_task_text(v, column) for v in dataset[column]) if t is not None]
    unique = list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))
    return unique[:limit] if limit is not None else unique


async def judge_task(asker: Asker, task: str, usage: Usage) -> TaskOutcome:
    """Keep or drop one task and, when kept, infer the environment it implies."""
    example = similar_examples(task)
    try:
        verdict = await asker.json(
            load_template("filter_task").render(task=task, example_name=example.name, example_summary=example.summary),
            TaskVerdict,
            "synth.discovery",
            usage,
        )
    except AnswerError as exc:
        return TaskOutcome(task=task, keep=False, reason="filter answer unusable", error=str(exc))
    if not verdict.keep:
        return TaskOutcome(task=task, keep=False, reason=verdict.reason)
    try:
        inferred = await asker.json(
            load_template("infer_environment").render(
                task=task, example_name=example.name, example_summary=example.summary
            ),
            InferredEnvironment,
            "synth.discovery",
            usage,
        )
    except AnswerError as exc:
        return TaskOutcome(task=task, keep=False, reason="environment description unusable", error=str(exc))
    return TaskOutcome(task=task, keep=True, reason=verdict.reason, description=inferred.description.strip())


def theme_id(description: str) -> str:
    return "theme-" + hashlib.sha256(description.encode()).hexdigest()[:10]


async def merge_into_themes(
    outcomes: list[TaskOutcome],
    similarity: float,
    embedding_model: str | None = None,
    embed_texts: EmbedFunction | None = None,
) -> list[Theme]:
    """Greedy merge in task order: a description joins the first theme whose representative description is
    at least ``similarity`` cosine-similar, or starts a new theme. ``embed_texts`` replaces embedding with
    ``embedding_model`` (``synth.vectors.TextVectors.embed``: vectors started while discovery was running)."""
    kept = [o for o in outcomes if o.keep and o.description]
    if not kept:
        return []
    texts = [o.description or "" for o in kept]
    vectors = await embed_texts(texts) if embed_texts is not None else await embed(texts, embedding_model)
    themes: list[Theme] = []
    representatives: list[list[float]] = []
    for outcome, vector in zip(kept, vectors, strict=True):
        for index, representative in enumerate(representatives):
            if cosine(vector, representative) >= similarity:
                if outcome.task not in themes[index].tasks:
                    themes[index].tasks.append(outcome.task)
                break
        else:
            description = outcome.description or ""
            themes.append(Theme(id=theme_id(description), description=description, tasks=[outcome.task]))
            representatives.append(vector)
    logger.info("%d kept tasks merged into %d themes", len(kept), len(themes))
    return themes
