"""`harness export acebench`: a run written in ACEBench's result layout, read back by a re-implementation of its
evaluator (eval_main.py's agent_eval and agent_eval_process, model_eval/checker.py's agent_checker, written here
from upstream's rules and independent of the harness's checks): its accuracies equal the run's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import orjson

from tests.doubles.mock_openai import MockOpenAIServer, ReplayPolicy
from tests.harness.benchmarks.test_acebench_import import (  # noqa: F401  (fixtures)
    acebench_checkout,
    multi_step_library,
)
from tests.harness.benchmarks.test_acebench_rules import results, run_acebench, server  # noqa: F401
from tests.support.cli_process import harness


def agent_checker(model_output: dict[str, Any], possible_answer: dict[str, Any]) -> bool:
    expected = next(iter(possible_answer.values()))
    for name, value in next(iter(model_output.values())).items():
        if name not in expected:
            return False
        if isinstance(expected[name], dict):
            if any(key not in value or value[key] != item for key, item in expected[name].items()):
                return False
        elif expected[name] != value:
            return False
    return True


def end_to_end(result: list[dict[str, Any]], truth: list[dict[str, Any]]) -> bool:
    if len(truth) != len(result):
        return False
    valid = True
    for answer in truth:
        matched = next((item for item in result if set(item) == set(answer)), None)
        if matched:
            valid = agent_checker(matched, answer)
        if not valid:
            return False
    return True


def process_accuracy(process: list[str], milestones: list[Any]) -> float:
    def found(stones: list[str]) -> float:
        indices, current = [], 0
        for stone in stones:
            while current < len(process):
                if process[current].strip() == stone.strip():
                    indices.append(current)
                    current += 1
                    break
                current += 1
        return len(indices) / len(stones) if stones else 1.0

    if isinstance(milestones[0], list):
        return max(round(found(stones), 3) for stones in milestones)
    return found(milestones)


def test_an_export_reads_back_with_acebenchs_accuracies(
    acebench_checkout: Path,  # noqa: F811
    multi_step_library: Path,  # noqa: F811
    server: MockOpenAIServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    server.register_replay("Add a note titled", [{"name": "list_notes", "arguments": {}}])
    server.register_replay(
        "The wifi is off",
        [
            {"name": "turn_on_wifi", "arguments": {}},
            {"name": "add_note", "arguments": {"title": "shopping", "text": "Buy milk"}},
        ],
    )
    server.register_replay("Delete the note", [{"name": "delete_note", "arguments": {"note_id": 99}}])
    server.set_policy("export-agent", ReplayPolicy(final_text="finish conversation"))
    run = tmp_path / "run"
    finished = run_acebench(multi_step_library, run, server, agent="export-agent")
    assert finished.code == 0, finished.stderr
    episodes = {e["scenario_id"]: e for e in results(run)}
    out = tmp_path / "export"
    exported = harness(["export", "acebench", str(run), "--out", str(out)])
    assert exported.code == 0, exported.stderr
    path = out / "result_all/result_en/mock-agent/data_agent_multi_step_result.json"
    assert exported.stdout.strip() == f"Wrote {path} (3 tasks)"
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [e["id"] for e in entries] == ["agent_multi_step_0", "agent_multi_step_1", "agent_multi_step_2"]
    assert [e["process"] for e in entries] == [
        ["[list_notes()]"],
        ["[turn_on_wifi()]", "[add_note(title='shopping', text='Buy milk')]"],
        ["[delete_note(note_id=99)]"],
    ]
    assert entries[0]["result"][1] == {"NoteApi": {"notes": {"1": {"title": "old", "text": "an old note"}}}}
    answer_file = acebench_checkout / "data_all/data_en/possible_answer/data_agent_multi_step.json"
    answers = [orjson.loads(line) for line in answer_file.read_bytes().splitlines()]
    correct = [end_to_end(e["result"], a["ground_truth"]) for e, a in zip(entries, answers, strict=True)]
    processes = [
        1.0 if ok else process_accuracy(e["process"], a["mile_stone"])
        for ok, e, a in zip(correct, entries, answers, strict=True)
    ]
    # Task 0 misses its note, task 1 is right, task 2's empty expected notes hold whatever is left (upstream).
    assert correct == [False, True, True]
    ours = [episodes[f"acebench-multi-step-en-{n}"]["reward"] for n in range(3)]
    assert [r["state_reward"] for r in ours] == [1.0 if ok else 0.0 for ok in correct]
    assert [r["process_accuracy"] for r in ours] == processes == [0.0, 1.0, 1.0]
    assert round(sum(correct) / len(correct), 3) == round(sum(r["state_reward"] for r in ours) / 3, 3) == 0.667


def test_a_library_without_every_task_of_the_category_is_not_exported(
    acebench_checkout: Path,  # noqa: F811
    server: MockOpenAIServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    checkout = tmp_path / "ACEBench"
    shutil.copytree(acebench_checkout, checkout)
    with (checkout / "data_all" / "data_en" / "data_agent_multi_step.json").open("a") as data:
        data.write("not a record\n")
    library = tmp_path / "lib"
    command = ["import", "acebench", "--source", str(checkout), "--category", "multi_step", "--out", str(library)]
    imported = harness([*command, "--skip-bad-records"])
    assert imported.code == 0, imported.stderr
    run = tmp_path / "run"
    assert run_acebench(library, run, server, "--limit", "1").code == 0
    out = tmp_path / "export"
    exported = harness(["export", "acebench", str(run), "--out", str(out)])
    assert exported.code == 2
    assert "the library holds 3 of the 4 tasks of multi_step (en)" in exported.stderr
    assert not out.exists() or not any(out.rglob("*.json"))
