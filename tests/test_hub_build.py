"""The Parquet projection, the card and built folders, without a server."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from harness.hub import (
    build_from_source,
    build_leaderboard,
    build_library,
    build_sft,
    build_trajectories,
    generic_rows_to_table,
    is_hub_folder,
    load_records_folder,
    read_records_folder,
    records_to_rows,
    rows_to_records,
    table_rows_to_generic,
)
from harness.hub.sources import SourceError
from harness.library import load_library
from tests.conftest_hub import (
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
from tests.hub_env import TEST_TOKEN


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


def test_environment_rows_keep_code_as_plain_text_and_nested_values_as_json():
    environment = make_environment(0)
    row = records_to_rows([environment], "environment")[0]
    assert row["code"] == environment.code
    assert row["rules"] == environment.rules
    assert row["tools_json"].startswith('[{"type":"function"')
    assert "tools" not in row


def test_generic_rows_round_trip_with_typed_scalars():
    rows = leaderboard_rows()
    table, _layout = generic_rows_to_table(rows)
    assert str(table.schema.field("rank").type) == "int64"
    assert str(table.schema.field("success_rate").type) == "double"
    assert "per_domain_json" in table.column_names
    assert table_rows_to_generic(table.to_pylist()) == rows


def test_generic_keys_ending_in_json_stay_unambiguous():
    rows = [{"payload_json": "not json text", "n": 1}]
    table, _ = generic_rows_to_table(rows)
    assert table.column_names == ["payload_json_json", "n"]
    assert table_rows_to_generic(table.to_pylist()) == rows


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
    assert meta["license"] == "apache-2.0"
    assert meta["size_categories"] == ["n<1K"]
    assert "reinforcement-learning" in meta["task_categories"]
    assert "tool-use" in meta["tags"]
    assert 'load_dataset("acme/library", "environments"' in card
    assert "harness run --envs acme/library" in card
    for column in ("`code`", "`tools_json`", "`initial_state_json`", "`checks_json`"):
        assert column in card
    assert "EnvScaler: Scaling Tool-Interactive Environments for LLM Agent via Programmatic Synthesis" in card
    assert "EnvFactory: Scaling Tool-Use Agents via Executable Environments Synthesis and Robust RL" in card
    assert "## Provenance" in card and "3 environments" in card
    assert built.files == [
        "README.md",
        "data/environments/train-00000-of-00001.parquet",
        "data/scenarios/train-00000-of-00001.parquet",
    ]
    schema = pq.read_schema(tmp_path / "out" / "data" / "environments" / "train-00000-of-00001.parquet")
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


def test_trajectories_sft_and_leaderboard_folders_read_back(tmp_path):
    trajectories = [make_trajectory(i) for i in range(4)]
    build_trajectories(trajectories, make_manifest(), tmp_path / "runs", "acme/runs")
    records = read_records_folder(tmp_path / "runs")
    assert records.configs["trajectories"] == trajectories
    assert records.configs["manifest"] == [make_manifest()]

    build_sft(sft_rows(), tmp_path / "sft", "acme/sft")
    assert read_records_folder(tmp_path / "sft").configs == sft_rows()

    build_leaderboard(leaderboard_rows(), "# Results\n\nqwen3-8b leads.", tmp_path / "board", "acme/board")
    assert read_records_folder(tmp_path / "board").configs["leaderboard"] == leaderboard_rows()
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
