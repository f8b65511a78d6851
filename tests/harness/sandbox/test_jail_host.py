"""The host is out of reach: no command runs, no file appears, no secret leaves, no process is signalled.

Each attack runs through the Python API, with every layer and with one layer left off at a time (the others must
still stop it), and the worst of them through `harness validate` and `harness run --agent oracle`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path

import orjson
import pytest

from harness.sandbox import JailSpec
from harness.schema import ObservationKind, ToolCall
from tests.support.cli_process import harness_cli
from tests.support.jail_library import CANARY, hostile_environment, hostile_scenario, write_hostile_library

# Every layer, then a machine without each of the two strongest ones: the remaining layers must still hold.
LAYER_SETS = ["", "seccomp", "landlock"]


@pytest.fixture(params=LAYER_SETS, ids=["all-layers", "without-seccomp", "without-landlock"])
async def pool(request, monkeypatch):
    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", request.param)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    async with JailSpec().pool() as sandbox:
        yield sandbox


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"call_{name}", name=name, arguments=dict(arguments))


@pytest.fixture
def outside():
    """A folder anyone may write to, so that file permissions alone would not stop an attack."""
    folder = Path(tempfile.mkdtemp(prefix="jail-outside-", dir="/tmp"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("tool", ["shell", "spawn", "write_file", "mkfifo"])
async def test_no_command_runs_and_no_file_appears(pool, outside, tool):
    target = outside / f"made-by-{tool}"
    session = await pool.open_session(hostile_environment(), {"counter": 0})
    observation, _ = await session.call(call(tool, path=str(target)))
    await session.close()
    assert not target.exists(), observation
    # The session survives its own failed attack.
    assert observation.kind in {ObservationKind.OK, ObservationKind.TOOL_ERROR}, observation


async def test_secrets_of_the_host_stay_out_of_reach(pool, outside):
    token_file = outside / "token"
    token_file.write_text(CANARY)
    token_file.chmod(0o600)  # as tokens are kept (huggingface-cli, ~/.netrc)
    session = await pool.open_session(hostile_environment(), {"counter": 0, "loot": []})
    outputs = []
    for tool_call in (call("steal_environment"), call("read_file", path=str(token_file))):
        observation, diff = await session.call(tool_call)
        outputs.append(observation.model_dump_json())
        outputs.append(repr(diff))
    outputs.append(repr(await session.state()))
    await session.close()
    assert not any(CANARY in text for text in outputs)


# The mount namespace would hide the file before Landlock is asked: leave it off to see Landlock on its own.
@pytest.mark.parametrize(
    "layers", ["mount_namespace", "seccomp,mount_namespace"], ids=["without-mount-namespace", "without-seccomp"]
)
async def test_landlock_hides_even_world_readable_files(monkeypatch, outside, layers):
    monkeypatch.setenv("HARNESS_SANDBOX_DISABLE", layers)
    readable = outside / "public"
    readable.write_text(CANARY)
    readable.chmod(0o644)
    async with JailSpec().pool() as sandbox:
        session = await sandbox.open_session(hostile_environment(), {"counter": 0})
        observation, _ = await session.call(call("read_file", path=str(readable)))
        await session.close()
    assert CANARY not in observation.model_dump_json()
    assert "PermissionError" in (observation.error or ""), observation


async def test_no_network_connection_reaches_the_host(pool):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    port = server.getsockname()[1]
    connections: list[bytes] = []

    def accept() -> None:
        try:
            connection, _ = server.accept()
            connections.append(connection.recv(100))
        except OSError:
            pass

    listener = threading.Thread(target=accept)
    listener.start()
    session = await pool.open_session(hostile_environment(), {"counter": 0})
    observation, _ = await session.call(call("connect", port=port))
    await session.close()
    listener.join()
    server.close()
    assert connections == []
    assert observation.kind is ObservationKind.TOOL_ERROR, observation


async def test_the_harness_and_the_zygote_cannot_be_signalled(pool):
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda number, _frame: received.append(number))
    try:
        session = await pool.open_session(hostile_environment(), {"counter": 0})
        observation, _ = await session.call(call("signal_process", pid=os.getpid(), signal_number=signal.SIGUSR1))
        await session.call(call("kill_zygote"))
        after, _ = await session.call(call("bump"))
        await session.close()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == []
    assert all("sent" not in outcome for outcome in observation.content["data"]), observation
    assert after.kind is ObservationKind.OK and after.content["data"] == 1
    assert all(zygote.alive for zygote in pool._zygotes)


async def test_privileges_cannot_be_raised(pool):
    session = await pool.open_session(hostile_environment(), {"counter": 0})
    observation, _ = await session.call(call("raise_privileges"))
    await session.close()
    outcomes = observation.content["data"]
    assert not any(outcome.endswith("done") for outcome in outcomes), outcomes
    assert "unshare: 0" not in outcomes


def test_layers_are_reported_and_verified_on_a_real_child():
    """Every layer this machine offers is active, and each one was confirmed on a probe child."""
    result = harness_cli("doctor", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"ok": true' in result.stdout
    for layer in (
        "seccomp",
        "landlock",
        "unprivileged_user",
        "no_new_privs",
        "network_namespace",
        "mount_namespace",
        "environment",
    ):
        assert f'"name": "{layer}"' in result.stdout


def test_doctor_names_a_missing_layer_and_exits_1():
    result = harness_cli("doctor", env={"HARNESS_SANDBOX_DISABLE": "landlock"})
    assert result.returncode == 1
    assert "landlock" in result.stdout and "--allow-weak-sandbox" in result.stdout


def test_attacks_through_the_public_commands_do_no_harm(tmp_path, outside):
    token_file = outside / "token"
    token_file.write_text(CANARY)
    token_file.chmod(0o600)
    actions = [
        ("shell", {"path": str(outside / "shell")}),
        ("spawn", {"path": str(outside / "spawn")}),
        ("write_file", {"path": str(outside / "file")}),
        ("mkfifo", {"path": str(outside / "fifo")}),
        ("steal_environment", {}),
        ("read_file", {"path": str(token_file)}),
        ("kill_zygote", {}),
        ("bump", {}),
        ("poison_shared_state", {}),
    ]
    forged = hostile_scenario([("forge_frames", {}), ("bump", {})], scenario_id="hostile-forge")
    library = write_hostile_library(tmp_path / "library", [hostile_scenario(actions), forged])
    secrets = {"OPENAI_API_KEY": CANARY, "HF_TOKEN": CANARY}

    validated = harness_cli("validate", str(library), "--json", env=secrets)
    run_dir = tmp_path / "run"
    ran = harness_cli(
        "run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir), env=secrets, timeout=300
    )

    assert sorted(p.name for p in outside.iterdir()) == ["token"]
    for text in (validated.stdout, validated.stderr, ran.stdout, ran.stderr):
        assert CANARY not in text
    records = {
        record["scenario_id"]: record
        for record in map(orjson.loads, (run_dir / "results.jsonl").read_bytes().splitlines())
    }
    assert CANARY not in (run_dir / "results.jsonl").read_text()
    # The oracle ran every action and was scored: the impossible check failed, the honest one passed.
    checks = {r["check_id"]: r["passed"] for r in records["hostile-1"]["check_results"]}
    assert checks == {"impossible": False, "bumped": True}, records["hostile-1"]["termination_detail"]
    # Forged frames end only their own episode, as a failure of its environment scored 0, recorded with the reason;
    # validate marks the scenario invalid.
    assert records["hostile-forge"]["termination"] == "environment_error"
    assert records["hostile-forge"]["failure"]["at_fault"] == "environment"
    assert records["hostile-forge"]["reward"]["state_reward"] == 0.0
    assert "protocol violation" in records["hostile-forge"]["termination_detail"]
    report = {r["id"]: r for r in orjson.loads(validated.stdout)["records"]}
    assert not report["hostile-forge"]["ok"]
