"""A benchmark's jail environment: its pinned packages built once into the cache from PyPI, and the jail's children
importing them from there, never the harness's own copies.

τ²'s environment pins pydantic 2.10.6 (upstream's lock file) while the harness runs a newer pydantic: a jailed tool
reports the version it imported, a rejected argument's error text names 2.10, and the harness's own pydantic
folder cannot be read from the jail (while the environment's own files can, which shows the read works)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pydantic
import pytest

from harness.benchmarks.tau2.benchmark import JAIL_ENVIRONMENT
from harness.records.library import Library, LibraryError
from harness.sandbox.jail_environment import (
    JailEnvironment,
    JailEnvironmentUnavailable,
    cache_root,
    ensure_built,
)
from harness.schema import Environment, Provenance, ToolCall
from harness.toolspec import derive_tools
from tests.support.cli_process import harness
from tests.support.unprivileged import open_to_ordinary_user, run_as_ordinary_user

PROBE = '''
import dataclasses

import pydantic


class Flight(pydantic.BaseModel):
    number: str
    seats: int


class Probe:
    def __init__(self, init_config: dict):
        self.count = 0

    def version(self) -> dict:
        """The pydantic this code imported."""
        return {"success": True, "data": pydantic.VERSION}

    def book(self, seats: str) -> dict:
        """Validate a flight with a seat count, as a τ² tool validates its arguments.

        Args:
            seats: The number of seats.
        """
        return {"success": True, "data": Flight(number="HAT001", seats=seats).model_dump()}

    def read(self, path: str) -> dict:
        """Read a file by its path (the lint is not the boundary).

        Args:
            path: The file.
        """
        try:
            with dataclasses.builtins.open(path, "rb") as handle:
                return {"success": True, "data": handle.read(64).decode(errors="replace")}
        except BaseException as exc:
            return {"success": False, "error": repr(exc)}
'''

HARNESS_PYDANTIC_FILE = os.path.realpath(os.path.join(os.path.dirname(pydantic.__file__), "version.py"))


def probe_environment() -> Environment:
    """A τ² library's environment as it was imported before τ² declared its jail environment: only its provenance
    says where it came from."""
    return Environment(
        id="tau2-probe",
        name="Probe",
        class_name="Probe",
        code=PROBE,
        tools=derive_tools(PROBE, "Probe"),
        provenance=Provenance(source="tau2"),
    )


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"call_{name}", name=name, arguments=dict(arguments))


async def test_a_jailed_tau2_tool_runs_on_upstreams_pinned_pydantic_and_never_sees_the_harnesss() -> None:
    assert pydantic.VERSION != "2.10.6"  # the harness's own copy differs, so the test tells the two apart
    environment = probe_environment()
    library = Library.of([environment], [], source="old-tau2-library")
    jail = library.jail()
    assert jail.environment == JAIL_ENVIRONMENT  # supplied by the registry from the records' provenance
    built = ensure_built(JAIL_ENVIRONMENT)
    own_file = built.site / "pydantic" / "version.py"
    async with jail.pool() as pool:
        session = await pool.open_session(environment, {})
        version, _ = await session.call(call("version"))
        rejected, _ = await session.call(call("book", seats="many"))
        theirs, _ = await session.call(call("read", path=HARNESS_PYDANTIC_FILE))
        ours, _ = await session.call(call("read", path=str(own_file)))
        await session.close()
    assert version.content == {"success": True, "data": "2.10.6"}
    assert "https://errors.pydantic.dev/2.10/v/int_parsing" in (rejected.error or ""), rejected
    assert theirs.content is not None and theirs.content["success"] is False, theirs
    assert "Error" in theirs.content["error"], theirs
    assert ours.content is not None and ours.content["success"] is True, ours


def test_the_environment_is_built_once_verified_and_reused(tmp_path: Path) -> None:
    built = ensure_built(JAIL_ENVIRONMENT)
    record = json.loads((built.root / "ready.json").read_text())
    assert record["installed"]["pydantic"] == "2.10.6" and record["installed"]["pydantic-core"] == "2.27.2"
    assert record["reference"].startswith("pdm.lock")
    assert built.root.parent == cache_root() and built.root.name == JAIL_ENVIRONMENT.key
    again = ensure_built(JAIL_ENVIRONMENT)
    assert again.build_seconds is None and again.root == built.root
    # Only the pinned packages and their dependencies: none of the harness's other packages.
    assert {path.name.split("-")[0] for path in built.site.glob("*.dist-info")} == {
        "annotated_types",
        "pydantic",
        "pydantic_core",
        "typing_extensions",
    }


OFFLINE_PIP = {
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_FIND_LINKS": "",
    "PIP_RETRIES": "0",
    "PIP_TIMEOUT": "2",
}


def offline(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setenv("ENVHARNESS_CACHE", str(cache))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")


def test_offline_and_not_cached_is_one_line_and_leaves_nothing_half_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    offline(monkeypatch, tmp_path)
    with pytest.raises(JailEnvironmentUnavailable) as caught:
        ensure_built(JAIL_ENVIRONMENT)
    message = str(caught.value)
    assert "\n" not in message
    assert "could not be installed from PyPI" in message and "pydantic==2.10.6" in message, message
    assert sorted(path.name for path in (tmp_path / "jail").iterdir()) == [f"{JAIL_ENVIRONMENT.key}.lock"]


def test_a_pin_that_does_not_import_is_not_taken_for_a_ready_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ENVHARNESS_CACHE", str(tmp_path))
    wrong = JailEnvironment(
        name="wrong",
        requirements=("annotated-types==0.7.0",),
        modules=frozenset({"no_such_module"}),
        reference="a test",
    )
    with pytest.raises(JailEnvironmentUnavailable, match="does not import"):
        ensure_built(wrong)
    assert not (tmp_path / "jail" / wrong.key).exists()


def test_a_run_that_cannot_build_its_environment_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    library = tmp_path / "lib"
    (library / "environments").mkdir(parents=True)
    (library / "scenarios").mkdir()
    environment = probe_environment()
    (library / "environments" / "tau2-probe.py").write_text(environment.code)
    meta = environment.model_dump(mode="json", exclude={"code"})
    (library / "environments" / "tau2-probe.json").write_text(json.dumps(meta))
    check = {
        "id": "c1",
        "description": "Counted.",
        "source": "def check(initial_state, final_state):\n    return True\n",
    }
    scenario = {"id": "probe-1", "environment_id": "tau2-probe", "initial_state": {}, "task": "Go.", "checks": [check]}
    (library / "scenarios" / "tau2-probe.jsonl").write_text(json.dumps(scenario) + "\n")
    env = {
        "ENVHARNESS_CACHE": str(tmp_path / "cache"),
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_FIND_LINKS": "",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
    }
    # --rules harness: the library is a hand-made τ² one without upstream's prompts, which --rules tau2 refuses first.
    command = ["run", "--envs", str(library), "--agent", "oracle", "--rules", "harness", "--out", str(tmp_path / "run")]
    finished = harness(command, env)
    assert finished.code == 1, finished.stderr
    (line,) = finished.stderr_lines
    assert "jail environment of tau2" in line and "could not be installed from PyPI" in line, line
    assert "Traceback" not in finished.stderr


def test_doctor_lists_the_jail_environments() -> None:
    ensure_built(JAIL_ENVIRONMENT)
    finished = harness(["doctor", "--json"])
    report = json.loads(finished.stdout)
    (row,) = [row for row in report["jail_environments"] if row["benchmark"] == "tau2"]
    assert row["built"] is True and row["requirements"] == list(JAIL_ENVIRONMENT.requirements)
    assert row["installed"]["pydantic"] == "2.10.6"


UNPRIVILEGED = """
import asyncio, json, sys
from harness.benchmarks.tau2.benchmark import JAIL_ENVIRONMENT
from harness.sandbox import JailSpec
from harness.schema import ToolCall
from tests.harness.sandbox.test_jail_environment import HARNESS_PYDANTIC_FILE, probe_environment

