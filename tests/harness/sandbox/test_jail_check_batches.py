"""Episodes of one scenario scored in one check process: never another scenario's, never one another's verdicts.

A witness check keeps, in a place the per-check restore does not reach (a dict inside a standard-library
function), the tag of every episode its process scored, and returns that list: its value shows which episodes
shared a process, so the tests see batches form and see that no batch holds two scenarios.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import orjson

from harness.sandbox import JailSpec, SandboxLimits, SandboxPool, find_problems
from harness.sandbox.check_batches import MAX_BATCH_EPISODES, ScoreExpected, checks_of_scenario
from harness.schema import Check, CheckResult
from tests.support.cli_process import harness_cli
from tests.support.jail_library import REPO, hostile_scenario, write_hostile_library

WITNESS = (
    "import dataclasses\n"
    "import operator\n"
    "def check(initial_state, final_state):\n"
    "    seen = operator.attrgetter('__kwdefaults__')(dataclasses.dataclass).setdefault('seen', [])\n"
    "    seen.append(final_state['tag'])\n"
    "    return seen\n"
)
"""Never passes: its value lists the tags of the episodes its process scored, its own last."""

HOSTILE = (
    "import math\n"
    "import typing\n"
    "calls = 0\n"
    "def check(initial_state, final_state):\n"
    "    global calls\n"
    "    calls += 1\n"
    "    final_state['loot'].append('forged')\n"
    "    initial_state['loot'].append('forged')\n"
    "    typing.sys.modules['builtins'].len = lambda value: 0\n"
    "    typing.sys.modules['builtins'].sorted = lambda value, **k: [1]\n"
    "    math.floor = lambda value: 7\n"
    "    return calls == 1 and final_state['n'] % 2 == 0\n"
)
"""Counts its calls in a module global, forges the states it is given and rebinds shared functions: if any of that
reached the next episode, that episode's verdicts would change."""

PROBE = (
    "import math\n"
    "def check(initial_state, final_state):\n"
    "    return (\n"
    "        len(final_state['loot']) == 0 and len(initial_state['loot']) == 0 and math.floor(2.5) == 2\n"
    "        and sorted([2, 1]) == [1, 2] and final_state['n'] % 3 == 0\n"
    "    )\n"
)

EXITS_ON_THREE = (
    "import operator\n"
    "import typing\n"
    "def check(initial_state, final_state):\n"
    "    if final_state['n'] == 3:\n"
    "        operator.attrgetter('_exit')(typing.sys.modules['os'])(3)\n"
    "    return final_state['n'] % 2 == 0\n"
)

SPINS = "def check(initial_state, final_state):\n    for _ in range(2_000_000):\n        pass\n    return final_state['n'] % 2 == 0\n"


def checks(*sources: str) -> list[Check]:
    return [Check(id=f"c{index}", description="", source=source) for index, source in enumerate(sources)]


def state(tag: str, n: int) -> dict[str, object]:
    return {"tag": tag, "n": n, "loot": []}


def witnessed(result: CheckResult) -> list[str]:
    """The tags the witness saw in its process, its own last."""
    assert not result.passed and result.value is not None and result.error is None, result
    seen = ast.literal_eval(result.value)  # a list of short strings, as repr() wrote it
    assert isinstance(seen, list)
    return seen


def test_the_checks_pass_the_static_lint():
    for source in (WITNESS, HOSTILE, PROBE, EXITS_ON_THREE, SPINS):
        assert not find_problems(source), find_problems(source)


async def score(pool: SandboxPool, scenario: str, batch: list[Check], episodes: list[dict[str, object]]):
    async def one(final: dict[str, object]) -> list[CheckResult]:
        with checks_of_scenario(scenario):
            return await pool.run_checks(batch, state("initial", -1), final)

    return await asyncio.gather(*(one(final) for final in episodes))


async def test_a_hostile_check_changes_no_other_episodes_verdict_in_its_process():
    batch = checks(HOSTILE, PROBE, WITNESS)
    episodes = [state(f"e{n}", n) for n in range(12)]
    async with JailSpec().pool() as pool:
        scored = await score(pool, "hostile", batch, episodes)
    shared = 0
    for n, results in enumerate(scored):
        # Each verdict is the one the episode's own state gives, whatever the episodes before it in its process did.
        assert [r.passed for r in results[:2]] == [n % 2 == 0, n % 3 == 0], (n, results)
        seen = witnessed(results[2])
        assert seen[-1] == f"e{n}", seen
        shared += len(seen) > 1
    assert shared, "no two episodes shared a check process: nothing was tested"


