"""`harness import bfcl`: what the library holds, and one clear line for each kind of bad input."""

from __future__ import annotations

import datetime
import re
import shutil
import zipfile
from collections import Counter
from pathlib import Path

import orjson
import pytest

from harness.benchmarks.bfcl.code import STRPTIME_SOURCE
from harness.hub.rows import records_to_table, rows_to_records
from harness.library import load_library
from tests.support.cli_process import harness_cli

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")


def _source_rows(wheel: Path, relative: str) -> list[dict]:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"bfcl_eval/{relative}").decode()
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


def test_all_four_categories_import_with_the_source_counts(bfcl_library: Path, bfcl_wheel: Path) -> None:
    library = load_library(bfcl_library)
    assert not library.problems
    counts = Counter(next(t for t in s.tags if t.startswith("multi_turn_")) for s in library.scenarios)
    for category in CATEGORIES:
        source = _source_rows(bfcl_wheel, f"data/BFCL_v4_{category}.json")
        assert counts[category] == len(source) == 200
    ids = [s.id for s in library.scenarios]
    assert len(set(ids)) == 800  # two entries share their first message: ids carry BFCL's entry id
    assert "multi_turn_base_40" in ids
    classes = {tuple(sorted(s.provenance.details["involved_classes"])) for s in library.scenarios}
    assert len(library.environments) == len(classes) == 20
    for environment in library.environments.values():
        assert environment.call_dispatcher == "execute_call"
        assert environment.tools


def test_scenarios_keep_turns_ground_truth_and_withheld_functions(bfcl_library: Path, bfcl_wheel: Path) -> None:
    library = load_library(bfcl_library)
    scenarios = {s.id: s for s in library.scenarios}
    entry = _source_rows(bfcl_wheel, "data/BFCL_v4_multi_turn_miss_func.json")[0]
    truth = _source_rows(bfcl_wheel, "data/possible_answer/BFCL_v4_multi_turn_miss_func.json")[0]["ground_truth"]
    scenario = scenarios[entry["id"]]
    assert len(scenario.turns) == len(entry["question"]) == len(truth)
    assert scenario.turns[0].content == entry["question"][0][0]["content"]
    # The miss_func turn has no user text: BFCL sends its fixed notice, read from the wheel.
    assert entry["question"][3] == []
    assert scenario.turns[3].content == "I have updated some more functions you can choose from. What about now?"
    assert scenario.turns[3].tools_added == ["sort"]
    # Positional ground truth ("sort('final_report.pdf')") gets the method's parameter name.
    assert truth[3] == ["sort('final_report.pdf')"]
    assert [(a.name, a.arguments) for a in scenario.turns[3].reference_actions] == [
        ("sort", {"file_name": "final_report.pdf"})
    ]
    assert [len(t.reference_actions) for t in scenario.turns] == [len(t) for t in truth]
    assert scenario.initial_state == {"initial_config": entry["initial_config"], "long_context": False}
    assert scenario.max_steps_per_turn == 20
    long_context = next(s for s in library.scenarios if "multi_turn_long_context" in s.tags)
    assert long_context.initial_state["long_context"] is True


def test_tool_schemas_follow_bfcl_function_docs(bfcl_library: Path, bfcl_wheel: Path) -> None:
    library = load_library(bfcl_library)
    environment = library.environments["bfcl-gorillafilesystem"]
    with zipfile.ZipFile(bfcl_wheel) as archive:
        text = archive.read("bfcl_eval/data/multi_turn_func_doc/gorilla_file_system.json").decode()
    docs = [orjson.loads(line) for line in text.splitlines() if line.strip()]
    assert environment.tool_names == [doc["name"] for doc in docs]  # every function is offered
    cd = environment.tool("cd")
    assert cd is not None
    assert cd.function.parameters["type"] == "object"
    assert cd.function.parameters["required"] == ["folder"]
    travel = library.environments["bfcl-travelapi"]
    cost = travel.tool("get_flight_cost")
    assert cost is not None
    assert all(p["type"] != "dict" for p in cost.function.parameters["properties"].values())


