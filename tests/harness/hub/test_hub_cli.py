"""`harness publish` and `harness run --envs` in a subprocess against the Hub test server: card merging,
loading what `Dataset.push_to_hub` wrote, and the defects users hit (repo names, --private, build folders,
retry advice, offline builds, bad revisions)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from huggingface_hub import HfApi

from harness.hub import build_library, records_to_rows, rows_to_records, upload_built
from harness.hub.projection import PROJECTIONS
from harness.library import load_library
from tests.support import conftest_hub
from tests.support.conftest_hub import hf_datasets, make_environment, make_scenario, write_run_folder

hub_server = conftest_hub.hub_server
hub = conftest_hub.hub
repo_id = conftest_hub.repo_id

ROOT = Path(__file__).resolve().parents[3]


def harness(*args: str, tmp: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a fresh process; its temporary folders go to TMP so leftovers can be counted."""
    tmp.mkdir(parents=True, exist_ok=True)
    environment = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(tmp),
        "COLUMNS": "200",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        **(env or {}),
    }
    command = [sys.executable, "-c", "from harness.cli import main; main()", *args]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300, check=False)


def seed_library_folder(tmp_path: Path, environments: int = 1, scenarios: int = 2) -> Path:
    """A library folder (seed layout) with real seed environments, so `harness run --agent oracle` solves it."""
    from harness.library import write_seed_layout

    seed = load_library()
    envs = [seed.environments[name] for name in sorted(seed.environments)[:environments]]
    chosen = [s for env in envs for s in seed.scenarios_for(env.id)[:scenarios]]
    folder = tmp_path / "library"
    write_seed_layout(envs, chosen, folder)
    return folder