async def test_a_check_process_never_scores_two_scenarios_even_with_the_same_checks():
    batch = checks(WITNESS, PROBE)  # the very same checks for both scenarios
    async with JailSpec().pool() as pool:
        first, second = await asyncio.gather(
            score(pool, "first", batch, [state(f"first-{n}", n) for n in range(10)]),
            score(pool, "second", batch, [state(f"second-{n}", n) for n in range(10)]),
        )
    for name, scored in (("first", first), ("second", second)):
        together = [witnessed(results[0]) for results in scored]
        assert all(tag.startswith(f"{name}-") for seen in together for tag in seen), together
        assert any(len(seen) > 1 for seen in together), together
        assert [results[1].passed for results in scored] == [n % 3 == 0 for n in range(10)]


async def test_a_check_process_that_dies_mid_batch_fails_only_its_episodes_which_are_scored_again(caplog):
    batch = checks(EXITS_ON_THREE, PROBE)
    caplog.set_level(logging.WARNING, logger="harness.sandbox.check_batches")
    async with JailSpec().pool() as pool:
        scored, neighbours = await asyncio.gather(
            score(pool, "exits", batch, [state(f"e{n}", n) for n in range(6)]),
            score(pool, "neighbour", checks(WITNESS, PROBE), [state(f"x{n}", n) for n in range(6)]),
        )
    assert "each is scored again alone" in caplog.text
    for n, results in enumerate(scored):
        if n == 3:
            # Scored alone, the check that ends its process fails with the reason; the other check still holds.
            assert not results[0].passed and "exit" in (results[0].error or ""), results[0]
            assert results[1].passed is True, results[1]
        else:
            assert [r.passed for r in results] == [n % 2 == 0, n % 3 == 0], (n, results)
            assert results[0].error is None and results[1].error is None, results
    # The other scenario's episodes, scored at the same time, never saw that batch's failure.
    for n, results in enumerate(neighbours):
        assert all(tag.startswith("x") for tag in witnessed(results[0]))
        assert results[1].passed is (n % 3 == 0) and results[1].error is None, results


SPINNING_POLLS = 5
"""Polls 2 ms apart in which a child must be seen running to be taken for the batch's check process."""


def running_children(zygote_pid: int) -> list[int]:
    """The zygote's children that are running (the spare waits for its assignment, asleep)."""
    try:
        text = Path(f"/proc/{zygote_pid}/task/{zygote_pid}/children").read_text()
    except OSError:
        return []
    running = []
    for pid in text.split():
        try:
            status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if status == "R":
            running.append(int(pid))
    return running


async def test_a_check_process_killed_from_outside_mid_batch_has_its_episodes_scored_again(caplog):
    batch = checks(SPINS, PROBE)
    caplog.set_level(logging.WARNING, logger="harness.sandbox.check_batches")
    async with JailSpec().pool() as pool:
        zygote_pid = pool._zygotes[0].zygote_pid
        assert zygote_pid is not None
        scoring = asyncio.ensure_future(score(pool, "spins", batch, [state(f"e{n}", n) for n in range(4)]))
        killed = None
        # A freshly forked spare runs for a moment before it waits for its assignment; the batch's process spins
        # for the whole batch, so it is the one seen running several polls in a row.
        polls_running: Counter[int] = Counter()
        while killed is None and not scoring.done():
            running = running_children(zygote_pid)
            polls_running = Counter({pid: polls_running[pid] + 1 for pid in running})
            for pid, polls in polls_running.items():
                if polls >= SPINNING_POLLS:
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
                    break
            await asyncio.sleep(0.002)
        scored = await scoring
    assert killed is not None, "the batch finished before it could be killed"
    assert "each is scored again alone" in caplog.text and "killed from outside" in caplog.text, caplog.text
    for n, results in enumerate(scored):
        assert [r.passed for r in results] == [n % 2 == 0, n % 3 == 0], (n, results)
        assert all(r.error is None for r in results), results


