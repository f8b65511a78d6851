"""Publishing to and loading from the Hub test server with the real huggingface_hub and datasets clients."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import typer
from huggingface_hub import HfApi
from huggingface_hub.errors import RepositoryNotFoundError
from typer.testing import CliRunner

from harness.cli.publish import register
from harness.hub import (
    PublishError,
    build_leaderboard,
    build_library,
    build_sft,
    build_trajectories,
    load_hub_records,
    load_library_from_hub,
    rows_to_records,
    upload_built,
)
from harness.hub.projection import PROJECTIONS
from harness.library import load_library
from leaderboards.aggregate import LeaderboardRow
from tests.support import conftest_hub
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

# Fixtures shared by the Hub tests.
hub_server = conftest_hub.hub_server
hub = conftest_hub.hub
repo_id = conftest_hub.repo_id


def hub_rows(repo: str, config: str, revision: str | None = None) -> list[dict]:
    return hf_datasets.load_dataset(repo, config, split="train", revision=revision).to_list()


def library(n_envs: int = 2, n_scenarios: int = 5):
    environments = [make_environment(i) for i in range(n_envs)]
    scenarios = [make_scenario(i, f"order_desk_{i % n_envs}") for i in range(n_scenarios)]
    return environments, scenarios


def test_environments_and_scenarios_round_trip_through_the_hub(hub, repo_id, tmp_path):
    environments, scenarios = library()
    result = upload_built(build_library(environments, scenarios, tmp_path / "build", repo_id))
    assert result.committed
    assert rows_to_records(hub_rows(repo_id, "environments"), "environment") == environments
    assert rows_to_records(hub_rows(repo_id, "scenarios"), "scenario") == scenarios
    # The default config is the environments.
    assert len(hf_datasets.load_dataset(repo_id, split="train")) == len(environments)

    loaded_envs, loaded_scenarios, ref = load_library_from_hub(repo_id)
    assert (loaded_envs, loaded_scenarios) == (environments, scenarios)
    assert ref.source == repo_id and ref.revision == result.commit_sha

    lib = load_library(f"{repo_id}@{result.commit_sha}")
    assert list(lib.environments.values()) == environments and lib.scenarios == scenarios
    assert lib.source.revision == result.commit_sha

    # A pinned commit is read from the local cache without asking the Hub again.
    hub.reset_log()
    assert load_library_from_hub(f"{repo_id}@{result.commit_sha}")[1] == scenarios
    assert sum(hub.endpoint_counts().values()) == 0


def test_scenarios_kind_publishes_only_the_scenarios_config(hub, repo_id, tmp_path):
    environments, scenarios = library()
    upload_built(build_library(environments, scenarios, tmp_path / "b", repo_id, kind="scenarios"))
    assert rows_to_records(hub_rows(repo_id, "scenarios"), "scenario") == scenarios
    streamed = list(hf_datasets.load_dataset(repo_id, "scenarios", split="train", streaming=True))
    assert rows_to_records(streamed, "scenario") == scenarios
    files = HfApi().list_repo_files(repo_id, repo_type="dataset")
    assert not any(f.startswith("data/environments/") for f in files)


def test_trajectories_round_trip(hub, repo_id, tmp_path):
    trajectories = [make_trajectory(i) for i in range(4)]
    upload_built(build_trajectories(trajectories, make_manifest(), tmp_path / "b", repo_id))
    rows = hub_rows(repo_id, "trajectories")
    assert rows_to_records(rows, "trajectory") == trajectories
    assert [row["success"] for row in rows] == [True, False, True, None]
    assert rows_to_records(hub_rows(repo_id, "manifest"), "run_manifest") == [make_manifest()]
    records = load_hub_records(repo_id)
    assert records.configs["trajectories"] == trajectories
    assert records.record_types == {"trajectories": "trajectory", "manifest": "run_manifest"}


def test_sft_round_trip_one_config_per_file(hub, repo_id, tmp_path):
    files = sft_rows()
    upload_built(build_sft(files, tmp_path / "b", repo_id))
    assert rows_to_records(hub_rows(repo_id, "chat_nonconv"), "sft_chat") == files["chat_nonconv"]
    assert rows_to_records(hub_rows(repo_id, "sharegpt"), "sft_sharegpt") == files["sharegpt"]
    assert load_hub_records(repo_id).configs == files


def test_sft_chat_config_is_conversational_for_trl(hub, repo_id, tmp_path):
    """TRL's SFTTrainer takes the chat config as it loads: a `messages` list of structs plus `tools` JSON."""
    from trl.data_utils import is_conversational, is_conversational_from_value

    upload_built(build_sft(sft_rows(), tmp_path / "b", repo_id))
    dataset = hf_datasets.load_dataset(repo_id, "chat_nonconv", split="train")
    assert dataset.features["messages"].feature["role"] == hf_datasets.Value("string")
    example = dataset[0]
    assert is_conversational(example)
    assert example["messages"][2]["tool_calls"][0]["function"]["name"] == "cancel_order"
    assert json.loads(example["tools"])[0]["function"]["name"] == "cancel_order"
    sharegpt = hf_datasets.load_dataset(repo_id, "sharegpt", split="train")[0]
    assert is_conversational_from_value(sharegpt)
    entry = json.loads(Path(HfApi().hf_hub_download(repo_id, "dataset_info.json", repo_type="dataset")).read_text())
    (_name, llamafactory), *_ = entry.items()
    assert llamafactory["hf_hub_url"] == repo_id and llamafactory["subset"] == "sharegpt"
    assert llamafactory["formatting"] == "sharegpt" and llamafactory["columns"]["messages"] == "conversations"


