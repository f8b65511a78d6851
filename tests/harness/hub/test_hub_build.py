"""The Parquet projection, the card and built folders, without a server."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from harness.hub import (
    build_from_source,
    build_leaderboard,
    build_library,
    build_sft,
    build_trajectories,
    is_hub_folder,
    load_records_folder,
    read_records_folder,
    records_to_rows,
    rows_to_records,
    table_rows_to_generic,
)
from harness.hub.projection import PROJECTIONS
from harness.hub.rows import RowSchemaError, records_to_table
from harness.hub.sources import SourceError
from harness.library import load_library
from harness.schema import SCHEMA_VERSION, Check, Scenario
from leaderboards.aggregate import LeaderboardRow
from tests.support.conftest_hub import (
    all_file_bytes,
    hf_datasets,
    leaderboard_rows,
    make_environment,
    make_manifest,
    make_scenario,
    make_trajectory,
    sft_rows,
    write_run_folder,
)
from tests.support.hub_env import TEST_TOKEN


def front_matter(card: str) -> dict:
    match = re.match(r"^---\n(.*?)\n---\n", card, re.DOTALL)
    assert match, "card has no YAML front matter"
    return yaml.safe_load(match.group(1))


@pytest.mark.parametrize(
    ("record_type", "records"),
    [
        ("environment", [make_environment(i) for i in range(4)]),
        ("scenario", [make_scenario(i) for i in range(6)]),
        ("trajectory", [make_trajectory(i) for i in range(4)]),
        ("run_manifest", [make_manifest()]),
    ],
)
def test_rows_round_trip_to_equal_records(record_type, records):
    rows = records_to_rows(records, record_type)
    assert rows_to_records(rows, record_type) == records


def test_environment_rows_keep_code_as_text_nested_records_typed_and_free_form_values_as_json():
    environment = make_environment(0)
    row = records_to_rows([environment], "environment")[0]
    assert row["code"] == environment.code
    assert row["rules"] == environment.rules
    assert row["state_entities"] == [
        {"name": "Order", "attributes": ["order_id", "status"], "description": "An order."}
    ]
    function = row["tools"][0]["function"]
    assert function["name"] == "get_order" and function["description"] == "Look an order up."
    assert orjson.loads(function["parameters"])["required"] == ["order_id"]  # a JSON schema is free-form
    assert orjson.loads(row["provenance"]["details"]) == {"attempts": 2, "score": 0.875}
    assert not any(name.endswith("_json") for name in row)


def test_trajectory_rows_have_typed_messages_steps_and_checks():
    row = records_to_rows([make_trajectory(0)], "trajectory")[0]
    roles = [m["role"] for m in row["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert row["messages"][2]["tool_calls"][0]["function"] == {
        "name": "cancel_order",
        "arguments": '{"order_id":"O-1"}',
    }
    assert row["messages"][3]["tool_call_id"] == "call_1"
    assert row["steps"][0]["call"]["name"] == "cancel_order"
    assert row["steps"][1]["observation"]["kind"] == "unknown_tool"
    assert row["check_results"] == [
        {"check_id": "cancelled", "passed": True, "value": None, "error": None, "passed_at_reset": False}
    ]
    assert row["usage"][0]["role"] == "agent" and row["usage"][0]["prompt_tokens"] == 120


def test_every_config_has_one_fixed_schema_whatever_the_rows():
    """Column names and types never depend on the data (v1 named a column `user` or `user_json` by its values)."""
    with_user = records_to_table([make_trajectory(1)], "trajectory").schema
    without_user = records_to_table([make_trajectory(0)], "trajectory").schema
    assert with_user == without_user == PROJECTIONS["trajectory"].schema


def test_messages_with_unusual_keys_round_trip_through_extra():
    trajectory = make_trajectory(0)
    odd = {"role": "assistant", "content": [{"type": "text", "text": "hi"}], "refusal": None, "audio": {"id": "a"}}
    changed = trajectory.model_copy(update={"messages": [*trajectory.messages, odd]})
    rows = records_to_rows([changed], "trajectory")
    assert rows[0]["messages"][-1]["content"] is None and rows[0]["messages"][-1]["extra"]
    assert rows_to_records(rows, "trajectory") == [changed]


def test_leaderboard_rows_fit_their_schema_and_read_back():
    rows = leaderboard_rows()
    table = records_to_table(rows, "leaderboard")
    assert str(table.schema.field("rank").type) == "int64"
    assert str(table.schema.field("pass_hat_k").type) == "list<item: struct<k: int64, value: double>>"
    back = rows_to_records(table.to_pylist(), "leaderboard")
    assert [LeaderboardRow.model_validate(r) for r in back] == [LeaderboardRow.model_validate(r) for r in rows]


def test_a_row_outside_the_fixed_schema_is_refused_with_its_number():
    rows = [*leaderboard_rows(), {"model": "x", "ci95": [0.1, 0.2]}]
    with pytest.raises(RowSchemaError, match=r"row 3: 'ci95' not in the fixed leaderboard schema"):
        records_to_rows(rows, "leaderboard")


def test_layout_1_folders_still_load(tmp_path):
    """Layout 1 stored nested values as JSON text in `<field>_json` columns; they still read back."""
    scenarios = [make_scenario(i) for i in range(3)]
    rows = []
    for scenario in scenarios:
        data = scenario.model_dump(mode="json")
        row = {k: v for k, v in data.items() if k in ("schema_version", "id", "environment_id", "task", "difficulty")}
        row["tags"] = data["tags"]
        for name in ("initial_state", "user_profile", "checks", "reference_actions", "gold_final_state", "provenance"):
            row[name + "_json"] = orjson.dumps(data[name]).decode()
        rows.append(row)
    folder = tmp_path / "v1"
    (folder / "data" / "scenarios").mkdir(parents=True)
    meta = {b"envharness": b'{"config": "scenarios", "record_type": "scenario", "schema_version": "1.0"}'}
    table = pa.Table.from_pylist(rows).replace_schema_metadata(meta)
    pq.write_table(table, folder / "data" / "scenarios" / "train-00000-of-00001.parquet")
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: scenarios\n  data_files:\n  - split: train\n    path: data/scenarios/*.parquet\n---\n"
    )
    assert read_records_folder(folder).configs["scenarios"] == scenarios
    sft_v1 = [{"messages_json": '[{"role": "user", "content": "hi"}]', "n": 1}]
    assert table_rows_to_generic(sft_v1) == [{"messages": [{"role": "user", "content": "hi"}], "n": 1}]


def test_library_build_writes_two_configs_and_a_documented_card(tmp_path):
    environments = [make_environment(i) for i in range(3)]
    scenarios = [make_scenario(i, f"order_desk_{i % 3}") for i in range(5)]
    built = build_library(environments, scenarios, tmp_path / "out", "acme/library")
    card = (tmp_path / "out" / "README.md").read_text()
    meta = front_matter(card)
    assert [c["config_name"] for c in meta["configs"]] == ["environments", "scenarios"]
    assert meta["configs"][0]["default"] is True
    assert meta["configs"][1]["data_files"] == [
        {"split": "train", "path": ["data/scenarios/train-00000-of-00001.parquet"]}
    ]
    assert meta["license"] == "apache-2.0" and meta["language"] == ["en"]
    assert meta["size_categories"] == ["n<1K"]
    info = {entry["config_name"]: entry for entry in meta["dataset_info"]}
    assert info["scenarios"]["splits"] == [
        {"name": "train", "num_bytes": info["scenarios"]["dataset_size"], "num_examples": 5}
    ]
    assert hf_datasets.Features._from_yaml_list(info["environments"]["features"]) == PROJECTIONS["environment"].features
    assert "reinforcement-learning" in meta["task_categories"]
    assert "tool-use" in meta["tags"]
    assert 'load_dataset("acme/library", "environments"' in card
    assert "harness run --envs acme/library" in card
    for column in ("`code`", "`tools`", "`initial_state`", "`checks`"):
        assert column in card
    assert "Example row" in card and "placeholder" not in card.lower()
    assert "EnvScaler: Scaling Tool-Interactive Environments for LLM Agent via Programmatic Synthesis" in card
    assert "EnvFactory: Scaling Tool-Use Agents via Executable Environments Synthesis and Robust RL" in card
    assert "## Provenance" in card and "3 environments" in card
    assert built.files == [
        "README.md",
        "data/environments/train-00000-of-00001.parquet",
        "data/scenarios/train-00000-of-00001.parquet",
    ]
    schema = pq.read_schema(tmp_path / "out" / "data" / "environments" / "train-00000-of-00001.parquet")
    stamp = orjson.loads(schema.metadata[b"envharness"])
    assert (
        stamp["layout_version"] == "2" and stamp["schema_version"] == environments[0].schema_version == SCHEMA_VERSION
    )
    assert str(schema.field("code").type) == "string"
    assert str(schema.field("rules").type) == "list<element: string>"


def test_building_twice_gives_identical_bytes(tmp_path):
    environments = [make_environment(i) for i in range(2)]
    scenarios = [make_scenario(i) for i in range(3)]
    build_library(environments, scenarios, tmp_path / "a", "acme/library")
    build_library(environments, scenarios, tmp_path / "b", "acme/library")
    assert all_file_bytes(tmp_path / "a") == all_file_bytes(tmp_path / "b")


def test_built_folder_loads_back_equal_with_pyarrow_and_datasets(tmp_path):
    environments = [make_environment(i) for i in range(3)]
    scenarios = [make_scenario(i) for i in range(4)]
    build_library(environments, scenarios, tmp_path / "lib", "acme/library")
    assert is_hub_folder(tmp_path / "lib")
    loaded_envs, loaded_scenarios, ref = load_records_folder(tmp_path / "lib")
    assert loaded_envs == environments
    assert loaded_scenarios == scenarios
    assert ref.source == str(tmp_path / "lib") and ref.fingerprint
    library = load_library(tmp_path / "lib")
    assert list(library.environments.values()) == environments and library.scenarios == scenarios
    # A built folder is also a dataset for `datasets`, honouring the card's configs offline.
    rows = hf_datasets.load_dataset(str(tmp_path / "lib"), "scenarios", split="train").to_list()
    assert rows_to_records(rows, "scenario") == scenarios


def _guarded_scenario(index: int) -> Scenario:
    """A scenario whose second check is a guard counted only once the first holds."""
    scenario = make_scenario(index)
    guard = Check(
        id="others_same",
        description="No other order changed.",
        source="def check(initial_state, final_state):\n    return True\n",
        gate=scenario.checks[0].id,
    )
    return scenario.model_copy(update={"checks": [*scenario.checks, guard]})


def test_a_guards_gate_round_trips_through_a_published_library(tmp_path):
    scenarios = [_guarded_scenario(i) for i in range(3)]
    build_library([make_environment(0)], scenarios, tmp_path / "lib", "acme/library")
    data = tmp_path / "lib" / "data" / "scenarios" / "train-00000-of-00001.parquet"
    assert str(pq.read_schema(data).field("checks").type.value_type.field("gate").type) == "string"
    info = {
        entry["config_name"]: entry
        for entry in front_matter((tmp_path / "lib" / "README.md").read_text())["dataset_info"]
    }
    assert (
        hf_datasets.Features._from_yaml_list(info["scenarios"]["features"])["checks"].feature["gate"].dtype == "string"
    )
    assert load_records_folder(tmp_path / "lib")[1] == scenarios
    rows = hf_datasets.load_dataset(str(tmp_path / "lib"), "scenarios", split="train").to_list()
    assert [row["checks"][1]["gate"] for row in rows] == ["cancelled"] * 3
    assert rows_to_records(rows, "scenario") == scenarios


def test_a_layout_2_dataset_published_before_gates_reads_them_from_the_descriptions(tmp_path):
    """Schema 1.0 rows have no `gate` in their checks and state it at the end of the guard's description."""
    scenarios = [_guarded_scenario(i) for i in range(2)]
    build_library([make_environment(0)], scenarios, tmp_path / "lib", "acme/library")
    data = tmp_path / "lib" / "data" / "scenarios" / "train-00000-of-00001.parquet"
    table = pq.read_table(data)
    rows = table.to_pylist()
    for row in rows:
        row["schema_version"] = "1.0"
        for check in row["checks"]:
            gate = check.pop("gate")
            if gate is not None:
                check["description"] += f" Counted only once '{gate}' holds."
    old = pa.Table.from_pylist(rows).replace_schema_metadata(table.schema.metadata)
    assert "gate" not in str(old.schema.field("checks").type)
    pq.write_table(old, data)
    loaded = load_records_folder(tmp_path / "lib")[1]
    assert loaded == scenarios
    assert [check.gate for check in loaded[0].checks] == [None, "cancelled"]


