"""A command that runs the code of a library a run folder names (``export acebench`` replays each episode's calls)
or that it is given from the Hub (``rescore --envs ORG/NAME``) applies the trust rule of ``harness run``: with a
confinement layer missing (``HARNESS_SANDBOX_DISABLE=seccomp``), code from the Hub is refused with one line unless
``--allow-weak-sandbox``, and nothing is written; a local library still runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.hub import build_library, upload_built
from harness.library import load_library
from tests.support.cli_process import harness
from tests.support.hostile_runs import SEED, acebench_run, files_under, import_acebench, read_lines, set_manifest
from tests.support.stored_runs import mock_model_run

WEAK = {"HARNESS_SANDBOX_DISABLE": "seccomp"}


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory) -> Path:
    return mock_model_run(tmp_path_factory.mktemp("stored"), ["banking-001"], trials=1)


def refused_in_one_line(finished) -> None:
    assert finished.code == 2, finished.stdout + finished.stderr
    assert len(finished.stderr_lines) == 1, finished.stderr
    line = finished.stderr_lines[0]
    assert "seccomp" in line and "--allow-weak-sandbox" in line and "Traceback" not in finished.stderr


@pytest.fixture(scope="module")
def acebench_library(tmp_path_factory) -> Path:
    return import_acebench(tmp_path_factory.mktemp("acebench"))


def test_export_acebench_of_a_run_naming_a_hub_library(stored_run, acebench_library, hub, repo_id, tmp_path):
    library = load_library(str(acebench_library))
    upload_built(build_library(list(library.environments.values()), library.scenarios, tmp_path / "built", repo_id))
    run = acebench_run(stored_run, acebench_library, tmp_path / "run")
    set_manifest(run, dataset__source=repo_id, dataset__revision=None)

    out = tmp_path / "export"
    refused = harness(["export", "acebench", str(run), "--out", str(out)], env=WEAK)
    refused_in_one_line(refused)
    assert not files_under(out), "no episode was replayed, nothing was written"

    allowed = harness(["export", "acebench", str(run), "--out", str(out), "--allow-weak-sandbox"], env=WEAK)
    assert allowed.code == 0, allowed.stderr
    [written] = files_under(out)
    assert written.relative_to(out).as_posix() == "result_all/result_en/mock-agent/data_agent_multi_step_result.json"
    assert len(written.read_text().splitlines()) == len(library.scenarios) == 3


def test_export_acebench_of_a_local_library_runs_with_a_warning(stored_run, acebench_library, tmp_path):
    run = acebench_run(stored_run, acebench_library, tmp_path / "run")
    out = tmp_path / "export"
    finished = harness(["export", "acebench", str(run), "--out", str(out)], env=WEAK)
    assert finished.code == 0, finished.stderr
    assert "seccomp" in finished.stderr and len(files_under(out)) == 1


def test_rescore_with_a_hub_library(stored_run, hub, repo_id, tmp_path):
    seed = load_library(str(SEED))
    upload_built(
        build_library([seed.environments["banking"]], seed.scenarios_for("banking"), tmp_path / "built", repo_id)
    )
    out = tmp_path / "rescored"
    command = ["rescore", str(stored_run), "--envs", repo_id, "--out", str(out)]
    refused = harness(command, env=WEAK)
    refused_in_one_line(refused)
    assert not out.exists(), "nothing was replayed, nothing was written"

    allowed = harness([*command, "--allow-weak-sandbox"], env=WEAK)
    assert allowed.code == 0, allowed.stderr
    assert "Re-scored 2 episodes" in allowed.stdout and len(read_lines(out)) == 2
