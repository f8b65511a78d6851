"""Filesystem reads without Landlock: the private mount namespace shows a child only the readable roots.

Each test turns Landlock off (as on a kernel without it) and plants a world-readable secret, so that neither
Landlock nor file permissions stand in the way: only the mount namespace does. With the layer off as well, the
same read succeeds, which shows the layer is what stops it. Honest code still runs and imports what it may.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import mpmath  # noqa: F401  (imported, as the zygote imports it, so readable_roots(jail_modules()) here lists its folder too)
import orjson
import pytest

from harness.registry import jail_modules
from harness.sandbox import JailSpec, WeakSandbox
from harness.sandbox.confine import LAYERS, readable_roots
from harness.schema import Environment, Observation, ObservationKind, ToolCall
from harness.toolspec import derive_tools
from tests.support.cli_process import harness_cli
from tests.support.jail_library import CANARY, hostile_environment, hostile_scenario, write_hostile_library
from tests.support.unprivileged import run_as_ordinary_user

WITHOUT_LANDLOCK = "landlock"
WITHOUT_READ_LIMITS = "landlock,mount_namespace"

HONEST = '''
import mpmath


class Codec:
    def __init__(self, init_config: dict):
        self.text = init_config.get("text", "")

    def encode(self, codec: str) -> dict:
        """Encode the text with a codec the interpreter loads from the standard library on first use.

        Args:
            codec: The codec's name.
        """
        return {"success": True, "data": self.text.encode(codec).hex()}

    def root(self, value: int) -> dict:
        """The square root of a number to 30 digits.

        Args:
            value: The number.
        """
        mpmath.mp.dps = 30
        return {"success": True, "data": str(mpmath.sqrt(value))}
'''

ESCAPE = """
import typing


class Escape:
    def __init__(self, init_config: dict):
        self.root = init_config.get("root", "/")

    def escape(self, pivot_root: int) -> dict:
        \"\"\"Try every way out of the new root: unmount a folder, mount over one, chroot, pivot_root, unshare.

        Args:
            pivot_root: The system call's number on this machine.
        \"\"\"
        ctypes = typing.sys.modules["ctypes"]
        libc = ctypes.CDLL(None, use_errno=True)
        root = self.root.encode()
        return {
            "success": True,
            "data": {
                "umount": libc.umount2(root, 2),
                "mount": libc.mount(b"tmpfs", root, b"tmpfs", 0, None),
                "remount": libc.mount(None, root, None, 0x1000 | 0x20, None),
                "chroot": libc.chroot(root),
                "pivot_root": libc.syscall(pivot_root, b".", b"."),
                "unshare": libc.unshare(0x20000),
                "top": sorted(typing.sys.modules["os"].listdir("/")),
            },
        }
"""


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"call_{name}", name=name, arguments=dict(arguments))


@pytest.fixture
def secret() -> Iterator[Path]:
    """A secret anyone may read, in a folder anyone may enter: file permissions alone would not stop a read."""
    folder = Path(tempfile.mkdtemp(prefix="jail-mount-", dir="/tmp"))
    folder.chmod(0o755)
    path = folder / "token"
    path.write_text(CANARY)
    path.chmod(0o644)
    yield path
    shutil.rmtree(folder, ignore_errors=True)


def site_packages_file() -> str:
    """A file of site-packages outside the optional modules' folders: not a readable root."""
    location = os.path.realpath(orjson.__file__)
    assert not any(location.startswith(root + os.sep) for root in readable_roots(jail_modules())), readable_roots(
        jail_modules()
    )
    return location


async def read_attempts(secret: Path) -> tuple[dict[str, Observation], list[str]]:
    """Read the secret, /etc/hostname and a site-packages file from a hostile session; each observation by path,
    and every output of the session as text."""
    targets = [str(secret), "/etc/hostname", site_packages_file()]
    observations: dict[str, Observation] = {}
    outputs: list[str] = []
    async with JailSpec().pool() as pool:
        session = await pool.open_session(hostile_environment(), {"counter": 0, "loot": []})
        for target in targets:
            observation, diff = await session.call(call("read_file", path=target))
            observations[target] = observation
            outputs += [observation.model_dump_json(), repr(diff)]
        outputs.append(repr(await session.state()))
        await session.close()
    return observations, outputs