def test_every_config_loads_with_its_declared_features(hub, repo_id, tmp_path):
    environments, scenarios = library()
    upload_built(build_library(environments, scenarios, tmp_path / "lib", repo_id))
    runs = f"{repo_id}-runs"
    upload_built(build_trajectories([make_trajectory(i) for i in range(4)], make_manifest(), tmp_path / "r", runs))
    sft = f"{repo_id}-sft"
    upload_built(build_sft(sft_rows(), tmp_path / "s", sft))
    board = f"{repo_id}-board"
    upload_built(build_leaderboard(leaderboard_rows(), None, tmp_path / "l", board))
    expected = {
        (repo_id, "environments"): "environment",
        (repo_id, "scenarios"): "scenario",
        (runs, "trajectories"): "trajectory",
        (runs, "manifest"): "run_manifest",
        (sft, "chat_nonconv"): "sft_chat",
        (sft, "sharegpt"): "sft_sharegpt",
        (board, "leaderboard"): "leaderboard",
    }
    for (repo, config), record_type in expected.items():
        dataset = hf_datasets.load_dataset(repo, config, split="train")
        assert dataset.features == PROJECTIONS[record_type].features, (repo, config)
        builder = hf_datasets.load_dataset_builder(repo, config)
        assert builder.info.features == PROJECTIONS[record_type].features  # from the card's dataset_info


def test_leaderboard_round_trip_with_report_in_card(hub, repo_id, tmp_path):
    rows = leaderboard_rows()
    upload_built(build_leaderboard(rows, "# Leaderboard\n\n| model | success |\n", tmp_path / "b", repo_id))
    back = rows_to_records(hub_rows(repo_id, "leaderboard"), "leaderboard")
    assert [LeaderboardRow.model_validate(r) for r in back] == [LeaderboardRow.model_validate(r) for r in rows]
    card = Path(HfApi().hf_hub_download(repo_id, "README.md", repo_type="dataset")).read_text()
    assert "| model | success |" in card
    assert "`pass_hat_k`" in card and "pass^k (τ-bench)" in card
    assert "source_datasets:\n- envharness-tests/library" in card


def test_second_identical_publish_makes_no_commit(hub, repo_id, tmp_path):
    environments, scenarios = library()
    first = upload_built(build_library(environments, scenarios, tmp_path / "one", repo_id))
    commits = hub.commit_count(repo_id)
    hub.reset_log()
    second = upload_built(build_library(environments, scenarios, tmp_path / "two", repo_id))
    assert not second.committed
    assert second.commit_sha == first.commit_sha
    assert hub.commit_count(repo_id) == commits
    assert len(HfApi().list_repo_commits(repo_id, repo_type="dataset")) == commits
    assert hub.endpoint_counts()["commit"] == 0