def test_a_run_never_scores_two_scenarios_in_one_check_process(tmp_path: Path):
    scenarios = []
    for name in ("left", "right"):
        scenario = hostile_scenario([("bump", {})], scenario_id=name, initial={"counter": 0, "loot": [], "tag": name})
        honest = Check(id="bumped", description="", source="def check(i, f):\n    return f['counter'] == 1\n")
        scenarios.append(
            scenario.model_copy(update={"checks": [Check(id="witness", description="", source=WITNESS), honest]})
        )
    library = write_hostile_library(tmp_path / "library", scenarios)
    run_dir = tmp_path / "run"
    ran = harness_cli(
        "run",
        "--envs",
        str(library),
        "--agent",
        "oracle",
        "--trials",
        "8",
        "--concurrency",
        "16",
        "--out",
        str(run_dir),
    )
    assert ran.returncode in (0, 1), ran.stderr
    records = [orjson.loads(line) for line in (run_dir / "results.jsonl").read_bytes().splitlines()]
    assert sorted(r["scenario_id"] for r in records) == sorted(["left", "right"] * 8)
    for record in records:
        results = {r["check_id"]: r for r in record["check_results"]}
        assert results["bumped"]["passed"] is True, record["scenario_id"]
        seen = ast.literal_eval(results["witness"]["value"])
        assert set(seen) == {record["scenario_id"]}, (record["scenario_id"], seen)


ORDINARY_USER_SCRIPT = """
import ast
import asyncio
import orjson
from harness.sandbox import JailSpec
from tests.harness.sandbox.test_jail_check_batches import HOSTILE, PROBE, WITNESS, checks, score, state, witnessed

async def main():
    async with JailSpec().pool() as pool:
        hostile, other = await asyncio.gather(
            score(pool, "hostile", checks(HOSTILE, PROBE, WITNESS), [state(f"h{n}", n) for n in range(8)]),
            score(pool, "other", checks(WITNESS, PROBE), [state(f"o{n}", n) for n in range(8)]),
        )
    print(orjson.dumps({
        "verdicts": [[r.passed for r in results[:2]] for results in hostile],
        "hostile_seen": [witnessed(results[2]) for results in hostile],
        "other_seen": [witnessed(results[0]) for results in other],
    }).decode())

asyncio.run(main())
"""


def test_batches_stay_apart_when_an_ordinary_user_runs_the_harness(tmp_path: Path):
    from tests.support.unprivileged import open_to_ordinary_user, run_as_ordinary_user

    home = tmp_path / "home"
    home.mkdir()
    open_to_ordinary_user(home)
    finished = run_as_ordinary_user([sys.executable, "-c", ORDINARY_USER_SCRIPT], home=home, cwd=REPO)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    report = orjson.loads(finished.stdout.splitlines()[-1])
    assert report["verdicts"] == [[n % 2 == 0, n % 3 == 0] for n in range(8)]
    assert all(tag.startswith("h") for seen in report["hostile_seen"] for tag in seen)
    assert all(tag.startswith("o") for seen in report["other_seen"] for tag in seen)
    assert any(len(seen) > 1 for seen in report["hostile_seen"] + report["other_seen"])


async def test_a_batch_holds_no_more_inputs_than_one_state_may_be():
    """Episodes whose inputs would together exceed ``max_state_bytes`` are scored in separate processes."""
    batch = checks(WITNESS, PROBE)
    bulky = [{**state(f"b{n}", n), "padding": "x" * 3000} for n in range(4)]
    async with JailSpec(limits=SandboxLimits(max_state_bytes=5000)).pool() as pool:
        scored = await score(pool, "bulky", batch, bulky)
    assert [witnessed(results[0]) for results in scored] == [[f"b{n}"] for n in range(4)]
    assert [results[1].passed for results in scored] == [n % 3 == 0 for n in range(4)]


async def announced(
    pool: SandboxPool, scenario: str, batch: list[Check], final: dict[str, object], previous: list[ScoreExpected]
) -> list[CheckResult]:
    """An episode announced for ``scenario`` that asks to be scored only after the one before it has asked, and
    after more than a check process takes to start: without the announcement each would get a process."""
    with pool.scores_expected(scenario) as expected:
        index = len(previous)
        previous.append(expected)
        if index:
            while not previous[index - 1].arrived:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
        with checks_of_scenario(scenario):
            return await pool.run_checks(batch, state("initial", -1), final)