def test_trajectories_sft_and_leaderboard_folders_read_back(tmp_path):
    trajectories = [make_trajectory(i) for i in range(4)]
    build_trajectories(trajectories, make_manifest(), tmp_path / "runs", "acme/runs")
    records = read_records_folder(tmp_path / "runs")
    assert records.configs["trajectories"] == trajectories
    assert records.configs["manifest"] == [make_manifest()]

    build_sft(sft_rows(), tmp_path / "sft", "acme/sft")
    assert read_records_folder(tmp_path / "sft").configs == sft_rows()

    build_leaderboard(leaderboard_rows(), "# Results\n\nqwen3-8b leads.", tmp_path / "board", "acme/board")
    board = read_records_folder(tmp_path / "board").configs["leaderboard"]
    assert [LeaderboardRow.model_validate(r) for r in board] == [
        LeaderboardRow.model_validate(r) for r in leaderboard_rows()
    ]
    assert "qwen3-8b leads." in (tmp_path / "board" / "README.md").read_text()


def test_run_folder_source_keeps_the_last_line_of_a_retried_episode(tmp_path):
    first = make_trajectory(3)
    retried = make_trajectory(0).model_copy(update={"episode_id": first.episode_id})
    run = write_run_folder(tmp_path / "run", [first, make_trajectory(1), retried], make_manifest())
    build_from_source("trajectories", run, tmp_path / "out", "acme/runs")
    loaded = read_records_folder(tmp_path / "out").configs["trajectories"]
    assert loaded == [retried, make_trajectory(1)]


