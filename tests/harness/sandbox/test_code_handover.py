"""An environment's code, compiled once in the harness and handed to the zygotes, runs in each session as code the
session compiled itself would: the same flags, the same errors, and the same behaviour when it cannot be handed."""

from __future__ import annotations

import asyncio

import pytest

import harness.sandbox.code_handover as code_handover
from harness.sandbox import EnvironmentLoadError, JailSpec, SandboxPool
from harness.schema import Environment, ToolCall
from harness.toolspec import derive_tools

# The return annotation names a class defined after the method: it loads only with annotations postponed, as
# environment code always was in the sandbox.
LATER = """
class Ledger:
    def __init__(self, init_config: dict):
        self.entries = []

    def add(self, amount: int) -> "Entry":
        self.entries.append(amount)
        return {"count": len(self.entries)}

    def total(self) -> Entry:
        return {"total": sum(self.entries)}


class Entry:
    pass
"""


def ledger(code: str = LATER) -> Environment:
    return Environment(id="ledger", name="Ledger", class_name="Ledger", code=code, tools=derive_tools(code, "Ledger"))


async def two_sessions(pool: SandboxPool, environment: Environment) -> list[object]:
    """Each session adds to a ledger of its own: the second starts from the state the first started from."""
    seen = []
    for amounts in ([5, 7], [11]):
        session = await pool.open_session(environment, {"entries": []})
        for amount in amounts:
            await session.call(ToolCall(id="a", name="add", arguments={"amount": amount}))
        observation, _ = await session.call(ToolCall(id="t", name="total", arguments={}))
        seen.append(observation.content)
        await session.close()
    return seen


@pytest.mark.parametrize("handed", [True, False])
async def test_handed_and_self_compiled_code_load_and_behave_alike(handed: bool, monkeypatch: pytest.MonkeyPatch):
    if not handed:
        monkeypatch.setattr(code_handover, "MAX_HANDED_BYTES", 0)  # every session then compiles or unmarshals
    async with JailSpec().pool() as pool:
        assert await two_sessions(pool, ledger()) == [{"total": 12}, {"total": 11}]


async def test_code_that_parses_but_does_not_compile_is_reported_by_its_session_as_before():
    broken = LATER + "\nreturn None\n"  # the parser takes it (the static checks pass); the compiler does not
    environment = ledger().model_copy(update={"code": broken})
    async with JailSpec().pool() as pool:
        assert pool.static_problems(broken) == []
        with pytest.raises(EnvironmentLoadError, match="SyntaxError: 'return' outside function"):
            await pool.open_session(environment, {"entries": []})
        # The pool goes on serving, and the environment that compiles still loads.
        assert await two_sessions(pool, ledger()) == [{"total": 12}, {"total": 11}]


async def test_a_session_that_comes_while_its_code_is_being_sent_waits_until_every_zygote_has_it():
    """Its fork request goes to a zygote only after the code did (a zygote reads its messages in order)."""
    release = asyncio.Event()
    received: list[str] = []

    class ZygoteThatReadsLate:
        async def preload(self, key: str, data: bytes) -> None:
            await release.wait()
            received.append(key)

    handover = code_handover.CodeHandover(lambda: [ZygoteThatReadsLate(), ZygoteThatReadsLate()])
    first = asyncio.ensure_future(handover.hand("ledger", LATER))
    await asyncio.sleep(0.01)  # the first is sending now
    second = asyncio.ensure_future(handover.hand("ledger", LATER))
    await asyncio.sleep(0.01)
    assert not second.done() and "ledger" not in handover
    release.set()
    assert await second and await first
    assert received == ["ledger", "ledger"] and "ledger" in handover
