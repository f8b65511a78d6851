"""Process isolation, the same for a harness run by root and by an ordinary user.

Each test runs a small harness program in a subprocess, once as root and once as an ordinary user (uid 65534,
through ``tests/support/unprivileged.py``), whose environment code attacks other processes: it has the kernel deliver a
fatal signal to the harness through its own channel (``F_SETOWN``/``F_SETSIG``/``O_ASYNC``), scans pids for live
processes and stops what it finds, passes a bit to another session through file locks, reads the host name. The
tests assert the harm did not happen: the harness exits normally, the zygote still forks, a sleeping process and
a second session are still running and not stopped, no bit arrives, the name is not the machine's. For the lock
channel, a control run without seccomp shows the bit arriving, so the test would see the harm.
"""

from __future__ import annotations

import grp
import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.schema import Environment
from harness.toolspec import derive_tools
from tests.support.unprivileged import NOBODY, open_to_ordinary_user, ordinary_environment, run_as_ordinary_user

PROCS = '''
import dataclasses
import typing

_HELD = []


def _os():
    return typing.sys.modules["os"]


def _import(name):
    import operator

    return operator.attrgetter("__imp" + "ort__")(dataclasses.builtins)(name)


def _outcome(action):
    try:
        value = action()
    except BaseException as exc:
        return type(exc).__name__ + ":" + str(getattr(exc, "errno", ""))
    return "ok:" + str(value)


def _channel():
    """The descriptor of the channel to the harness: the one socket this process holds."""
    stat = _import("stat")
    for fd in range(3, 64):
        try:
            if stat.S_ISSOCK(_os().fstat(fd).st_mode):
                return fd
        except OSError:
            continue
    return -1


class Procs:
    def __init__(self, init_config: dict):
        self.note = init_config.get("note", "")

    def signal_through_owner(self, pid: int, signal_number: int, pad: int) -> dict:
        """Make the kernel signal a process when the harness reads this process's reply.

        The reply is far larger than the socket's buffer (shrunk when it can be): the write waits for space, and
        the harness's read, which makes that space, is what has the kernel send the owner's signal.

        Args:
            pid: The process to signal.
            signal_number: The signal.
            pad: How many bytes of padding the reply carries.
        """
        fcntl = _import("fcntl")
        fd = _channel()
        outcomes = {
            "setown": _outcome(lambda: fcntl.fcntl(fd, fcntl.F_SETOWN, pid)),
            "setsig": _outcome(lambda: fcntl.fcntl(fd, 10, signal_number)),
            "async": _outcome(lambda: fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | 0o20000)),
            "small_buffer": _outcome(lambda: self._shrink_send_buffer(fd)),
        }
        return {"success": True, "data": {**outcomes, "pad": "x" * pad}}

    def _shrink_send_buffer(self, fd):
        socket = _import("socket")
        handle = socket.socket(fileno=_os().dup(fd))
        try:
            handle.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        finally:
            handle.close()

    def scan(self, limit: int) -> dict:
        """Look for live processes among pids 1..limit with three probes that each tell a live pid from a free one.

        Args:
            limit: The highest pid to try.
        """
        resource = _import("resource")
        fcntl = _import("fcntl")
        fd = _channel()
        groups = {}
        for pid in range(1, limit + 1):
            answer = " | ".join(
                (
                    _outcome(lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE)),
                    _outcome(lambda: fcntl.fcntl(fd, fcntl.F_SETOWN, pid)),
                    _outcome(lambda: sorted(_os().sched_getaffinity(pid))),
                )
            )
            pids = groups.setdefault(answer, [])
            if len(pids) < 8:
                pids.append(pid)
        # Which answers the scan got, each with the first pids that gave it: one answer means no pid stood out.
        return {"success": True, "data": {"groups": groups, "me": _os().getpid()}}

    def stop(self, pids: list) -> dict:
        """Stop and then kill processes by every route: kill, a pidfd, the channel's owner.

        Args:
            pids: The processes.
        """
        signal = _import("signal")
        fcntl = _import("fcntl")
        outcomes = []
        for pid in pids:
            outcomes.append(_outcome(lambda: _os().kill(pid, signal.SIGSTOP)))
            outcomes.append(_outcome(lambda: signal.pidfd_send_signal(_os().pidfd_open(pid), signal.SIGSTOP)))
            outcomes.append(_outcome(lambda: fcntl.fcntl(_channel(), fcntl.F_SETOWN, pid)))
        return {"success": True, "data": outcomes}

    def hold_lock(self, path: str) -> dict:
        """Take every kind of lock on a file this process can read, and keep it: the bit 1.

        Args:
            path: The file.
        """
        fcntl = _import("fcntl")
        struct = _import("struct")
        fd = _os().open(path, 0)
        _HELD.append(fd)
        shared = struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)
        outcomes = {
            "flock": _outcome(lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)),
            "posix": _outcome(lambda: fcntl.fcntl(fd, fcntl.F_SETLK, shared)),
            "ofd": _outcome(lambda: fcntl.fcntl(fd, 37, shared)),
        }
        return {"success": True, "data": outcomes}

    def read_lock(self, path: str) -> dict:
        """Whether another process holds a lock on a file: the bit it sent.

        Args:
            path: The file.
        """
        fcntl = _import("fcntl")
        struct = _import("struct")
        fd = _os().open(path, 0)
        exclusive = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
        flock = _outcome(lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB))
        posix = _outcome(lambda: struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, exclusive))[0])
        ofd = _outcome(lambda: struct.unpack("hhqqi", fcntl.fcntl(fd, 36, exclusive))[0])
        _os().close(fd)
        unlocked = "ok:" + str(fcntl.F_UNLCK)
        seen = flock.startswith("BlockingIOError") or posix not in (unlocked,) and posix.startswith("ok")
        seen = seen or (ofd.startswith("ok") and ofd != unlocked)
        return {"success": True, "data": {"bit": 1 if seen else 0, "flock": flock, "posix": posix, "ofd": ofd}}

    def identity(self) -> dict:
        """The uid, gid, pid and host name this process has."""
        return {
            "success": True,
            "data": {
                "uid": _os().getuid(),
                "gid": _os().getgid(),
                "pid": _os().getpid(),
                "uname": _os().uname().nodename,
                "gethostname": _outcome(lambda: _import("socket").gethostname()),
            },
        }
'''