async def test_announced_episodes_of_a_scenario_are_scored_by_one_process_though_they_ask_apart():
    batch = checks(WITNESS, PROBE)
    limits = SandboxLimits(check_gather_s=3600)  # only the arrivals end the wait
    async with JailSpec(limits=limits).pool() as pool:
        entered: list[ScoreExpected] = []
        episodes = [announced(pool, "trials", batch, state(f"t{n}", n), entered) for n in range(4)]
        scored = await asyncio.wait_for(asyncio.gather(*episodes), 300)
        apart = []
        for n in range(3):  # the same, unannounced: each is scored as it asks
            with checks_of_scenario("alone"):
                apart.append(await pool.run_checks(batch, state("initial", -1), state(f"a{n}", n)))
    assert sorted(witnessed(results[0])[-1] for results in scored) == ["t0", "t1", "t2", "t3"]
    assert max(len(witnessed(results[0])) for results in scored) == 4, [witnessed(r[0]) for r in scored]
    assert [results[1].passed for results in scored] == [n % 3 == 0 for n in range(4)]
    assert [witnessed(results[0]) for results in apart] == [["a0"], ["a1"], ["a2"]]


async def test_an_announced_episode_that_ends_without_asking_no_longer_holds_the_others():
    batch = checks(WITNESS)
    arrivals: list[str] = []
    async with JailSpec(limits=SandboxLimits(check_gather_s=3600)).pool() as pool:
        asked = asyncio.Event()

        async def asks() -> list[CheckResult]:
            with pool.scores_expected("s", lambda: arrivals.append("asks")) as expected, checks_of_scenario("s"):
                scoring = asyncio.ensure_future(pool.run_checks(batch, state("i", -1), state("e0", 0)))
                while not expected.arrived:
                    await asyncio.sleep(0.01)
                asked.set()
                return await scoring

        async def ends_without_asking() -> None:
            with pool.scores_expected("s", lambda: arrivals.append("ends")):
                await asked.wait()  # the environment failed, say: nothing to score

        results, _ = await asyncio.wait_for(asyncio.gather(asks(), ends_without_asking()), 300)
    assert witnessed(results[0]) == ["e0"]
    assert sorted(arrivals) == ["asks", "ends"]  # each announcement arrives once


async def test_a_full_batch_starts_without_waiting_for_more_announced_episodes():
    batch = checks(WITNESS)
    async with JailSpec(limits=SandboxLimits(check_gather_s=3600)).pool() as pool:
        first_scored = asyncio.Event()

        async def episode(n: int) -> list[CheckResult]:
            with pool.scores_expected("s"), checks_of_scenario("s"):
                if n >= MAX_BATCH_EPISODES:
                    await first_scored.wait()  # asks only once the first batch is scored
                results = await pool.run_checks(batch, state("i", -1), state(f"e{n}", n))
                first_scored.set()
                return results

        scored = await asyncio.wait_for(asyncio.gather(*(episode(n) for n in range(MAX_BATCH_EPISODES + 2))), 300)
    first = [witnessed(results[0]) for results in scored[:MAX_BATCH_EPISODES]]
    assert max(len(seen) for seen in first) == MAX_BATCH_EPISODES
    assert all(witnessed(results[0])[-1] == f"e{n}" for n, results in enumerate(scored))


async def test_a_runs_trials_of_one_task_are_scored_by_one_check_process(tmp_path: Path):
    """Through ``harness.run.run``: the local backend announces each episode, so the four trials of a task,
    which finish one after another, are scored together (the gather window is long here, so only their arrivals
    end it), and every trial is recorded once with its own verdict."""
    from agents.run_adapters import agent_factory
    from harness.results.metrics import read_results
    from harness.run import RunConfig, run

    scenario = hostile_scenario([("bump", {})], scenario_id="task", initial={"counter": 0, "loot": [], "tag": "task"})
    honest = Check(id="bumped", description="", source="def check(i, f):\n    return f['counter'] == 1\n")
    witness = Check(id="witness", description="", source=WITNESS)
    library = write_hostile_library(tmp_path / "library", [scenario.model_copy(update={"checks": [witness, honest]})])
    config = RunConfig(envs=str(library), agent_kind="oracle", trials=4, concurrency=4, out=tmp_path / "run", workers=1)
    outcome = await asyncio.wait_for(
        run(config, agent_factory=agent_factory, sandbox_limits=SandboxLimits(check_gather_s=3600)), 600
    )
    assert outcome.ran == 4
    records = read_results(tmp_path / "run" / "results.jsonl")
    assert sorted(t.trial for t in records) == [0, 1, 2, 3]
    for trajectory in records:
        results = {r.check_id: r for r in trajectory.check_results}
        assert results["bumped"].passed is True
    seen = [ast.literal_eval(str(t.check_results[0].value)) for t in records]
    assert max(len(tags) for tags in seen) == 4, seen  # one process saw all four