def test_sources_are_checked(tmp_path: Path):
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "bad.jsonl").write_text('{"text": "no messages"}\n')
    with pytest.raises(SourceError, match=r"bad\.jsonl:1"):
        build_from_source("sft", tmp_path / "sft", tmp_path / "out", "acme/sft")
    with pytest.raises(SourceError, match=r"no results\.jsonl"):
        build_from_source("trajectories", tmp_path, tmp_path / "out", "acme/runs")


def test_no_token_in_built_files(tmp_path):
    build_library([make_environment(0)], [make_scenario(0)], tmp_path / "lib", "acme/library")
    assert TEST_TOKEN.encode() not in all_file_bytes(tmp_path / "lib")


def test_a_library_republished_from_a_card_keeps_its_license_unless_told(tmp_path):
    build_library([make_environment(0)], [make_scenario(0)], tmp_path / "source", "acme/source", license="cc-by-4.0")
    kept = build_from_source("environments", tmp_path / "source", tmp_path / "kept", "acme/copy")
    assert kept.card.license == "cc-by-4.0"
    assert front_matter((tmp_path / "kept" / "README.md").read_text())["license"] == "cc-by-4.0"
    told = build_from_source("environments", tmp_path / "source", tmp_path / "told", "acme/copy", license="mit")
    assert told.card.license == "mit"
    from harness.library import SEED_LIBRARY

    seed = build_from_source("environments", SEED_LIBRARY, tmp_path / "seed", "acme/seed")
    assert seed.card.license == "apache-2.0"  # no card to take it from


