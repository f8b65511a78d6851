"""Inputs from outside (Hub datasets, their cards, library folders, wheels) cannot escape or exhaust the harness.

Every test drives a public command (the CLI in a subprocess, or the gym API) and asserts that the harm did not
happen: no work was done without every jail layer, another dataset's rows and a canary file appear nowhere, a bomb
was refused by name without being read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.hub import build_library, upload_built
from harness.library import load_library, write_seed_layout
from harness.sandbox import JailSpec, WeakSandbox
from tests.support import conftest_hub
from tests.support.conftest_hub import make_environment, make_scenario
from tests.support.jail_library import CANARY, REPO
from tests.support.unprivileged import (
    as_ordinary_user,
    open_to_ordinary_user,
    ordinary_environment,
    run_as_ordinary_user,
)

hub_server = conftest_hub.hub_server
hub = conftest_hub.hub
repo_id = conftest_hub.repo_id

WEAK = {"HARNESS_SANDBOX_DISABLE": "landlock"}


def harness(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real CLI in a fresh process (the Hub test server's endpoint and token come with the environment)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000", **(env or {})}
    command = [sys.executable, "-m", "harness.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=timeout, check=False)


USERS = ["as-this-user", "as-an-ordinary-user"]
"""Who runs the command: the test's own user (root in CI) or an ordinary one (uid 65534 when the test is root)."""


