"""A load that runs out of time among others is tried once more alone; one that runs out of time alone is not
tried alone again (see harness.sandbox.load_gate)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from harness.sandbox import EnvironmentLoadError, JailSpec, SandboxLimits
from harness.sandbox.load_gate import LoadGate
from harness.schema import Environment, ToolCall
from harness.toolspec import derive_tools

NEVER_LOADS = '''
class NeverLoads:
    def __init__(self, init_config: dict):
        while True:
            pass

    def ping(self) -> dict:
        """Answer."""
        return {"success": True}
'''

LOADS = '''
class Loads:
    def __init__(self, init_config: dict):
        self.count = init_config.get("count", 0)

    def ping(self) -> dict:
        """Answer."""
        return {"success": True, "data": self.count}
'''


def environment(code: str, name: str) -> Environment:
    return Environment(id=name.lower(), name=name, class_name=name, code=code, tools=derive_tools(code, name))


async def test_a_load_alone_starts_after_the_loads_in_flight_and_holds_back_new_ones() -> None:
    gate = LoadGate()
    events: list[str] = []
    first_in = asyncio.Event()
    release_first = asyncio.Event()

    async def among(name: str, entered: asyncio.Event | None = None, release: asyncio.Event | None = None) -> None:
        async with gate.load():
            events.append(f"{name} in")
            if entered is not None:
                entered.set()
            if release is not None:
                await release.wait()
            events.append(f"{name} out")

    async def alone() -> None:
        async with gate.alone():
            events.append("alone in")
            await asyncio.sleep(0)
            events.append("alone out")

    first = asyncio.create_task(among("first", first_in, release_first))
    await first_in.wait()
    lone = asyncio.create_task(alone())
    await asyncio.sleep(0.01)  # the alone load is now waiting for the first to end
    late = asyncio.create_task(among("late"))
    await asyncio.sleep(0.01)
    assert events == ["first in"]  # neither the alone load nor a new one started while the first ran
    release_first.set()
    await asyncio.gather(first, lone, late)
    assert events == ["first in", "first out", "alone in", "alone out", "late in", "late out"]


async def test_a_load_that_runs_out_of_time_is_tried_alone_once_per_environment(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = SandboxLimits(call_timeout_s=0.5, kill_grace_s=0.2)
    never, loads = environment(NEVER_LOADS, "NeverLoads"), environment(LOADS, "Loads")
    caplog.set_level(logging.INFO, logger="harness.sandbox.pool")
    async with JailSpec(workers=1, limits=limits).pool() as pool:
        with pytest.raises(EnvironmentLoadError) as first:
            await pool.open_session(never, {})
        assert first.value.timed_out
        tried_alone = [r for r in caplog.records if "trying it alone" in r.getMessage()]
        assert [r.getMessage().split(":")[0] for r in tried_alone] == ["environment neverloads"]
        with pytest.raises(EnvironmentLoadError) as second:
            await pool.open_session(never, {})
        assert second.value.timed_out
        assert len([r for r in caplog.records if "trying it alone" in r.getMessage()]) == 1
        # The gate is open again: another environment loads and answers.
        session = await pool.open_session(loads, {"count": 3})
        try:
            observation, _ = await session.call(ToolCall(id="c1", name="ping", arguments={}))
        finally:
            await session.close()
    assert observation.content == {"success": True, "data": 3}