def test_a_file_that_is_not_a_bfcl_wheel_is_one_clear_line(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.whl"
    bogus.write_text("not a zip")
    out = tmp_path / "out"
    result = harness_cli("import", "bfcl", "--source", str(bogus), "--out", str(out))
    assert result.returncode == 2
    assert "neither a folder nor a wheel" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_an_unknown_category_is_refused(bfcl_wheel: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = harness_cli(
        "import", "bfcl", "--source", str(bfcl_wheel), "--category", "multi_turn_nope", "--out", str(out)
    )
    assert result.returncode == 2
    assert "unknown category 'multi_turn_nope'" in result.stderr
    assert not out.exists()


@pytest.fixture(scope="module")
def unpacked(bfcl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(bfcl_wheel) as archive:
        archive.extractall(root)
    return root


def _copy(unpacked: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(unpacked, copy)
    return copy


def test_an_unpacked_folder_imports_like_the_wheel(unpacked: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = harness_cli("import", "bfcl", "--source", str(unpacked), "--category", "base", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert len(load_library(out).scenarios) == 200


def test_a_missing_category_writes_nothing(unpacked: Path, tmp_path: Path) -> None:
    copy = _copy(unpacked, tmp_path)
    (copy / "bfcl_eval/data/BFCL_v4_multi_turn_long_context.json").unlink()
    out = tmp_path / "out"
    result = harness_cli("import", "bfcl", "--source", str(copy), "--category", "all", "--out", str(out))
    assert result.returncode == 2
    assert "category multi_turn_long_context is missing" in result.stderr
    assert not out.exists()


def test_a_class_that_fails_to_load_in_the_sandbox_writes_nothing(unpacked: Path, tmp_path: Path) -> None:
    copy = _copy(unpacked, tmp_path)
    module = copy / "bfcl_eval/eval_checker/multi_turn_eval/func_source_code/ticket_api.py"
    module.write_text(module.read_text() + "\nBROKEN = 1 // 0\n")
    out = tmp_path / "out"
    result = harness_cli("import", "bfcl", "--source", str(copy), "--category", "base", "--out", str(out))
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if "does not load in the sandbox" in line]
    assert lines and all("ZeroDivisionError" in line or "ticketapi" in line for line in lines)
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_a_ground_truth_call_that_raises_writes_nothing(unpacked: Path, tmp_path: Path) -> None:
    copy = _copy(unpacked, tmp_path)
    answers = copy / "bfcl_eval/data/possible_answer/BFCL_v4_multi_turn_base.json"
    rows = [orjson.loads(line) for line in answers.read_text().splitlines() if line.strip()]
    rows[0]["ground_truth"][0][0] = "cd(folder='document', depth=2)"
    answers.write_bytes(b"\n".join(orjson.dumps(row) for row in rows) + b"\n")
    out = tmp_path / "out"
    result = harness_cli("import", "bfcl", "--source", str(copy), "--category", "base", "--out", str(out))
    assert result.returncode == 1
    assert "multi_turn_base_0: turn 0: ground-truth call cd fails: Error during execution:" in " ".join(
        result.stderr.split()
    )
    assert not out.exists()


def test_a_non_empty_out_folder_is_refused(bfcl_wheel: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = harness_cli("import", "bfcl", "--source", str(bfcl_wheel), "--category", "base", "--out", str(out))
    assert result.returncode == 2
    assert "not empty" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_records_cross_the_hub_projection_unchanged(bfcl_library: Path) -> None:
    library = load_library(bfcl_library)
    scenarios = [s for s in library.scenarios if s.id in ("multi_turn_miss_func_0", "multi_turn_long_context_0")]
    table = records_to_table(scenarios, "scenario")
    assert rows_to_records(table.to_pylist(), "scenario") == scenarios
    environments = [library.environments["bfcl-gorillafilesystem"]]
    table = records_to_table(environments, "environment")
    assert rows_to_records(table.to_pylist(), "environment") == environments


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ("2024-01-05", "%Y-%m-%d"),
        ("2024-1-5", "%Y-%m-%d"),
        ("2024-02-30", "%Y-%m-%d"),
        ("24-01-05", "%Y-%m-%d"),
        ("2024-01-05x", "%Y-%m-%d"),
        ("2024-13-01", "%Y-%m-%d"),
        ("2024-01-05 10:20:30", "%Y-%m-%d %H:%M:%S"),
        ("2024-01-05  1:2:3", "%Y-%m-%d %H:%M:%S"),
        ("2024-01-05 24:00:00", "%Y-%m-%d %H:%M:%S"),
        # v3's TradingBot.update_market_status parses "%I:%M %p" (12-hour clock and AM/PM).
        ("10:30 AM", "%I:%M %p"),
        ("12:05 am", "%I:%M %p"),
        ("12:00 PM", "%I:%M %p"),
        ("8:00 pm", "%I:%M %p"),
        ("08:00PM", "%I:%M %p"),
        ("13:00 PM", "%I:%M %p"),
        ("10:30", "%I:%M %p"),
        ("10:30 XM", "%I:%M %p"),
    ],
)
def test_the_strptime_stand_in_matches_cpython(text: str, fmt: str) -> None:
    # The sandbox refuses the lazy `import _strptime` of datetime.strptime; BFCL's code gets this transcription.
    namespace: dict = {"re": re}
    exec(STRPTIME_SOURCE, namespace)  # our own generated helper, not untrusted code

    def outcome(parse) -> str:
        try:
            return repr(parse(text, fmt))
        except ValueError as exc:
            return f"ValueError: {exc}"

    ours = outcome(lambda t, f: namespace["_bfcl_strptime"](datetime.datetime, t, f))
    assert ours == outcome(datetime.datetime.strptime)


def test_the_release_license_is_recorded_and_kept_when_the_library_is_published(bfcl_library: Path) -> None:
    from harness.hub.sources import read_library

    library = load_library(bfcl_library)
    assert {e.provenance.details["source_license"] for e in library.environments.values()} == {"apache-2.0"}
    assert read_library(bfcl_library).license == "apache-2.0", "the card of a published import names it"