def procs_environment() -> Environment:
    return Environment(id="procs", name="Procs", class_name="Procs", code=PROCS, tools=derive_tools(PROCS, "Procs"))


# A harness program, run as root or as the ordinary user: ``run(pool)`` is the test's body; it prints a JSON line.
PROGRAM = """
import asyncio, logging, os, signal, sys
import orjson
from harness.sandbox import JailSpec, SandboxLimits
from harness.schema import ToolCall
from tests.harness.sandbox.test_jail_processes import procs_environment

logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s")
ARGUMENT = orjson.loads(sys.argv[1])
received = []
signal.signal(signal.SIGUSR1, lambda *_: received.append("SIGUSR1"))


async def call(session, name, **arguments):
    observation, _ = await session.call(ToolCall(id=name, name=name, arguments=arguments))
    return observation.content["data"] if observation.content else {"error": observation.error}


async def open_session(pool):
    return await pool.open_session(procs_environment(), {})

{body}

async def main():
    limits = SandboxLimits(**ARGUMENT.get("limits", {}))
    async with JailSpec(limits=limits).pool() as pool:
        report = await run(pool)
        report["layers"] = {layer["name"]: layer["active"] for layer in pool.layers}
    report["received"] = received
    sys.stdout.write(orjson.dumps(report).decode() + "\\n")

asyncio.run(main())
"""

ROOT_USERS = ["root"] if os.geteuid() == 0 else []
"""The root case needs a root test process (CI runs as root); an ordinary test process runs the ordinary case."""
USERS = [*ROOT_USERS, "ordinary"]


@pytest.fixture
def home() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="jail-procs-") as folder:
        path = Path(folder)
        open_to_ordinary_user(path)
        yield path


