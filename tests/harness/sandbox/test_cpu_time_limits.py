"""A call's limit is CPU time: a process the machine does not run (here: stopped) is not timed out by the wall
clock, a tool that computes past its CPU time is, and the wall-clock backstop's expiry is the sandbox's failure
(an infrastructure error, re-run), never the tool's."""

from __future__ import annotations

import asyncio
import os
import signal

from harness.sandbox import JailSpec, SandboxLimits
from harness.schema import Environment, ObservationKind, ToolCall
from harness.toolspec import derive_tools

COUNTER = '''
class Counter:
    def __init__(self, init_config: dict):
        self.count = init_config.get("count", 0)

    def add(self, amount: int) -> dict:
        """Add to the count."""
        self.count += amount
        return {"count": self.count}

    def spin(self) -> dict:
        """Compute forever."""
        while True:
            self.count += 1
'''
ENVIRONMENT = Environment(
    id="counter", name="Counter", class_name="Counter", code=COUNTER, tools=derive_tools(COUNTER, "Counter")
)


async def test_a_call_the_machine_does_not_run_is_not_timed_out_by_the_wall_clock() -> None:
    limits = SandboxLimits(call_timeout_s=0.5, kill_grace_s=0.2)  # the old wall-clock budget: 0.7 s
    async with JailSpec(workers=1, limits=limits).pool() as pool:
        session = await pool.open_session(ENVIRONMENT, {"count": 1})
        pid = session.process_id
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # as a loaded machine would: the process gets no CPU for a while
        try:
            call = asyncio.ensure_future(session.call(ToolCall(id="c", name="add", arguments={"amount": 2})))
            await asyncio.sleep(1.5)
            assert not call.done()
        finally:
            os.kill(pid, signal.SIGCONT)
        observation, _ = await call
        await session.close()
    assert observation.kind is ObservationKind.OK, observation
    assert observation.content == {"count": 3}


async def test_computing_past_the_cpu_limit_is_the_tools_timeout() -> None:
    async with JailSpec(workers=1, limits=SandboxLimits(call_timeout_s=0.3)).pool() as pool:
        session = await pool.open_session(ENVIRONMENT, {})
        observation, _ = await session.call(ToolCall(id="c", name="spin", arguments={}))
        await session.close()
    assert observation.kind is ObservationKind.TIMEOUT, observation
    assert observation.error == "the tool used up its CPU-time limit of 0.3 s"


async def test_the_wall_clock_backstop_is_the_sandboxs_failure_not_the_tools() -> None:
    limits = SandboxLimits(call_timeout_s=0.2, wall_clock_factor=1.0, kill_grace_s=0.3)
    async with JailSpec(workers=1, limits=limits).pool() as pool:
        session = await pool.open_session(ENVIRONMENT, {})
        pid = session.process_id
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # never continued: the backstop (0.5 s) ends it
        observation, _ = await session.call(ToolCall(id="c", name="add", arguments={"amount": 1}))
        await session.close()
    assert observation.kind is ObservationKind.SANDBOX_ERROR, observation
    assert "wall-clock backstop of 0.5 s" in (observation.error or "")
    assert not observation.process_ended