def test_changed_content_commits_only_what_changed(hub, repo_id, tmp_path):
    environments, scenarios = library()
    upload_built(build_library(environments, scenarios, tmp_path / "one", repo_id))
    hub.reset_log()
    upload_built(build_library(environments, [*scenarios, make_scenario(99)], tmp_path / "two", repo_id))
    assert hub.endpoint_counts()["lfs_upload"] == 1  # the scenarios shard; the environments shard is unchanged
    assert len(hub_rows(repo_id, "scenarios")) == len(scenarios) + 1


@pytest.mark.parametrize(("endpoint", "status"), [("commit", 500), ("lfs_upload", 507)])
def test_interrupted_publish_keeps_the_folder_and_a_rerun_completes(hub, repo_id, tmp_path, endpoint, status):
    environments, scenarios = library()
    built = build_library(environments, scenarios, tmp_path / "build", repo_id)
    HfApi().create_repo(repo_id, repo_type="dataset")
    commits_before = hub.commit_count(repo_id)
    hub.faults.fail(endpoint, times=1, status=status)
    with pytest.raises(PublishError) as caught:
        upload_built(built)
    message = str(caught.value)
    assert "upload 3 files" in message and str(built.folder) in message and str(status) in message
    assert caught.value.folder == built.folder and (built.folder / "README.md").exists()
    assert hub.commit_count(repo_id) == commits_before

    result = upload_built(built)
    assert result.committed
    assert hub.commit_count(repo_id) == commits_before + 1
    assert rows_to_records(hub_rows(repo_id, "scenarios"), "scenario") == scenarios


def test_pinned_revision_loads_after_a_newer_push(hub, repo_id, tmp_path):
    environments, scenarios = library(n_scenarios=3)
    old = upload_built(build_library(environments, scenarios, tmp_path / "v1", repo_id))
    newer_scenarios = [*scenarios, make_scenario(50), make_scenario(51)]
    new = upload_built(build_library(environments, newer_scenarios, tmp_path / "v2", repo_id))
    assert new.commit_sha != old.commit_sha

    assert rows_to_records(hub_rows(repo_id, "scenarios", revision=old.commit_sha), "scenario") == scenarios
    assert rows_to_records(hub_rows(repo_id, "scenarios"), "scenario") == newer_scenarios
    _, pinned, ref = load_library_from_hub(f"{repo_id}@{old.commit_sha}")
    assert pinned == scenarios and ref.revision == old.commit_sha
    _, latest, ref = load_library_from_hub(repo_id)
    assert latest == newer_scenarios and ref.revision == new.commit_sha


def test_publish_to_a_branch_creates_it_and_leaves_main_alone(hub, repo_id, tmp_path):
    environments, scenarios = library()
    main = upload_built(build_library(environments, scenarios, tmp_path / "main", repo_id))
    branch = upload_built(
        build_library(environments, scenarios[:2], tmp_path / "dev", repo_id), revision="dev", message="Try dev"
    )
    refs = HfApi().list_repo_refs(repo_id, repo_type="dataset")
    heads = {ref.name: ref.target_commit for ref in refs.branches}
    assert heads == {"main": main.commit_sha, "dev": branch.commit_sha}
    assert HfApi().list_repo_commits(repo_id, repo_type="dataset", revision="dev")[0].title == "Try dev"
    assert rows_to_records(hub_rows(repo_id, "scenarios", revision="dev"), "scenario") == scenarios[:2]
    _, on_dev, ref = load_library_from_hub(f"{repo_id}@dev")
    assert on_dev == scenarios[:2] and ref.revision == branch.commit_sha


def test_private_repo_needs_the_token(hub, repo_id, tmp_path):
    environments, scenarios = library()
    upload_built(build_library(environments, scenarios, tmp_path / "b", repo_id), private=True)
    assert HfApi().dataset_info(repo_id).private is True
    with pytest.raises(RepositoryNotFoundError):
        HfApi(token=False).dataset_info(repo_id)