def harness_as(
    user: str, workspace: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real CLI run by ``user``; an ordinary user's run gets ``workspace`` to write in and as its home."""
    if user == "as-this-user":
        return harness(*args, env=env)
    open_to_ordinary_user(workspace)
    return run_as_ordinary_user([sys.executable, "-m", "harness.cli", *args], home=workspace, extra_env=env)


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def one_line_refusal(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# --------------------------------------------------------------------------- Hub code demands every layer


def publish_library(repo: str, tmp_path: Path) -> None:
    environments = [make_environment(0)]
    upload_built(build_library(environments, [make_scenario(0), make_scenario(1)], tmp_path / "built", repo))


@pytest.mark.parametrize(
    "command",
    [
        ["synth", "scenarios", "--model", "no-such-model"],
        ["sft", "--teacher", "oracle", "--agent", "oracle", "--mode", "nonconv"],
        ["run", "--agent", "oracle", "--model", "oracle", "--mode", "nonconv"],
    ],
    ids=["synth scenarios", "sft", "run"],
)
def test_hub_code_is_refused_without_every_layer_before_any_work(hub, repo_id, tmp_path, command):
    publish_library(repo_id, tmp_path)
    out = tmp_path / "out"
    refused = harness(*command, "--envs", repo_id, "--out", str(out), env=WEAK)
    one_line_refusal(refused, "refusing to run code that is not from a local folder", "--allow-weak-sandbox")
    assert not out.exists()  # no work: not even the output folder

    allowed = harness(*command, "--envs", repo_id, "--out", str(out), "--allow-weak-sandbox", env=WEAK)
    assert "refusing to run code that is not from a local folder" not in allowed.stderr
    assert out.exists()  # the work started


def test_a_hub_library_in_the_gym_needs_every_layer_or_the_keyword(hub, repo_id, tmp_path, monkeypatch):
    import asyncio

    from harness.gym import ToolEnv

    publish_library(repo_id, tmp_path)
    library = load_library(repo_id)
    assert library.from_hub
    scenario = library.scenarios[0]
    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", "landlock")

    async def episode(allow: bool) -> list[dict]:
        async with JailSpec().pool() as pool:
            env = ToolEnv(library, pool=pool, allow_weak_sandbox=allow, include_invalid=True)
            try:
                messages, _ = await env.reset(scenario)
            finally:
                await env.close()
            return messages

    with pytest.raises(WeakSandbox, match="refusing to run code that is not from a local folder"):
        asyncio.run(episode(allow=False))
    assert asyncio.run(episode(allow=True))  # the keyword lets the episode start


# --------------------------------------------------------------------------- card data_files stay inside


def other_dataset(root: Path) -> Path:
    """A second dataset beside the library, whose rows must never be read through the library's card."""
    folder = root / "other"
    folder.mkdir(parents=True)
    table = pa.table({"id": ["leak"], "class_name": ["Leak"], "code": [f"# {CANARY}"], "name": [CANARY]})
    pq.write_table(table, folder / "rows.parquet")
    return folder


def library_folder(root: Path) -> Path:
    built = build_library([make_environment(0)], [make_scenario(0)], root / "library", "acme/library")
    return Path(built.folder)


def with_environments_pattern(card: str, pattern: str) -> str:
    """The card with its environments config reading ``pattern`` instead of its own data file."""
    declared = next(line for line in card.splitlines() if "data/environments/" in line)
    return card.replace(declared, "    - " + pattern)


def set_environments_pattern(folder: Path, pattern: str) -> None:
    card = folder / "README.md"
    card.write_text(with_environments_pattern(card.read_text(), pattern))


@pytest.mark.parametrize("pattern", ["../other/*.parquet", "'{root}/other/*.parquet'"])
def test_a_card_pattern_that_climbs_out_of_its_folder_is_refused(tmp_path, pattern):
    other_dataset(tmp_path)
    folder = library_folder(tmp_path)
    set_environments_pattern(folder, pattern.format(root=tmp_path))
    result = harness("validate", str(folder), "--json")
    one_line_refusal(result, "README.md", "other/*.parquet", "leaves the dataset folder")
    assert CANARY not in result.stdout + result.stderr


def test_a_data_file_that_links_out_of_its_folder_is_refused(tmp_path):
    other = other_dataset(tmp_path)
    folder = library_folder(tmp_path)
    linked = folder / "data" / "environments" / "linked.parquet"
    linked.symlink_to(other / "rows.parquet")
    set_environments_pattern(folder, "data/environments/*.parquet")
    run_dir = tmp_path / "run"
    result = harness("run", "--envs", str(folder), "--agent", "oracle", "--model", "oracle", "--out", str(run_dir))
    one_line_refusal(result, "linked.parquet", "symlink")
    assert CANARY not in result.stdout + result.stderr
    assert not run_dir.exists()


def test_a_hub_card_pattern_that_climbs_into_another_cached_dataset_is_refused(hub, repo_id, tmp_path):
    from huggingface_hub import HfApi, snapshot_download

    other = f"{repo_id}-other"
    api = HfApi()
    api.create_repo(other, repo_type="dataset")
    other_dataset(tmp_path / "o")
    api.upload_file(
        path_or_fileobj=str(tmp_path / "o" / "other" / "rows.parquet"),
        path_in_repo="rows.parquet",
        repo_id=other,
        repo_type="dataset",
    )
    assert (Path(snapshot_download(other, repo_type="dataset")) / "rows.parquet").exists()  # in the local cache
    publish_library(repo_id, tmp_path)
    cached = "../../../datasets--" + other.replace("/", "--") + "/snapshots/*/rows.parquet"
    card = Path(api.hf_hub_download(repo_id, "README.md", repo_type="dataset")).read_text()
    api.upload_file(
        path_or_fileobj=with_environments_pattern(card, cached).encode(),
        path_in_repo="README.md",
        repo_id=repo_id,
        repo_type="dataset",
    )
    result = harness("validate", repo_id, "--json")
    one_line_refusal(result, "rows.parquet", "leaves the dataset folder")
    assert CANARY not in result.stdout + result.stderr


# --------------------------------------------------------------------------- YAML with aliases


def alias_bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines)


@pytest.mark.parametrize("user", USERS)
def test_a_card_with_an_alias_bomb_is_refused_with_one_line(tmp_path, user):
    folder = library_folder(tmp_path)
    card = folder / "README.md"
    text = card.read_text()
    card.write_text(text.replace("---\n", "---\n" + alias_bomb() + "\n", 1))
    assert len(alias_bomb()) < 1024  # expands to 9**9 strings under yaml.safe_load
    result = harness_as(user, tmp_path, "validate", str(folder), "--json")
    one_line_refusal(result, "README.md", "aliases are not accepted")


# --------------------------------------------------------------------------- symlinked library files


def canary_library(tmp_path: Path) -> tuple[Path, Path]:
    """A seed-layout library whose scenario file is a symlink to a host file that holds a canary scenario."""
    seed = load_library()
    environment = seed.environments[sorted(seed.environments)[0]]
    scenario = seed.scenarios_for(environment.id)[0]
    library = tmp_path / "library"
    write_seed_layout([environment], [scenario], library)
    secret = tmp_path / "host" / "secret.jsonl"
    secret.parent.mkdir()
    secret.write_text(scenario.model_copy(update={"id": "stolen", "task": CANARY}).model_dump_json() + "\n")
    scenario_file = next((library / "scenarios").glob("*.jsonl"))
    scenario_file.unlink()
    scenario_file.symlink_to(secret)
    return library, scenario_file


@pytest.mark.parametrize("user", USERS)
def test_a_scenario_file_that_is_a_symlink_is_refused_and_leaks_nowhere(tmp_path, user):
    library, scenario_file = canary_library(tmp_path)
    run_dir = tmp_path / "run"
    built = tmp_path / "built"
    offline = {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    results = [
        harness_as(user, tmp_path, "run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir)),
        harness_as(user, tmp_path, "validate", str(library), "--json"),
        harness_as(
            user,
            tmp_path,
            "publish",
            "environments",
            str(library),
            "--repo",
            "acme/library",
            "--out",
            str(built),
            env=offline,
        ),
    ]
    for result in results:
        one_line_refusal(result, scenario_file.name, "symlink")
        assert CANARY not in result.stdout + result.stderr
    assert not run_dir.exists()  # no manifest, no results
    assert not built.exists() or CANARY.encode() not in b"".join(
        p.read_bytes() for p in built.rglob("*") if p.is_file()
    )


# --------------------------------------------------------------------------- archives


def zip_bomb(path: Path, gigabytes: int = 1) -> str:
    """A "wheel" whose data member inflates to GIGABYTES of zeros, written a megabyte at a time."""
    member = "bfcl_eval/data/BFCL_v4_multi_turn_base.json"
    megabyte = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open(member, "w", force_zip64=True) as handle:
            for _ in range(gigabytes << 10):
                handle.write(megabyte)
        archive.writestr("bfcl_eval-2026.3.23.dist-info/METADATA", "Version: 2026.3.23\n")
    return member


@pytest.mark.parametrize("user", USERS)
def test_a_zip_bomb_wheel_is_refused_by_name_without_being_read(tmp_path, user):
    wheel = tmp_path / "bfcl_eval-2026.3.23-py3-none-any.whl"
    member = zip_bomb(wheel)
    assert wheel.stat().st_size < 8 << 20
    out = tmp_path / "out"
    # The CLI runs in a child of this small driver, which reports the child's peak resident memory.
    driver = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stderr.write(done.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(done.returncode)\n"
    )
    command = [sys.executable, "-m", "harness.cli", "import", "bfcl", "--source", str(wheel), "--out", str(out)]
    argv = [sys.executable, "-c", driver, *command]
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000"}
    if user == "as-an-ordinary-user":
        open_to_ordinary_user(tmp_path)
        argv, environment = as_ordinary_user(argv), ordinary_environment(tmp_path)
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
        check=False,
    )
    one_line_refusal(result, member, "inflates", ":1")
    assert not out.exists()
    peak_kib = int(result.stdout.split()[-1])
    assert peak_kib < 512 * 1024  # far below the gigabyte the member would inflate to
