"""A child confirms its confinement before any code of an environment or a check runs in it, and what ends it is
blamed by that confirmation: before it, the sandbox's; after it, the code's, whatever the status.

The harness's reading of a real process: each test starts a Python process holding one end of a socketpair as
its channel, which behaves as a child can (confirm or not, exit with the status of a failed confinement, close its
channel and linger, confirm twice), and ``Child`` reads it as it reads the zygote's children. The stand-in zygote
reports the process's real wait status and kills it for real. A session of a real pool shows the confirmation
arriving before its open is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator

import pytest

from harness.sandbox import JailSpec
from harness.sandbox.children import Child, ChildLost
from harness.sandbox.confirmation import CONFINED, UNCONFINED_STATUS
from harness.schema import Environment, ToolCall
from harness.toolspec import derive_tools


class ProcessZygote:
    """What ``Child`` asks of its zygote (a kill, an exit status), answered from a real process."""

    def __init__(self) -> None:
        self.alive = True
        self.lost_reason = ""
        self.killed: list[int] = []

    def kill(self, pid: int) -> None:
        self.killed.append(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    async def exit_status(self, pid: int, timeout: float) -> int | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            waited, status = os.waitpid(pid, os.WNOHANG)
            if waited == pid:
                return status
            await asyncio.sleep(0.01)
        return None


@contextlib.asynccontextmanager
async def child_running(program: str) -> AsyncIterator[tuple[Child, ProcessZygote, int]]:
    """A ``Child`` reading a real process that runs ``program`` with its channel as descriptor 3."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    os.set_inheritable(theirs.fileno(), True)  # kept even when it is descriptor 3 already
    actions = [(os.POSIX_SPAWN_DUP2, theirs.fileno(), 3)]
    if theirs.fileno() != 3:  # descriptor 3 alone holds the channel: closing it closes the channel
        actions.append((os.POSIX_SPAWN_CLOSE, theirs.fileno()))
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", program], dict(os.environ), file_actions=actions)
    theirs.close()
    zygote = ProcessZygote()
    child = Child(zygote, pid, 1 << 20)  # type: ignore[arg-type]  # the zygote's two answers, from a real process
    await child.connect(ours)
    try:
        yield child, zygote, pid
    finally:
        child.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def program(*lines: str) -> str:
    return "\n".join(["import os, time", f"CONFINED = {CONFINED!r}", *lines])


async def lost_on_request(child: Child) -> ChildLost:
    with pytest.raises(ChildLost) as lost:
        await child.request({"op": "call", "name": "finish", "args": {}}, budget=10)
    return lost.value


async def test_the_status_of_a_failed_confinement_before_the_confirmation_is_the_sandboxs() -> None:
    async with child_running(program("os.read(3, 64)", f"os._exit({UNCONFINED_STATUS})")) as (child, _, _):
        lost = await lost_on_request(child)
    assert not child.confined
    assert lost.kind == "sandbox_error"
    assert lost.reason == "the sandbox process could not confine itself and refused to run the code"


async def test_the_same_status_after_the_confirmation_is_the_codes() -> None:
    exits = program("os.write(3, CONFINED)", "os.read(3, 64)", f"os._exit({UNCONFINED_STATUS})")
    async with child_running(exits) as (child, _, _):
        lost = await lost_on_request(child)
    assert child.confined
    assert lost.kind == "tool_exception"
    assert lost.reason == f"the sandbox process exited with status {UNCONFINED_STATUS}"


async def test_any_ending_before_the_confirmation_is_the_sandboxs() -> None:
    async with child_running(program("os.read(3, 64)", "os.kill(os.getpid(), 11)")) as (child, _, _):
        lost = await lost_on_request(child)
    assert lost.kind == "sandbox_error"
    assert lost.reason == "the sandbox process crashed (SIGSEGV), before it had confirmed its confinement"


async def test_a_child_that_closes_its_channel_and_lingers_is_killed_and_blamed() -> None:
    lingers = program("os.write(3, CONFINED)", "os.read(3, 64)", "os.close(3)", "time.sleep(600)")
    async with child_running(lingers) as (child, zygote, pid):
        lost = await lost_on_request(child)
        assert zygote.killed == [pid]
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # gone: reaped after the kill, not left running
    assert lost.kind == "forbidden"
    assert lost.reason == "protocol violation: the sandbox process closed its channel and did not exit"


async def test_a_second_confirmation_is_a_protocol_violation_of_the_code() -> None:
    twice = program("os.write(3, CONFINED)", "os.read(3, 64)", "os.write(3, CONFINED)", "time.sleep(600)")
    async with child_running(twice) as (child, zygote, pid):
        lost = await lost_on_request(child)
        assert zygote.killed == [pid]
    assert lost.kind == "forbidden"
    assert lost.reason == "protocol violation: the sandbox process confirmed its confinement twice"


async def test_a_child_that_never_confirms_is_stopped_at_its_budget_and_the_sandbox_blamed() -> None:
    async with child_running(program("time.sleep(600)")) as (child, zygote, pid):
        with pytest.raises(ChildLost) as lost:
            await child.request({"op": "state"}, budget=0.5)
        assert zygote.killed == [pid]
    assert (lost.value.kind, lost.value.timed_out) == ("sandbox_error", False)
    assert "did not confirm its confinement within 0.5 s" in lost.value.reason


CODE = '''
class Counter:
    def __init__(self, init_config: dict):
        self.count = init_config.get("count", 0)

    def bump(self) -> dict:
        """Count one more."""
        self.count += 1
        return {"success": True, "data": self.count}
'''


async def test_a_real_session_and_check_process_confirm_before_their_first_answer() -> None:
    environment = Environment(
        id="counter", name="Counter", class_name="Counter", code=CODE, tools=derive_tools(CODE, "Counter")
    )
    async with JailSpec().pool() as pool:
        session = await pool.open_session(environment, {"count": 0})
        child = session._child
        assert child is not None and child.confined  # confirmed before the open's answer was read
        observation, _ = await session.call(ToolCall(id="c", name="bump", arguments={}))
        assert observation.content == {"success": True, "data": 1}
        await session.close()
        checks = await pool._spawn("checks")
        try:
            answer = await checks.request({"op": "checks", "checks": [], "timeout": 1}, budget=10)
            assert answer == {"ok": True, "results": []}
            assert checks.confined  # confirmed before the answer was read
        finally:
            checks.close()