def test_dual_control_and_judged_fields_survive_a_published_library_and_run(tmp_path):
    """A τ² telecom-like library (the user's own tools and reference calls) with a judged check, and a run with the
    user's tool calls and the judge's exchange, read back equal: no field of these records is left out."""
    from harness.schema import JudgedCheck, JudgeExchange, JudgeRecord, JudgeVerdict, UserReferenceAction

    base = make_environment(0)
    environment = base.model_copy(update={"user_tools": list(base.tools[:1])})
    scenario = make_scenario(0).model_copy(
        update={
            "user_reference_actions": [
                UserReferenceAction(name=base.tools[0].function.name, arguments={}, after_agent_actions=1)
            ],
            "judged_checks": [
                JudgedCheck(id="said_sorry", kind="nl", description="The agent apologised.", asked={"items": ["a"]})
            ],
        }
    )
    plain = make_scenario(1)
    build_library([environment], [scenario, plain], tmp_path / "lib", "acme/library")
    environments, scenarios, _ = load_records_folder(tmp_path / "lib")
    assert environments == [environment] and scenarios == [scenario, plain]
    rows = hf_datasets.load_dataset(str(tmp_path / "lib"), "scenarios", split="train").to_list()
    assert rows_to_records(rows, "scenario") == [scenario, plain]

    first = make_trajectory(1)
    judge = JudgeRecord(
        judge_model="judge-model",
        settings={"temperature": 0.0},
        exchanges=[
            JudgeExchange(
                check_id="said_sorry",
                kind="nl",
                request=[{"role": "user", "content": "Did the agent apologise?"}],
                reply='{"met": true}',
                verdicts=[JudgeVerdict(item="a", holds=True)],
            )
        ],
    )
    judged = first.model_copy(update={"user_steps": list(first.steps[:1]), "judge": judge})
    trajectories = [judged, make_trajectory(2)]
    build_trajectories(trajectories, make_manifest(), tmp_path / "runs", "acme/runs")
    assert read_records_folder(tmp_path / "runs").configs["trajectories"] == trajectories
