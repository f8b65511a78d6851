"""Sessions, environments and the scoring never share an interpreter: nothing crosses between them.

The neighbour of a hostile session ends in exactly the state of its solo run; checks that cannot hold stay
failed whatever the code under test patched; a session that crashes, hangs or exhausts its memory takes nothing
else with it, and the observation says which of these happened.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from harness.sandbox import JailSpec, SandboxError, SandboxLimits, SandboxPool
from harness.schema import Check, ObservationKind, ToolCall
from tests.support.jail_library import IMPOSSIBLE_CHECK, hostile_environment


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"call_{name}", name=name, arguments=dict(arguments))


HONEST_CALLS = ["bump", "bump", "bump"]
ATTACKS = ["poison_shared_state", "start_thread", "poison_builtins", "bump", "kill_zygote", "forge_frames"]


async def honest_run(pool: SandboxPool, attacker_calls: list[str]) -> tuple[dict, list]:
    """The honest session's state and results, with the attacker's calls interleaved (or none)."""
    environment = hostile_environment()
    honest = await pool.open_session(environment, {"counter": 10})
    attacker = await pool.open_session(environment, {"counter": 100}) if attacker_calls else None
    results = []
    for index, name in enumerate(HONEST_CALLS):
        if attacker is not None:
            for attack in attacker_calls[index :: len(HONEST_CALLS)]:
                await attacker.call(call(attack))
        observation, _ = await honest.call(call(name))
        results.append(observation.content)
    state = await honest.state()
    await honest.close()
    if attacker is not None:
        await attacker.close()
    return state, results


async def test_the_neighbour_of_a_hostile_session_ends_as_in_its_solo_run():
    async with JailSpec().pool() as pool:
        solo = await honest_run(pool, [])
        beside_attacker = await honest_run(pool, ATTACKS)
    assert beside_attacker == solo
    assert solo[0]["counter"] == 13


async def test_class_attributes_do_not_carry_over_between_sessions_of_one_environment():
    async with JailSpec().pool() as pool:
        first = await pool.open_session(hostile_environment(), {"counter": 0})
        await first.call(call("poison_shared_state"))  # sets Hostile.bonus = 1000 in its own process
        own, _ = await first.call(call("bump"))
        second = await pool.open_session(hostile_environment(), {"counter": 0})
        theirs, _ = await second.call(call("bump"))
        await first.close()
        await second.close()
    assert own.content["data"] == 1001
    assert theirs.content["data"] == 1


async def test_builtins_replaced_by_one_session_stay_in_its_own_process():
    async with JailSpec().pool() as pool:
        first = await pool.open_session(hostile_environment(), {"counter": 0})
        poisoned, _ = await first.call(call("poison_builtins"))
        own, _ = await first.call(call("bump"))  # getattr now answers 1000 in this process
        second = await pool.open_session(hostile_environment(), {"counter": 0})
        theirs, _ = await second.call(call("bump"))
        await first.close()
        await second.close()
    assert poisoned.content["success"] is True
    assert own.content["data"] == 1001
    assert theirs.content["data"] == 1


async def test_code_under_test_cannot_make_an_impossible_check_pass():
    checks = [Check(id="impossible", description="never true", source=IMPOSSIBLE_CHECK)]
    async with JailSpec().pool() as pool:
        session = await pool.open_session(hostile_environment(), {"counter": 0, "flag": "honest"})
        for attack in ("poison_shared_state", "poison_builtins", "start_thread", "bump"):
            await session.call(call(attack))
        final = await session.state()
        results = await pool.run_checks(checks, {"counter": 0, "flag": "honest"}, final)
        await session.close()
    assert [r.passed for r in results] == [False]


async def test_a_hostile_check_cannot_change_the_next_scenarios_scores():
    poison = Check(
        id="poison",
        description="patches what it can reach",
        source=(
            "import typing\n"
            "def check(initial_state, final_state):\n"
            "    runtime = typing.sys.modules.get('harness.sandbox.runtime')\n"
            "    if runtime is not None:\n"
            "        runtime._run_check = lambda *a, **k: {'passed': True, 'value': None, 'error': None}\n"
            "    return True\n"
        ),
    )
    impossible = Check(id="impossible", description="never true", source=IMPOSSIBLE_CHECK)
    async with JailSpec().pool() as pool:
        await pool.run_checks([poison], {}, {})
        results = await pool.run_checks([impossible], {"flag": "honest"}, {"flag": "honest"})
    assert [r.passed for r in results] == [False]


async def test_forged_frames_end_only_their_own_session():
    async with JailSpec().pool() as pool:
        forger = await pool.open_session(hostile_environment(), {"counter": 0})
        bystander = await pool.open_session(hostile_environment(), {"counter": 5})
        await forger.call(call("forge_frames"))
        await asyncio.sleep(0.05)
        with pytest.raises(SandboxError, match="protocol violation"):
            await forger.call(call("bump"))
        bystanding, _ = await bystander.call(call("bump"))
        await forger.close()
        await bystander.close()
    assert bystanding.content["data"] == 6


async def test_crash_timeout_and_memory_are_told_apart_and_the_session_recovers():
    limits = SandboxLimits(call_timeout_s=1.0, kill_grace_s=0.5, memory_mb=512)
    async with JailSpec(limits=limits).pool() as pool:
        session = await pool.open_session(hostile_environment(), {"counter": 0})
        bystander = await pool.open_session(hostile_environment(), {"counter": 50})
        await session.call(call("bump"))
        crashed, _ = await session.call(call("crash"))
        hung, _ = await session.call(call("spin"))
        bombed, _ = await session.call(call("memory_bomb"))
        after, _ = await session.call(call("bump"))
        bystanding, _ = await bystander.call(call("bump"))
        await session.close()
        await bystander.close()
    assert crashed.kind is ObservationKind.TOOL_EXCEPTION and "crashed" in (crashed.error or ""), crashed
    # It swallows its CPU timer and keeps computing: one more CPU second and its process ends, by its own doing.
    assert hung.kind is ObservationKind.RESOURCE_LIMIT and "kept computing past" in (hung.error or ""), hung
    assert bombed.kind is ObservationKind.RESOURCE_LIMIT and "memory" in (bombed.error or ""), bombed
    # The crashed and killed processes were replaced; the log replay restored the state (one bump before).
    assert after.kind is ObservationKind.OK and after.content["data"] == 2
    assert bystanding.content["data"] == 51


async def test_a_kill_from_outside_is_not_called_a_memory_breach():
    async with JailSpec().pool() as pool:
        session = await pool.open_session(hostile_environment(), {"counter": 0})
        pid = session.process_id
        assert pid is not None
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, os.kill, pid, signal.SIGKILL)
        observation, _ = await session.call(call("spin"))
        await session.close()
    assert observation.kind is ObservationKind.SANDBOX_ERROR, observation
    assert "killed from outside" in (observation.error or "")
    assert "memory" not in (observation.error or "")