async def test_without_landlock_the_mount_namespace_hides_every_file_outside_the_roots(monkeypatch, secret):
    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", WITHOUT_LANDLOCK)
    observations, outputs = await read_attempts(secret)
    assert not any(CANARY in text for text in outputs)
    for target, observation in observations.items():
        assert observation.kind is ObservationKind.TOOL_ERROR, (target, observation)
        assert "FileNotFoundError" in (observation.error or ""), (target, observation)


async def test_with_the_mount_namespace_off_too_the_same_read_succeeds(monkeypatch, secret):
    """The control: nothing else in the jail stops this read, so the mount namespace is what did."""
    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", WITHOUT_READ_LIMITS)
    observations, _ = await read_attempts(secret)
    leaked = observations[str(secret)]
    assert leaked.kind is ObservationKind.OK and leaked.content["data"] == CANARY, leaked


@pytest.mark.parametrize("disabled", ["", WITHOUT_LANDLOCK], ids=["all-layers", "without-landlock"])
async def test_honest_code_still_imports_what_it_may(monkeypatch, disabled):
    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", disabled)
    environment = Environment(
        id="codec", name="Codec", class_name="Codec", code=HONEST, tools=derive_tools(HONEST, "Codec")
    )
    async with JailSpec().pool() as pool:
        assert {layer["name"] for layer in pool.missing_layers} == ({"landlock"} if disabled else set())
        session = await pool.open_session(environment, {"text": "Crème brûlée"})
        encoded, _ = await session.call(call("encode", codec="mac_roman"))
        root, _ = await session.call(call("root", value=2))
        await session.close()
    assert encoded.kind is ObservationKind.OK, encoded
    assert encoded.content["data"] == "Crème brûlée".encode("mac_roman").hex()
    assert root.kind is ObservationKind.OK, root
    assert root.content["data"] == "1.41421356237309504880168872421"


@pytest.mark.parametrize("disabled", [WITHOUT_LANDLOCK, "landlock,seccomp"], ids=["seccomp", "without-seccomp"])
async def test_a_child_cannot_leave_the_new_root(monkeypatch, secret, disabled):
    """seccomp refuses mount, chroot, pivot_root and unshare; without it, the child has no capability to use."""
    from harness.sandbox import JailSpec, namespaces

    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", disabled)
    roots = readable_roots(jail_modules())
    environment = Environment(
        id="escape", name="Escape", class_name="Escape", code=ESCAPE, tools=derive_tools(ESCAPE, "Escape")
    )
    number = namespaces.PIVOT_ROOT_SYSCALL[os.uname().machine]
    async with JailSpec().pool() as pool:
        session = await pool.open_session(environment, {"root": roots[0]})
        tried, _ = await session.call(call("escape", pivot_root=number))
        await session.close()
        hostile = await pool.open_session(hostile_environment(), {"counter": 0, "loot": []})
        read, _ = await hostile.call(call("read_file", path=str(secret)))
        await hostile.close()
    outcomes = tried.content["data"]
    assert {name: outcomes[name] for name in outcomes if name != "top"} == dict.fromkeys(
        ["umount", "mount", "remount", "chroot", "pivot_root", "unshare"], -1
    ), outcomes
    # The top of the child's root holds the first folder of each readable root, nothing of the host besides.
    assert outcomes["top"] == sorted({root.split("/")[1] for root in roots}), outcomes
    assert CANARY not in read.model_dump_json() and read.kind is ObservationKind.TOOL_ERROR, read


