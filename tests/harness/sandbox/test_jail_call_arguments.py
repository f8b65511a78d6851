"""Arguments and states the jail's channel cannot carry are refused where they enter, never crash it."""

from __future__ import annotations

import pytest

from harness.sandbox import EnvironmentLoadError, JailSpec
from harness.schema import Environment, ObservationKind, ToolCall
from harness.toolspec import derive_tools

CODE = '''
class Echo:
    def __init__(self, init_config: dict):
        self.seen = init_config.get("seen", [])

    def echo(self, value) -> dict:
        """Echo a value."""
        self.seen.append(1)
        return {"success": True, "data": len(self.seen)}
'''


NESTED: object = 1
for _ in range(80):
    NESTED = [NESTED]


def environment() -> Environment:
    return Environment(id="echo", name="Echo", class_name="Echo", code=CODE, tools=derive_tools(CODE, "Echo"))


@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, float("inf"), NESTED],
)
async def test_arguments_the_channel_cannot_carry_are_a_tool_error_and_the_session_goes_on(value: object) -> None:
    async with JailSpec(workers=1).pool() as pool:
        session = await pool.open_session(environment(), {}, seed=0)
        try:
            refused, _ = await session.call(ToolCall(id="1", name="echo", arguments={"value": value}))
            assert refused.kind is ObservationKind.INVALID_ARGUMENTS, refused
            assert "cannot be used" in (refused.error or "")
            accepted, _ = await session.call(ToolCall(id="2", name="echo", arguments={"value": 2**63 - 1}))
            assert accepted.ok and accepted.content == {"success": True, "data": 1}, (
                accepted
            )  # the refused one never ran
        finally:
            await session.close()


async def test_a_state_the_channel_cannot_carry_is_a_load_error() -> None:
    async with JailSpec(workers=1).pool() as pool:
        with pytest.raises(EnvironmentLoadError, match="cannot be sent to its sandbox"):
            await pool.open_session(environment(), {"seen": [2**70]}, seed=0)
