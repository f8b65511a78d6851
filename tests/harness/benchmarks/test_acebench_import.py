"""`harness import acebench` on a small made-up checkout in ACEBench's layout, through the real CLI and the real
jail: bad records fail the import unless skipped, tasks whose gold misses upstream's ground truth are reported and
tagged, tools are upstream's function docs in order, another layout or a missing language is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.library import load_library
from harness.schema import Scenario
from tests.support.acebench_checkout import FUNCTIONS, write_checkout
from tests.support.cli_process import harness


@pytest.fixture(scope="session")
def acebench_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkout(tmp_path_factory.mktemp("acebench") / "ACEBench")


def _import(checkout: Path, category: str, out: Path) -> Path:
    finished = harness(
        [
            "import",
            "acebench",
            "--source",
            str(checkout),
            "--category",
            category,
            "--out",
            str(out),
            "--skip-bad-records",
        ]
    )
    assert finished.code == 0, finished.stderr
    return out


@pytest.fixture(scope="session")
def multi_turn_library(acebench_checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _import(acebench_checkout, "multi_turn", tmp_path_factory.mktemp("acebench-libs") / "multi_turn")


@pytest.fixture(scope="session")
def multi_step_library(acebench_checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _import(acebench_checkout, "multi_step", tmp_path_factory.mktemp("acebench-libs") / "multi_step")


def scenario(library: Path, scenario_id: str) -> Scenario:
    return next(s for s in load_library(library).scenarios if s.id == scenario_id)


def test_a_bad_record_fails_the_import_and_writes_nothing(acebench_checkout: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "ACEBench"
    shutil.copytree(acebench_checkout, checkout)
    with (checkout / "data_all" / "data_en" / "data_agent_multi_turn.json").open("a") as data:
        data.write('{"id": "agent_multi_turn_4", "question": "no initial_config"}\n')
    out = tmp_path / "lib"
    finished = harness(["import", "acebench", "--source", str(checkout), "--category", "multi_turn", "--out", str(out)])
    assert finished.code == 1 and not out.exists()
    assert finished.stderr_lines[0] == "bad record agent_multi_turn_4: has no 'initial_config'"
    assert finished.stderr_lines[-1] == "nothing written: 1 bad record(s); --skip-bad-records"
    assert len(finished.stderr_lines) == 2


def test_every_task_is_imported_and_those_without_a_gold_or_whose_gold_misses_are_reported(
    acebench_checkout: Path, tmp_path: Path
) -> None:
    out = tmp_path / "lib"
    finished = harness(
        ["import", "acebench", "--source", str(acebench_checkout), "--category", "multi_turn", "--out", str(out)]
    )
    assert finished.code == 0, finished.stderr
    assert finished.stderr_lines == [
        "gold does not reach the expected state agent_multi_turn_3: its gold does not reach upstream's ground truth",
        finished.stderr_lines[1],
    ]
    assert finished.stderr_lines[1].startswith(
        "no gold (the oracle cannot play it) agent_multi_turn_2: a milestone does not parse"
    )
    assert "Bob's list" in finished.stderr_lines[1]
    assert "4 tasks" in finished.stdout and "1 whose gold does not reach" in finished.stdout
    assert "1 whose milestones do not parse" in finished.stdout
    library = load_library(out)
    assert [s.provenance.upstream_id for s in library.scenarios] == [f"agent_multi_turn_{n}" for n in range(4)]
    assert {s.provenance.details["category_tasks"] for s in library.scenarios} == {4}
    without_gold = scenario(out, "acebench-multi-turn-en-2")
    assert without_gold.reference_actions == [] and "acebench-unparsed-milestone" in without_gold.tags
    assert "gold-unsolvable" not in without_gold.tags
    assert without_gold.provenance.details["milestone_problem"].startswith("a milestone does not parse")
    assert [c.id for c in without_gold.checks] == [c.id for c in scenario(out, "acebench-multi-turn-en-0").checks]
    unsolvable = scenario(out, "acebench-multi-turn-en-3")
    assert "gold-unsolvable" in unsolvable.tags
    assert unsolvable.provenance.details["gold_reaches_ground_truth"] is False
    solvable = scenario(out, "acebench-multi-turn-en-0")
    assert solvable.provenance.details["gold_reaches_ground_truth"] is True
    assert solvable.provenance.details["milestone_problem"] is None
    assert [(a.name, a.arguments) for a in solvable.reference_actions] == [
        ("turn_on_wifi", {}),
        ("add_note", {"title": "shopping", "text": "Buy milk"}),
    ]
    assert solvable.initial_state == {
        "initial_config": {"BaseApi": {"wifi": False}},
        "involved_classes": ["BaseApi", "NoteApi"],
    }


def test_tools_are_upstreams_function_docs_in_order_and_the_license_is_recorded(multi_step_library: Path) -> None:
    library = load_library(multi_step_library)
    (environment,) = library.environments.values()
    assert environment.tool_names == [f["name"] for f in FUNCTIONS]
    add_note = environment.tools[1].function
    assert add_note.description == "Add a note."
    assert add_note.parameters == {
        "type": "object",
        "required": ["title", "text"],
        "properties": {
            "title": {"type": "string", "description": "The note's title."},
            "text": {"type": "string", "description": "The note's text."},
        },
    }
    assert environment.provenance.source == "acebench"
    assert environment.provenance.details["source_license"] == "MIT"
    assert environment.provenance.details["license_text"] == "MIT License (fixture)\n"
    assert environment.provenance.details["functions"] == FUNCTIONS
    # The scenario modules run only in the jail, embedded as text without their imports of each other.
    assert "from model_inference" not in environment.code and "class NoteApi(BaseApi):" in environment.code
    assert environment.introduction == ""  # multi_step's agent gets no domain prompt upstream
    multi = scenario(multi_step_library, "acebench-multi-step-en-1")
    assert multi.provenance.details["mile_stone"][1] == ["[add_note(title='x', text='y')]"]
    assert [a.name for a in multi.reference_actions] == ["turn_on_wifi", "add_note"]  # the first alternative


def test_another_layout_and_a_missing_language_are_refused(acebench_checkout: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / "data").mkdir(parents=True)
    (other / "README.md").write_text("not ACEBench\n")
    refused = harness(
        ["import", "acebench", "--source", str(other), "--category", "multi_turn", "--out", str(tmp_path / "a")]
    )
    assert refused.code == 2 and len(refused.stderr_lines) == 1, refused.stderr
    line = refused.stderr_lines[0]
    assert "is not an ACEBench checkout: expected data_all, model_inference, model_eval, eval_main.py" in line
    assert "found README.md, data" in line
    zh = harness(
        [
            "import",
            "acebench",
            "--source",
            str(acebench_checkout),
            "--category",
            "multi_step",
            "--language",
            "zh",
            "--out",
            str(tmp_path / "b"),
        ]
    )
    assert zh.code == 2 and len(zh.stderr_lines) == 1, zh.stderr
    assert "has no agent multi_step data in zh" in zh.stderr
    assert zh.stderr_lines[0].endswith("it holds: en/multi_turn, en/multi_step")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