def test_doctor_reports_the_layer_and_its_absence():
    present = harness_cli("doctor", "--json", env={"HARNESS_SANDBOX_DISABLE": WITHOUT_LANDLOCK})
    layers = {layer["name"]: layer for layer in orjson.loads(present.stdout)["layers"]}
    assert list(layers) == list(LAYERS)
    assert layers["mount_namespace"]["active"], layers["mount_namespace"]
    assert all(root in layers["mount_namespace"]["detail"] for root in readable_roots(jail_modules()))
    weak = harness_cli("doctor", env={"HARNESS_SANDBOX_DISABLE": WITHOUT_READ_LIMITS})
    assert weak.returncode == 1, weak.stdout + weak.stderr
    assert "mount_namespace" in weak.stdout and "--allow-weak-sandbox" in weak.stdout


async def test_hub_code_needs_the_mount_namespace(monkeypatch):
    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", "mount_namespace")
    with pytest.raises(WeakSandbox, match="mount_namespace"):
        async with JailSpec(full_confinement=True).pool():
            pass


def test_a_run_without_landlock_keeps_the_secret(tmp_path, secret):
    actions = [("read_file", {"path": str(secret)}), ("read_file", {"path": "/etc/hostname"}), ("bump", {})]
    library = write_hostile_library(tmp_path / "library", [hostile_scenario(actions)])
    run_dir = tmp_path / "run"
    ran = harness_cli(
        "run",
        "--envs",
        str(library),
        "--agent",
        "oracle",
        "--out",
        str(run_dir),
        env={"HARNESS_SANDBOX_DISABLE": WITHOUT_LANDLOCK},
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    results = (run_dir / "results.jsonl").read_text()
    assert CANARY not in results + ran.stdout + ran.stderr
    (record,) = map(orjson.loads, results.splitlines())
    errors = [step["observation"]["error"] for step in record["steps"][:2]]
    assert all("FileNotFoundError" in (error or "") for error in errors), errors
    assert {r["check_id"]: r["passed"] for r in record["check_results"]} == {"impossible": False, "bumped": True}


# A root harness is tested as an unprivileged one by a process that drops to uid 65534 (tests/support/unprivileged.py).
UNPRIVILEGED = """
import asyncio, os, sys
import orjson
from harness.sandbox import JailSpec
from harness.schema import ToolCall
from tests.support.jail_library import hostile_environment

async def attempt(disabled):
    os.environ["HARNESS_SANDBOX_DISABLE"] = disabled
    async with JailSpec().pool() as pool:
        session = await pool.open_session(hostile_environment(), {"counter": 0, "loot": []})
        read, _ = await session.call(ToolCall(id="r", name="read_file", arguments={"path": sys.argv[1]}))
        raised, _ = await session.call(ToolCall(id="p", name="raise_privileges", arguments={}))
        await session.close()
        return {"layers": pool.layers, "read": read.model_dump(mode="json"), "raised": raised.model_dump(mode="json")}

# seccomp is off too: the mount namespace and the dropped capabilities must hold on their own.
report = {"uid": os.getuid()}
report["with"] = asyncio.run(attempt("landlock,seccomp"))
report["without"] = asyncio.run(attempt("landlock,seccomp,mount_namespace"))
sys.stdout.write(orjson.dumps(report).decode() + "\\n")
"""


def test_an_unprivileged_harness_builds_the_same_root(secret):
    finished = run_as_ordinary_user([sys.executable, "-c", UNPRIVILEGED, str(secret)], home=secret.parent)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    report = orjson.loads(finished.stdout.splitlines()[-1])
    assert report["uid"] != 0
    confined, control = report["with"], report["without"]
    layers = {layer["name"]: layer for layer in confined["layers"]}
    assert layers["mount_namespace"]["active"], layers["mount_namespace"]
    assert "already runs unprivileged" in layers["unprivileged_user"]["detail"]
    assert CANARY not in orjson.dumps(confined).decode()
    assert "FileNotFoundError" in (confined["read"]["error"] or ""), confined["read"]
    # The capabilities of the zygote's user namespace are gone: even without seccomp, no namespace is made.
    assert "unshare: -1" in confined["raised"]["content"]["data"], confined["raised"]
    assert control["read"]["content"]["data"] == CANARY, control["read"]