def run_program(user: str, body: str, argument: dict[str, Any], home: Path, disable: str = "") -> dict[str, Any]:
    """Run the harness program as ``user``; its report. Fails the test when it did not exit normally."""
    argv = [sys.executable, "-c", PROGRAM.replace("{body}", body), orjson.dumps(argument).decode()]
    extra = {"HARNESS_SANDBOX_DISABLE": disable}
    if user == "root":
        finished = subprocess.run(
            argv, capture_output=True, text=True, env=ordinary_environment(home, extra), timeout=300
        )
    else:
        finished = run_as_ordinary_user(argv, home, extra_env=extra)
    assert finished.returncode == 0, f"exit {finished.returncode}: {finished.stdout}{finished.stderr[-3000:]}"
    report: dict[str, Any] = orjson.loads(finished.stdout.splitlines()[-1])
    report["stderr"] = finished.stderr
    return report


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process (S sleeping, R running, T stopped), "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


@pytest.fixture
def sleeper(request: pytest.FixtureRequest) -> Iterator[int]:
    """A sleeping process of the user the harness runs as (the test's parameter)."""
    user = request.node.callspec.params["user"]
    if user == "ordinary" and os.geteuid() == 0:
        process = subprocess.Popen(["sleep", "600"], user=NOBODY, group=NOBODY, extra_groups=[])
    else:
        process = subprocess.Popen(["sleep", "600"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


SIGNAL_THROUGH_OWNER = """
async def run(pool):
    zygote = pool._zygotes[0].zygote_pid
    session = await open_session(pool)
    outcomes = {}
    for name, pid in (("harness", os.getpid()), ("zygote", zygote)):
        if name not in ARGUMENT["targets"]:
            continue
        for number in ARGUMENT["signals"]:
            outcome = await call(session, "signal_through_owner", pid=pid, signal_number=number, pad=600_000)
            outcome["pad"] = len(outcome.get("pad", ""))
            outcomes[f"{name}-{number}"] = outcome
            # Each reply the harness reads is what would make the kernel send the signal.
            for _ in range(3):
                await call(session, "identity")
    await session.close()
    later = await open_session(pool)  # the zygote still forks
    identity = await call(later, "identity")
    await later.close()
    return {"outcomes": outcomes, "later": identity, "zygote": zygote}
"""


@pytest.mark.parametrize("user", USERS)
def test_a_child_cannot_have_the_kernel_signal_the_harness_or_the_zygote(user, home):
    argument = {"signals": [signal.SIGKILL, signal.SIGSTOP, signal.SIGUSR1], "targets": ["harness", "zygote"]}
    report = run_program(user, SIGNAL_THROUGH_OWNER, argument, home)
    assert report["later"]["pid"] == 1, report["later"]
    assert report["received"] == [], report
    for outcome in report["outcomes"].values():
        assert outcome["setown"].startswith("PermissionError"), outcome
        assert outcome["async"].startswith("PermissionError"), outcome
    assert process_state(report["zygote"]) == "", "the zygote outlived its pool"


STOP = """
async def run(pool):
    session = await open_session(pool)
    stopped = await call(session, "stop", pids=[ARGUMENT["sleeper"]])
    await session.close()
    return {"stopped": stopped}
"""


@pytest.mark.parametrize("user", USERS)
def test_the_signal_scope_alone_keeps_a_childs_signals_inside_it(user, home, sleeper):
    # seccomp and the PID namespace off: kill() is allowed and the sleeper's pid is in view, so only Landlock's
    # scope (in the same ruleset as the file rules) stands between the child and a process of the same user.
    report = run_program(user, STOP, {"sleeper": sleeper}, home, disable="seccomp,pid_namespace")
    assert report["layers"]["signal_scope"] and not report["layers"]["seccomp"], report["layers"]
    assert report["stopped"][0].startswith("PermissionError"), report["stopped"]
    assert process_state(sleeper) == "S"  # still sleeping, not stopped
    if user == "ordinary":
        # The control: without the scope, the same child stops the sleeper (same uid, pid in view).
        control = run_program(user, STOP, {"sleeper": sleeper}, home, disable="seccomp,pid_namespace,signal_scope")
        assert not control["layers"]["signal_scope"], control["layers"]
        assert control["stopped"][0].startswith("ok"), control["stopped"]
        assert process_state(sleeper) == "T"
        os.kill(sleeper, signal.SIGCONT)


SCAN = """
async def run(pool):
    neighbour = await open_session(pool)
    before = await call(neighbour, "identity")
    scanner = await open_session(pool)
    neighbour_pid = neighbour._child.pid
    targets = [ARGUMENT["sleeper"], os.getpid(), pool._zygotes[0].zygote_pid, neighbour_pid, 1]
    found = await call(scanner, "scan", limit=ARGUMENT["limit"])
    stopped = await call(scanner, "stop", pids=targets)
    after = await call(neighbour, "identity")
    await scanner.close()
    await neighbour.close()
    return {"found": found, "stopped": stopped, "before": before, "after": after, "targets": targets}
"""


@pytest.mark.parametrize("user", USERS)
def test_a_pid_scan_finds_nothing_and_stops_nothing(user, home, sleeper):
    limit = max(sleeper + 64, 512)
    report = run_program(user, SCAN, {"sleeper": sleeper, "limit": limit}, home)
    groups = report["found"]["groups"]
    assert report["found"]["me"] == 1
    # Every pid gives the same answers: a live process (the sleeper, the harness) cannot be told from a free pid.
    assert len(groups) == 1, groups
    assert "ok:" not in next(iter(groups)), groups
    # The sleeping process of the same user and the neighbouring session are still running, not stopped.
    assert process_state(sleeper) in {"S", "R"}, process_state(sleeper)
    assert report["after"] == report["before"], report
    assert not any(outcome.startswith("ok") for outcome in report["stopped"]), report["stopped"]


LOCKS = """
async def run(pool):
    sender = await open_session(pool)
    receiver = await open_session(pool)
    quiet = await call(receiver, "read_lock", path=ARGUMENT["path"])
    held = await call(sender, "hold_lock", path=ARGUMENT["path"])
    bit = await call(receiver, "read_lock", path=ARGUMENT["path"])
    await sender.close()
    await receiver.close()
    return {"quiet": quiet, "held": held, "bit": bit}
"""


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("disable", ["", "seccomp"])
def test_two_sessions_cannot_pass_a_bit_through_file_locks(user, disable, home):
    report = run_program(user, LOCKS, {"path": os.__file__}, home, disable)
    assert report["quiet"]["bit"] == 0, report
    if disable:
        # The control: without seccomp the lock carries the bit, so the full jail's 0 below means something.
        assert report["bit"]["bit"] == 1, report
        return
    assert report["bit"]["bit"] == 0, report
    assert all(outcome.startswith("PermissionError") for outcome in report["held"].values()), report["held"]


IDENTITIES = """
async def run(pool):
    sessions = [await open_session(pool) for _ in range(3)]
    identities = [await call(session, "identity") for session in sessions]
    for session in sessions:
        await session.close()
    return {"identities": identities}
"""


@pytest.mark.parametrize("user", USERS)
def test_a_child_reads_a_neutral_host_name(user, home):
    report = run_program(user, IDENTITIES, {}, home)
    for identity in report["identities"]:
        assert identity["uname"] == "sandbox", identity
        assert socket.gethostname() not in identity["uname"]
        assert identity["gethostname"] == "ok:sandbox", identity
    assert report["layers"]["uts_namespace"], report["layers"]


TWO_POOLS = """
async def run(pool):
    async with JailSpec().pool() as other:
        sessions = [await open_session(p) for p in (pool, other, pool, other, pool, other)]
        identities = [await call(session, "identity") for session in sessions]
        for session in sessions:
            await session.close()
    return {"identities": identities}
"""


@pytest.mark.parametrize("user", ROOT_USERS)
def test_children_of_two_zygotes_have_distinct_uids_that_no_account_holds(user, home):
    first = run_program(user, TWO_POOLS, {}, home)
    identities = first["identities"]
    uids = [identity["uid"] for identity in identities]
    assert len(set(uids)) == len(uids), uids
    for identity in identities:
        assert identity["uid"] != 0 and identity["uid"] != NOBODY
        with pytest.raises(KeyError):
            pwd.getpwuid(identity["uid"])
        with pytest.raises(KeyError):
            grp.getgrgid(identity["gid"])


STOPPED_ZYGOTE = """
async def run(pool):
    held = await open_session(pool)
    assert (await call(held, "identity"))["pid"] == 1
    zygote = pool._zygotes[0].zygote_pid
    os.kill(zygote, signal.SIGSTOP)
    try:
        fresh = await open_session(pool)
        outcome = "replaced"
    except Exception as exc:
        fresh, outcome = None, f"failed: {exc}"
    replacement = pool._zygotes[0].zygote_pid
    after = await call(fresh, "identity") if fresh else None
    held_after = await call(held, "identity")
    return {"zygote": zygote, "replacement": replacement, "outcome": outcome, "after": after,
            "held_after": held_after}
"""


@pytest.mark.parametrize("user", USERS)
def test_a_stopped_zygote_is_replaced_instead_of_hanging_the_pool(user, home):
    report = run_program(user, STOPPED_ZYGOTE, {"limits": {"zygote_timeout_s": 2.0}}, home)
    assert report["outcome"] == "replaced", report
    assert report["replacement"] != report["zygote"]
    assert report["after"]["pid"] == 1
    # The session the stopped zygote held lost its process with it, and was restored on the replacement.
    assert report["held_after"]["pid"] == 1, report
    assert f"the sandbox zygote (pid {report['zygote']}) was stopped (SIGSTOP)" in report["stderr"], report["stderr"]
    assert process_state(report["zygote"]) == "", "the stopped zygote was not killed"


DOCTOR_PHRASES = ("other processes of your user", "invisible", "this machine's name", "signals")


def run_doctor(user: str, home: Path, disable: str, *, json_output: bool) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "harness.cli", "doctor", *(["--json"] if json_output else [])]
    extra = {"HARNESS_SANDBOX_DISABLE": disable}
    if user == "root":
        return subprocess.run(argv, capture_output=True, text=True, env=ordinary_environment(home, extra), timeout=300)
    return run_as_ordinary_user(argv, home, extra_env=extra)


@pytest.mark.parametrize("user", USERS)
def test_doctor_states_each_process_guarantee(user, home):
    table = run_doctor(user, home, "", json_output=False)
    assert table.returncode == 0, table.stdout + table.stderr
    assert "pid_namespace" in table.stdout and "signal_scope" in table.stdout and "uts_namespace" in table.stdout
    finished = run_doctor(user, home, "", json_output=True)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    layers = {layer["name"]: layer for layer in orjson.loads(finished.stdout)["layers"]}
    for name in ("pid_namespace", "uts_namespace", "signal_scope", "seccomp", "unprivileged_user"):
        assert layers[name]["active"], layers[name]
    assert "other processes of your user" in layers["pid_namespace"]["guarantee"]
    assert "invisible" in layers["pid_namespace"]["guarantee"]
    assert "signal" in layers["signal_scope"]["guarantee"]
    if user == "root":
        assert "no account" in layers["unprivileged_user"]["guarantee"]


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("layer", ["pid_namespace", "signal_scope", "uts_namespace"])
def test_doctor_reports_a_disabled_process_layer_missing(user, layer, home):
    finished = run_doctor(user, home, layer, json_output=True)
    assert finished.returncode == 1, finished.stdout + finished.stderr
    layers = {entry["name"]: entry for entry in orjson.loads(finished.stdout)["layers"]}
    assert not layers[layer]["active"] and "disabled by HARNESS_SANDBOX_DISABLE" in layers[layer]["detail"]
    assert all(entry["active"] for name, entry in layers.items() if name != layer), layers