def test_token_comes_from_hf_token_and_never_reaches_logs_or_card(hub, repo_id, tmp_path, caplog):
    environments, scenarios = library()
    built = build_library(environments, scenarios, tmp_path / "b", repo_id)
    hub.reset_log()
    loggers = [logging.getLogger(name) for name in ("", "harness", "huggingface_hub", "datasets", "httpx")]
    levels = [lg.level for lg in loggers]
    handler = caplog.handler
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
        lg.addHandler(handler)
    try:
        upload_built(built)
        hub.faults.fail("commit", status=500)
        with pytest.raises(PublishError) as caught:
            upload_built(build_library(environments, scenarios[:1], tmp_path / "c", repo_id))
        load_library_from_hub(repo_id)
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
            lg.removeHandler(handler)
    assert hub.authorizations[TEST_TOKEN] > 0  # the client sent HF_TOKEN...
    assert caplog.records, "nothing was logged"
    assert TEST_TOKEN not in caplog.text  # ...but no log line carries it
    assert TEST_TOKEN not in str(caught.value)
    assert TEST_TOKEN.encode() not in all_file_bytes(built.folder)
    card = Path(HfApi().hf_hub_download(repo_id, "README.md", repo_type="dataset")).read_text()
    assert TEST_TOKEN not in card


def test_cli_publish_builds_uploads_and_is_idempotent(hub, repo_id, tmp_path):
    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:
        """harness"""

    runner = CliRunner()
    run = write_run_folder(tmp_path / "run", [make_trajectory(i) for i in range(3)], make_manifest())
    out = tmp_path / "built"
    built = runner.invoke(app, ["publish", "trajectories", str(run), "--repo", repo_id, "--out", str(out)])
    assert built.exit_code == 0, built.output
    assert (out / "data" / "trajectories" / "train-00000-of-00001.parquet").exists()
    with pytest.raises(RepositoryNotFoundError):
        HfApi().dataset_info(repo_id)  # --out builds without uploading

    first = runner.invoke(app, ["publish", "trajectories", str(run), "--repo", repo_id, "-m", "First run"])
    assert first.exit_code == 0, first.output
    assert "Published" in first.output
    commits = hub.commit_count(repo_id)
    again = runner.invoke(app, ["publish", "trajectories", str(run), "--repo", repo_id])
    assert again.exit_code == 0, again.output
    assert "no commit made" in again.output
    assert hub.commit_count(repo_id) == commits
    assert rows_to_records(hub_rows(repo_id, "trajectories"), "trajectory") == [make_trajectory(i) for i in range(3)]

    changed = write_run_folder(tmp_path / "run2", [make_trajectory(i) for i in range(4)], make_manifest())
    hub.faults.fail("commit", status=500)
    failed = runner.invoke(app, ["publish", "trajectories", str(changed), "--repo", repo_id, "--branch", "retry"])
    assert failed.exit_code == 1
    assert "Publish failed" in failed.output and "Re-run the same command to resume" in failed.output
    assert hub.commit_count(repo_id, revision="retry") == commits
    resumed = runner.invoke(app, ["publish", "trajectories", str(changed), "--repo", repo_id, "--branch", "retry"])
    assert resumed.exit_code == 0, resumed.output
    assert hub.commit_count(repo_id, revision="retry") == commits + 1
    assert hub.commit_count(repo_id) == commits

    bad = runner.invoke(app, ["publish", "sft", str(tmp_path / "missing"), "--repo", repo_id])
    assert bad.exit_code == 2 and "Cannot build" in bad.output


async def test_run_evaluates_a_published_library_at_a_pinned_revision(hub, repo_id, tmp_path):
    """`harness run --envs ORG/NAME@REV` end to end: publish seed environments, run on them from the Hub."""
    from agents.run_adapters import agent_factory
    from harness.results.metrics import read_results
    from harness.run import RunConfig, run

    seed = load_library()
    environments = [seed.environments["banking"]]
    scenarios = seed.scenarios_for("banking")[:3]
    result = upload_built(build_library(environments, scenarios, tmp_path / "build", repo_id))
    config = RunConfig(
        model="oracle", agent_kind="oracle", envs=f"{repo_id}@{result.commit_sha}", out=tmp_path / "run", workers=1
    )
    outcome = await run(config, agent_factory=agent_factory)
    trajectories = read_results(outcome.run_dir / "results.jsonl")
    assert len(trajectories) == 3 and all(t.reward is not None and t.reward.success for t in trajectories)
    assert outcome.manifest.dataset.source == repo_id
    assert outcome.manifest.dataset.revision == result.commit_sha
    assert outcome.manifest.dataset.fingerprint == load_library(f"{repo_id}@{result.commit_sha}").source.fingerprint