def test_publishing_scenarios_into_an_environments_repo_keeps_both_configs(hub, repo_id, tmp_path):
    library = seed_library_folder(tmp_path, environments=1, scenarios=3)
    first = harness("publish", "environments", str(library), "--repo", repo_id, tmp=tmp_path / "t1")
    assert first.returncode == 0, first.stderr
    more = seed_library_folder(tmp_path / "more", environments=1, scenarios=2)
    second = harness("publish", "scenarios", str(more), "--repo", repo_id, tmp=tmp_path / "t2")
    assert second.returncode == 0, second.stderr

    environments = hf_datasets.load_dataset(repo_id, "environments", split="train")
    assert len(environments) == 1
    assert len(hf_datasets.load_dataset(repo_id, "scenarios", split="train")) == 2
    card = Path(HfApi().hf_hub_download(repo_id, "README.md", repo_type="dataset")).read_text()
    meta = yaml.safe_load(card.split("---\n")[1])
    assert [c["config_name"] for c in meta["configs"]] == ["environments", "scenarios"]
    assert [c.get("default", False) for c in meta["configs"]] == [True, False]
    assert [i["config_name"] for i in meta["dataset_info"]] == ["environments", "scenarios"]
    assert "### environments" in card and "### scenarios" in card  # both provenance sections

    again = harness("publish", "scenarios", str(more), "--repo", repo_id, tmp=tmp_path / "t3")
    assert again.returncode == 0 and "no commit made" in again.stdout  # the merged card is stable

    run = harness(
        "run", "--agent", "oracle", "--model", "oracle", "--envs", repo_id, "--out", str(tmp_path / "run"),
        "--mode", "nonconv", "--workers", "1", tmp=tmp_path / "t4",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert len((tmp_path / "run" / "results.jsonl").read_text().splitlines()) == 2


def test_envs_reads_a_library_pushed_with_datasets_push_to_hub(hub, repo_id, tmp_path):
    """Loading follows the card's configs and data_files, not our folder layout."""
    library = load_library(seed_library_folder(tmp_path, environments=1, scenarios=2))
    environments = list(library.environments.values())
    for config, records, record_type in (
        ("envs", environments, "environment"),
        ("tasks", library.scenarios, "scenario"),
    ):
        rows = records_to_rows(records, record_type)
        dataset = hf_datasets.Dataset.from_list(rows, features=PROJECTIONS[record_type].features)
        dataset.push_to_hub(repo_id, config_name=config)
    files = HfApi().list_repo_files(repo_id, repo_type="dataset")
    assert any(f.startswith("envs/") for f in files) and not any(f.startswith("data/") for f in files)

    loaded = load_library(repo_id)
    assert list(loaded.environments.values()) == environments and loaded.scenarios == library.scenarios

    run = harness(
        "run", "--agent", "oracle", "--model", "oracle", "--envs", repo_id, "--out", str(tmp_path / "run"),
        "--mode", "nonconv", "--workers", "1", tmp=tmp_path / "t",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert len((tmp_path / "run" / "results.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("spec", ["envharness-tests/no-such-dataset", "{repo}@no-such-branch", "{repo}@" + "0" * 40])
def test_a_bad_envs_id_or_revision_is_one_line(hub, repo_id, tmp_path, spec):
    upload_built(build_library([make_environment(0)], [make_scenario(0)], tmp_path / "b", repo_id))
    result = harness("run", "--agent", "oracle", "--model", "oracle", "--envs", spec.format(repo=repo_id),
                     "--out", str(tmp_path / "run"), tmp=tmp_path / "t")  # fmt: skip
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) <= 2, result.stderr  # one message (rich may wrap it once)
    assert "Traceback" not in result.stderr and "cannot load" in result.stderr
    validated = harness("validate", spec.format(repo=repo_id), tmp=tmp_path / "v")
    assert validated.returncode == 2 and "Traceback" not in validated.stderr
    assert validated.stderr.startswith("error: cannot load")


@pytest.mark.parametrize("name", ["org/-bad", "org/a--b", "org/a..b", "org/x.git", "org/" + "n" * 116, "noslash"])
def test_repo_names_the_hub_refuses_fail_before_building(hub, tmp_path, name):
    library = seed_library_folder(tmp_path)
    result = harness("publish", "environments", str(library), "--repo", name, tmp=tmp_path / "t")
    assert result.returncode == 2
    assert "Bad --repo" in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "t").iterdir())  # nothing was built


def test_failed_publish_removes_the_build_and_advises_resume_only_when_it_helps(hub, repo_id, tmp_path):
    library = seed_library_folder(tmp_path)
    denied = harness("publish", "environments", str(library), "--repo", repo_id, tmp=tmp_path / "t1",
                     env={"HF_TOKEN": "hf_wrongToken"})  # fmt: skip
    assert denied.returncode == 1
    assert "refused the credentials" in denied.stderr and "resume" not in denied.stderr
    assert "hf_wrongToken" not in denied.stderr + denied.stdout
    assert not list((tmp_path / "t1").iterdir())

    hub.faults.fail("commit", status=503)
    flaky = harness("publish", "environments", str(library), "--repo", repo_id, tmp=tmp_path / "t2")
    assert flaky.returncode == 1 and "Re-run the same command to resume" in flaky.stderr
    assert not list((tmp_path / "t2").iterdir())

    hub.faults.fail("commit", status=503)
    kept = harness("publish", "environments", str(library), "--repo", repo_id, "--keep-build", tmp=tmp_path / "t3")
    assert kept.returncode == 1
    [folder] = list((tmp_path / "t3").iterdir())
    assert (folder / "README.md").exists() and str(folder) in kept.stderr.replace("\n", "")

    resumed = harness("publish", "environments", str(library), "--repo", repo_id, tmp=tmp_path / "t4")
    assert resumed.returncode == 0, resumed.stderr
    assert "Published" in resumed.stdout


def test_private_is_applied_to_an_existing_public_repo_and_said(hub, repo_id, tmp_path):
    library = seed_library_folder(tmp_path)
    public = harness("publish", "environments", str(library), "--repo", repo_id, tmp=tmp_path / "t1")
    assert public.returncode == 0 and HfApi().dataset_info(repo_id).private is False
    private = harness("publish", "environments", str(library), "--repo", repo_id, "--private", tmp=tmp_path / "t2")
    assert private.returncode == 0, private.stderr
    assert "made it private" in private.stdout
    assert HfApi().dataset_info(repo_id).private is True


def test_out_builds_offline_and_the_folder_loads_with_datasets(tmp_path):
    run = write_run_folder(
        tmp_path / "run", [conftest_hub.make_trajectory(i) for i in range(3)], conftest_hub.make_manifest()
    )
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    result = harness("publish", "trajectories", str(run), "--repo", "acme/runs", "--out", str(tmp_path / "built"),
                     tmp=tmp_path / "t", env=offline)  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = hf_datasets.load_dataset(str(tmp_path / "built"), "trajectories", split="train").to_list()
    assert rows_to_records(rows, "trajectory") == [conftest_hub.make_trajectory(i) for i in range(3)]
    card = (tmp_path / "built" / "README.md").read_text()
    assert "source_datasets:\n- envharness-tests/library" in card  # the run's environments, linked