async def attempt():
    async with JailSpec(environment=JAIL_ENVIRONMENT).pool() as pool:
        session = await pool.open_session(probe_environment(), {})
        version, _ = await session.call(ToolCall(id="v", name="version", arguments={}))
        read, _ = await session.call(ToolCall(id="r", name="read", arguments={"path": sys.argv[1]}))
        await session.close()
        return {"layers": pool.layers, "version": version.content, "read": read.content}

sys.stdout.write(json.dumps({"uid": __import__("os").getuid(), **asyncio.run(attempt())}) + "\\n")
"""


def test_an_unprivileged_harness_runs_the_same_environment(tmp_path: Path) -> None:
    """An ordinary user's harness, offline, reads the environment from its own cache (a copy of the built one,
    as from another machine)."""
    built = ensure_built(JAIL_ENVIRONMENT)
    home = tmp_path / "home"
    cache = home / "cache"
    shutil.copytree(built.root, cache / "jail" / built.root.name)
    open_to_ordinary_user(home)
    finished = run_as_ordinary_user(
        [sys.executable, "-c", UNPRIVILEGED, HARNESS_PYDANTIC_FILE],
        home=home,
        extra_env={"ENVHARNESS_CACHE": str(cache), **OFFLINE_PIP},
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    report = json.loads(finished.stdout.splitlines()[-1])
    assert report["uid"] != 0
    assert report["version"] == {"success": True, "data": "2.10.6"}
    assert report["read"]["success"] is False, report["read"]
    layers = {layer["name"]: layer["active"] for layer in report["layers"]}
    assert layers["landlock"] and layers["mount_namespace"], report["layers"]


def test_a_cache_folder_that_cannot_be_written_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ENVHARNESS_CACHE", str(blocker / "cache"))
    with pytest.raises(JailEnvironmentUnavailable) as caught:
        ensure_built(JAIL_ENVIRONMENT)
    assert "\n" not in str(caught.value) and "cannot be written" in str(caught.value), caught.value
    assert blocker.read_text() == "not a folder"


def test_a_library_of_two_benchmarks_with_different_environments_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = JailEnvironment(name="other", requirements=("mpmath==1.3.0",), modules=frozenset({"mpmath"}), reference="t")
    monkeypatch.setattr("harness.records.library.jail_environments", lambda: {"tau2": JAIL_ENVIRONMENT, "other": other})
    theirs = probe_environment().model_copy(update={"id": "other-probe", "provenance": Provenance(source="other")})
    library = Library.of([probe_environment(), theirs], [], source="mixed")
    with pytest.raises(LibraryError) as caught:
        library.jail()
    assert "\n" not in str(caught.value) and "other, tau2" in str(caught.value), caught.value
    # One benchmark's scenarios alone get that benchmark's environment.
    assert Library.of([theirs], [], source="one").jail().environment == other
