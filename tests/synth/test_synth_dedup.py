"""Duplicate scenarios are dropped, by normalized text and by embedding similarity (the bundled offline model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.library import load_library
from harness.llm import LLMClient
from harness.sandbox import JailSpec
from synth.dedup import anchors, find_duplicates, mark_duplicates, normalized_task
from synth.scenarios import ScenarioSynthesisConfig, synthesize_scenarios
from tests.doubles.scripted_scenarios import ScriptedScenarioWriter, scripted

LIBRARY = load_library()


def record(key: str, task: str, environment_id: str = "retail_orders") -> dict[str, Any]:
    scenario = {"id": f"s-{key}", "environment_id": environment_id, "task": task}
    return {"key": key, "accepted": True, "scenario": scenario}


async def test_duplicates_by_text_and_by_embedding_but_not_other_records() -> None:
    records = [
        record("a", "Cancel order O-1002, please."),
        record("b", "cancel  order o-1002 please"),  # the same words
        record("c", "Please cancel my order O-1002."),  # the same task in other words
        record("d", "Cancel order O-1003, please."),  # another order: embeds alike, is not the same task
        record("e", "Cancel order O-1002, please.", environment_id="banking"),  # another environment
        record("f", "Update my default address to 9 Bay St, Austin, TX."),
        {"key": "g", "accepted": False, "scenario": record("g", "Cancel order O-1002, please.")["scenario"]},
    ]
    assert normalized_task(records[0]["scenario"]["task"]) == normalized_task(records[1]["scenario"]["task"])
    assert anchors("Cancel order O-1002.") != anchors("Cancel order O-1003.")
    duplicates = await find_duplicates(records)
    found = {d.key: (d.of_key, d.by) for d in duplicates}
    assert found == {"b": ("a", "text"), "c": ("a", "embedding")}
    embedded = next(d for d in duplicates if d.by == "embedding")
    assert embedded.similarity is not None and embedded.similarity >= 0.92
    assert "other words as s-a" in embedded.reason

    text_only = await find_duplicates(records, threshold=None)
    assert {d.key for d in text_only} == {"b"}

    marked = mark_duplicates(records, duplicates)
    assert [r["accepted"] for r in marked] == [True, False, False, True, True, True, False]
    assert marked[1]["rejected_by"] == "duplicate" and marked[1]["duplicate_of"] == "s-a"


async def test_repeated_scenarios_are_dropped_and_counted(tmp_path: Path) -> None:
    # The scripted writer cycles through the 12 seed scenarios: variations 12 and 13 repeat 0 and 1.
    writer = scripted(ScriptedScenarioWriter(["retail_orders"]))
    config = ScenarioSynthesisConfig(model=writer, per_env=14, probes=0, concurrency=4)
    out = tmp_path / "scen"
    client = LLMClient(cache_dir=None)
    try:
        async with JailSpec(workers=2).pool() as pool:
            report = await synthesize_scenarios(
                [LIBRARY.environments["retail_orders"]], config, out, client=client, pool=pool
            )
    finally:
        await client.aclose()
    built = load_library(out)
    tasks = [s.task for s in built.scenarios]
    assert len(tasks) == len(set(tasks)) == report.accepted
    assert report.duplicates >= 1 and report.rejected_by["duplicate"] == report.duplicates
    assert "embeddings" in report.dedup
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    duplicates = [r for r in rejected if r["rejected_by"] == "duplicate"]
    assert len(duplicates) == report.duplicates
    assert all(r["duplicate_of"] in {s.id for s in built.scenarios} for r in duplicates)
