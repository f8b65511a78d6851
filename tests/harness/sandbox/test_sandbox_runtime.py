"""The sandbox runtime: tool calls, validation, diffs, determinism, checks and scoring."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from harness.sandbox import JailSpec, SandboxError, SandboxPool
from harness.schema import Check, Environment, ObservationKind, Scenario, ToolCall
from harness.scoring.checks import ScenarioWithoutChecks, score_final_state
from harness.toolspec import derive_tools

WALLET = '''
import random
import time
import uuid
from datetime import datetime
from typing import Optional


class Wallet:
    def __init__(self, init_config: dict):
        self.accounts = init_config.get("accounts", {})
        self.log = init_config.get("log", [])

    def get_balance(self, account_id: str) -> dict:
        """Read one account's balance.

        Args:
            account_id: The account to read.
        """
        if account_id not in self.accounts:
            return {"success": False, "error": f"no account {account_id}"}
        return {"success": True, "data": self.accounts[account_id]["balance"]}

    def transfer(self, source: str, target: str, amount: float, memo: Optional[str] = None) -> dict:
        """Move money between two accounts.

        Args:
            source: Account to take the money from.
            target: Account to credit.
            amount: How much to move; must not exceed the balance.
            memo: A note kept with the transfer.
        """
        if self.accounts[source]["balance"] < amount:
            return {"success": False, "error": "insufficient funds"}
        self.accounts[source]["balance"] -= amount
        self.accounts[target]["balance"] += amount
        self.log.append({"id": str(uuid.uuid4()), "at": datetime.now().isoformat(), "t": time.time(),
                         "nonce": random.random(), "memo": memo})
        return {"success": True, "message": "done"}
'''

STATE = {"accounts": {"A": {"balance": 100}, "B": {"balance": 5}}, "log": []}


def wallet() -> Environment:
    return Environment(
        id="wallet", name="Wallet", class_name="Wallet", code=WALLET, tools=derive_tools(WALLET, "Wallet")
    )


def transfer(amount, **extra) -> ToolCall:
    return ToolCall(id="t", name="transfer", arguments={"source": "A", "target": "B", "amount": amount, **extra})


@pytest.fixture
async def pool():
    async with JailSpec(workers=2).pool() as sandbox:
        yield sandbox


def test_tool_schemas_are_derived_from_the_class():
    tools = {t.function.name: t.function for t in derive_tools(WALLET, "Wallet")}
    assert set(tools) == {"get_balance", "transfer"}
    params = tools["transfer"].parameters
    assert params["required"] == ["source", "target", "amount"]
    assert params["properties"]["amount"] == {
        "type": "number",
        "description": "How much to move; must not exceed the balance.",
    }
    assert params["properties"]["memo"]["type"] == "string"
    assert tools["transfer"].description == "Move money between two accounts."


async def test_call_returns_observation_and_diff(pool):
    session = await pool.open_session(wallet(), STATE)
    observation, diff = await session.call(transfer(30))
    assert observation.kind is ObservationKind.OK
    paths = {tuple(d.path) for d in diff}
    assert ("accounts", "A", "balance") in paths and ("accounts", "B", "balance") in paths
    state = await session.state()
    assert state["accounts"]["A"]["balance"] == 70
    assert STATE["accounts"]["A"]["balance"] == 100  # the caller's initial state is never touched


async def test_refused_call_is_tool_error_and_changes_nothing(pool):
    session = await pool.open_session(wallet(), STATE)
    before = await session.state()
    observation, diff = await session.call(transfer(1000))
    assert observation.kind is ObservationKind.TOOL_ERROR
    assert observation.error == "insufficient funds"
    assert diff == [] and await session.state() == before


@pytest.mark.parametrize(
    ("call", "kind", "fragment"),
    [
        (ToolCall(id="x", name="transfr", arguments={}), ObservationKind.UNKNOWN_TOOL, "Did you mean 'transfer'"),
        (
            ToolCall(id="x", name="get_balance", arguments={}),
            ObservationKind.INVALID_ARGUMENTS,
            "missing required parameter 'account_id'",
        ),
        (
            ToolCall(id="x", name="get_balance", arguments={"acount_id": "A"}),
            ObservationKind.INVALID_ARGUMENTS,
            "Did you mean 'account_id'",
        ),
        (
            ToolCall(id="x", name="get_balance", arguments={"account_id": 7}),
            ObservationKind.INVALID_ARGUMENTS,
            "must be string",
        ),
        (
            ToolCall(id="x", name="get_balance", arguments=None, raw_arguments="{broken"),
            ObservationKind.INVALID_ARGUMENTS,
            "not a JSON object",
        ),
        (
            ToolCall(id="x", name="__init__", arguments={}),
            ObservationKind.UNKNOWN_TOOL,
            "Available tools: get_balance, transfer",
        ),
    ],
)
async def test_bad_calls_become_error_observations(pool, call, kind, fragment):
    session = await pool.open_session(wallet(), STATE)
    observation, _ = await session.call(call)
    assert observation.kind is kind
    assert fragment in observation.error
    assert (await session.call(ToolCall(id="y", name="get_balance", arguments={"account_id": "A"})))[0].content == {
        "success": True,
        "data": 100,
    }


async def test_same_calls_give_byte_identical_state(pool):
    states = []
    for _ in range(2):
        session = await pool.open_session(wallet(), STATE, seed=7)
        for amount in (10, 20, 5):
            await session.call(transfer(amount, memo="rent"))
        states.append(orjson.dumps(await session.state()))
        await session.close()
    assert states[0] == states[1]
    log = orjson.loads(states[0])["log"]
    assert log[0]["at"].startswith("2025-01-15T12:00")  # the frozen clock
    assert len({entry["id"] for entry in log}) == 3  # uuids differ within an episode


async def test_different_seeds_give_different_random_values(pool):
    nonces = []
    for seed in (1, 2):
        session = await pool.open_session(wallet(), STATE, seed=seed)
        await session.call(transfer(1))
        nonces.append((await session.state())["log"][0]["nonce"])
    assert nonces[0] != nonces[1]


def scenario(checks: list[Check]) -> Scenario:
    return Scenario(id="s1", environment_id="wallet", initial_state=STATE, task="Move 30 from A to B.", checks=checks)


CHECKS = [
    Check(
        id="moved",
        description="A paid 30",
        source="def check(initial_state, final_state):\n    return final_state['accounts']['A']['balance'] == initial_state['accounts']['A']['balance'] - 30\n",
    ),
    Check(
        id="envscaler",
        description="B got 30 (EnvScaler form)",
        source="def check_func(final_state):\n    return final_state['accounts']['B']['balance'] == initial_state['accounts']['B']['balance'] + 30\n",
    ),
    Check(
        id="untouched",
        description="no other account",
        source="def check(initial_state, final_state):\n    return set(final_state['accounts']) == {'A', 'B'}\n",
    ),
    Check(
        id="truthy", description="returns 1, not True", source="def check(initial_state, final_state):\n    return 1\n"
    ),
    Check(
        id="raises",
        description="raises",
        source="def check(initial_state, final_state):\n    return final_state['missing']\n",
    ),
]


async def test_scoring_counts_only_exact_true(pool):
    session = await pool.open_session(wallet(), STATE)
    await session.call(transfer(30))
    results, reward = await score_final_state(pool, scenario(CHECKS), await session.state())
    by_id = {r.check_id: r for r in results}
    assert by_id["moved"].passed and by_id["envscaler"].passed and by_id["untouched"].passed
    assert not by_id["truthy"].passed and by_id["truthy"].value == "1"
    assert not by_id["raises"].passed and "KeyError" in by_id["raises"].error
    assert reward.state_reward == pytest.approx(3 / 5)
    # "untouched" held at reset; the other four did not, and two of those pass now.
    assert by_id["untouched"].passed_at_reset is True
    assert reward.delta_reward == pytest.approx(2 / 4)
    assert reward.success is False


async def test_do_nothing_scores_below_the_solution(pool):
    good = scenario(CHECKS[:3])
    _, nothing = await score_final_state(pool, good, STATE)
    assert nothing.success is False and nothing.delta_reward == 0.0
    session = await pool.open_session(wallet(), STATE)
    await session.call(transfer(30))
    _, solved = await score_final_state(pool, good, await session.state())
    assert solved.success and solved.state_reward == 1.0 and solved.delta_reward == 1.0


def count_check_runs(pool: SandboxPool, fail_first_reset: bool = False) -> list[str]:
    """Record each ``run_checks`` of ``pool`` as "reset" (empty transcript) or "final", then run it for real;
    with ``fail_first_reset`` the first reset computation fails after the others have started waiting for it."""
    runs: list[str] = []
    real_run_checks = pool.run_checks

    async def counted(checks, initial_state, final_state, transcript=None):
        runs.append("reset" if transcript == [] else "final")
        if fail_first_reset and transcript == [] and runs.count("reset") == 1:
            await asyncio.sleep(0.05)
            raise SandboxError("the check process died")
        return await real_run_checks(checks, initial_state, final_state, transcript=transcript)

    pool.run_checks = counted
    return runs


async def test_episodes_of_one_scenario_scored_together_run_the_reset_checks_once(pool):
    """Trials of a scenario finish together: one check process computes what held at reset for all of them."""
    runs = count_check_runs(pool)
    shared = scenario(CHECKS[:3])
    session = await pool.open_session(wallet(), STATE)
    await session.call(transfer(30))
    solved = await session.state()
    scored = await asyncio.gather(*(score_final_state(pool, shared, solved, transcript=[{}]) for _ in range(6)))
    assert runs.count("reset") == 1 and runs.count("final") == 6
    assert all(reward.success and reward.delta_reward == 1.0 for _, reward in scored)
    assert all(r.passed_at_reset is True for results, _ in scored for r in results if r.check_id == "untouched")


async def test_when_the_first_reset_computation_fails_a_waiting_episode_computes_it(pool):
    runs = count_check_runs(pool, fail_first_reset=True)
    shared = scenario(CHECKS[:3])
    outcomes = await asyncio.gather(
        *(score_final_state(pool, shared, STATE, transcript=[{}]) for _ in range(4)), return_exceptions=True
    )
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failed) == 1 and "check process died" in str(failed[0])
    assert runs.count("reset") == 2  # the failed one, then one computation shared by the three that waited
    assert all(reward.success is False for _, reward in (o for o in outcomes if not isinstance(o, BaseException)))


async def test_another_pool_starts_from_the_reset_results_one_pool_computed(pool):
    """How a Ray executor reuses the driver's screening: its scenarios are copies (they crossed the wire), and
    only those whose checks are unchanged adopt the results."""
    from harness.scoring.checks import adopt_reset_results, checks_at_reset, known_reset_results

    original = scenario(CHECKS[:3])
    await checks_at_reset(pool, original)
    known = known_reset_results(pool, [original])
    same = Scenario.model_validate_json(original.model_dump_json())
    changed = same.model_copy(update={"id": "s2", "checks": CHECKS[:2]})
    known[(changed.environment_id, changed.id)] = known[(original.environment_id, original.id)]
    async with JailSpec(workers=1).pool() as other:
        assert adopt_reset_results(other, [same, changed], known) == 1
        runs = count_check_runs(other)
        results, _ = await score_final_state(other, same, STATE, transcript=[{}])
        assert runs == ["final"]
        assert {r.check_id: r.passed_at_reset for r in results} == {
            "moved": False,
            "envscaler": False,
            "untouched": True,
        }
        await score_final_state(other, changed, STATE, transcript=[{}])
        assert runs == ["final", "reset", "final"]


async def test_scenario_without_checks_is_refused(pool):
    with pytest.raises(ScenarioWithoutChecks, match="no checks"):
        await score_final_state(pool, scenario([]), STATE)


async def test_check_that_loops_forever_fails_alone(pool):
    looping = Check(id="loop", description="never ends", source="def check(i, f):\n    while True:\n        pass\n")
    results = await pool.run_checks([CHECKS[0], looping, CHECKS[2]], STATE, STATE)
    assert [r.passed for r in results] == [False, False, True]
    assert "used up its CPU-time limit" in results[1].error


READING_THE_INITIAL_STATE = {
    "named": "def check(initial, final):\n    return initial['accounts']['A']['balance'] == 100\n",
    "captured": "def check(initial, final):\n    def inner():\n        return initial['log'] == []\n    return inner()\n",
    "locals": (
        "import typing\n\n\ndef check(initial, final):\n"
        "    return typing.sys.modules['builtins'].locals()['initial']['accounts']['B']['balance'] == 5\n"
    ),
    "getattr": (
        "import typing\n\n\ndef check(initial, final):\n"
        "    found = getattr(typing.sys.modules['builtins'], 'loc' + 'als')()\n"
        "    return sorted(found['initial']) == ['accounts', 'log']\n"
    ),
    "star_args": "def check(*states):\n    return states[0]['accounts']['A']['balance'] == 100\n",
    "wrapped": (
        "import functools\n\n\ndef keep(function):\n    @functools.wraps(function)\n"
        "    def wrapper(*args):\n        return function(*args)\n    return wrapper\n\n\n"
        "@keep\ndef check(initial, final):\n    return initial['accounts']['A']['balance'] == 100\n"
    ),
    "callable_object": (
        "class Check:\n    def __call__(self, initial, final):\n        return initial['log'] == []\n\n\n"
        "check = Check()\n"
    ),
    "reassigned": "def check(initial, final):\n    seen = initial\n    initial = None\n    return seen['log'] == []\n",
    "check_func": "def check_func(final):\n    return initial_state['accounts']['A']['balance'] == 100\n",
}


async def test_every_way_a_check_reads_the_initial_state_gets_it(pool):
    """A check is given the initial state undecoded only when its code cannot read it: each route to it here
    reads the real state."""
    checks = [Check(id=name, description=name, source=source) for name, source in READING_THE_INITIAL_STATE.items()]
    results = await pool.run_checks(checks, STATE, {"accounts": {}, "log": ["moved"]})
    assert {r.check_id: (r.passed, r.error) for r in results} == {
        name: (True, None) for name in READING_THE_INITIAL_STATE
    }


READING_THE_FINAL_STATE = {
    "named": "def check(initial, final):\n    return final['log'] == ['moved']\n",
    "captured": "def check(initial, final):\n    def inner():\n        return final['log'] == ['moved']\n    return inner()\n",
    "locals": (
        "import typing\n\n\ndef check(initial, final):\n"
        "    return typing.sys.modules['builtins'].locals()['final']['log'] == ['moved']\n"
    ),
    "getattr": (
        "import typing\n\n\ndef check(initial, final):\n"
        "    found = getattr(typing.sys.modules['builtins'], 'loc' + 'als')()\n"
        "    return found['final']['log'] == ['moved']\n"
    ),
    "star_args": "def check(*states):\n    return states[1]['log'] == ['moved']\n",
    "wrapped": (
        "import functools\n\n\ndef keep(function):\n    @functools.wraps(function)\n"
        "    def wrapper(*args):\n        return function(*args)\n    return wrapper\n\n\n"
        "@keep\ndef check(initial, final):\n    return final['log'] == ['moved']\n"
    ),
    "callable_object": (
        "class Check:\n    def __call__(self, initial, final):\n        return final['log'] == ['moved']\n\n\n"
        "check = Check()\n"
    ),
    "reassigned": "def check(initial, final):\n    seen = final\n    final = None\n    return seen['log'] == ['moved']\n",
    "with_transcript": "def check(initial, final, transcript):\n    return final['log'] == ['moved'] and transcript == []\n",
    "check_func": "def check_func(final):\n    return final['log'] == ['moved']\n",
}


async def test_every_way_a_check_reads_the_final_state_gets_it(pool):
    """The final state too is decoded only for a check whose code can read it (a transcript check never does):
    each route to it here reads the real state, and a check that never names it still passes."""
    final = {"accounts": {"A": {"balance": 100}, "B": {"balance": 5}}, "log": ["moved"]}
    sources = READING_THE_FINAL_STATE | {
        "transcript_only": "def check(initial, final, transcript):\n    return transcript == []\n",
    }
    checks = [Check(id=name, description=name, source=source) for name, source in sources.items()]
    results = await pool.run_checks(checks, {"accounts": {}, "log": []}, final)
    assert {r.check_id: (r.passed, r.error) for r in results} == {name: (True, None) for name in sources}


DECLARING_THE_TRANSCRIPT = {
    "third": "def check(initial, final, transcript):\n    return transcript == [{'role': 'user'}]\n",
    "positional_only": "def check(initial, final, transcript, /):\n    return transcript == [{'role': 'user'}]\n",
    "star_args": "def check(initial, final, *rest):\n    return rest == ([{'role': 'user'}],)\n",
    "default": "def check(initial, final, transcript=None):\n    return transcript == [{'role': 'user'}]\n",
    "keyword_only": "def check(initial, final, *, transcript=None):\n    return transcript is None\n",
    "two": "def check(initial, final):\n    return final['log'] == ['moved']\n",
    "with_attribute": (
        "def check(initial, final, transcript):\n    return transcript == [{'role': 'user'}]\n\n\ncheck.note = 'x'\n"
    ),
    "wrapped_two": (
        "import functools\n\n\ndef keep(function):\n    @functools.wraps(function)\n"
        "    def wrapper(*args):\n        return function(*args)\n    return wrapper\n\n\n"
        "@keep\ndef check(initial, final):\n    return final['log'] == ['moved']\n"
    ),
    "wrapped_three": (
        "import functools\n\n\ndef keep(function):\n    @functools.wraps(function)\n"
        "    def wrapper(*args):\n        return function(*args)\n    return wrapper\n\n\n"
        "@keep\ndef check(initial, final, transcript):\n    return transcript == [{'role': 'user'}]\n"
    ),
}


async def test_a_check_is_given_the_transcript_exactly_when_its_signature_takes_a_third_positional(pool):
    """As ``inspect.signature`` reads it: a third positional parameter (positional-only, with a default, or
    ``*args``) gets the transcript; a keyword-only one and a wrapper of a two-parameter function do not."""
    checks = [Check(id=name, description=name, source=source) for name, source in DECLARING_THE_TRANSCRIPT.items()]
    results = await pool.run_checks(checks, {"log": []}, {"log": ["moved"]}, [{"role": "user"}])
    assert {r.check_id: (r.passed, r.error) for r in results} == {
        name: (True, None) for name in DECLARING_THE_TRANSCRIPT
    }


def test_only_a_check_that_never_names_the_initial_state_skips_it():
    from harness.sandbox.check_runner import reads_parameter

    namespace: dict[str, object] = {}
    exec(
        "def check(initial, final):\n    import json\n    return json.dumps(final, sort_keys=True) == 'x'\n", namespace
    )
    assert not reads_parameter(namespace["check"], 0)
    assert reads_parameter(namespace["check"], 1)
    for name, source in READING_THE_INITIAL_STATE.items():
        namespace = {}
        exec(source, namespace)
        if "check" in namespace:  # check_func() reads the initial state as a global, always given
            assert reads_parameter(namespace["check"], 0), name
    for name, source in READING_THE_FINAL_STATE.items():
        namespace = {}
        exec(source, namespace)
        if "check" in namespace:
            assert reads_parameter(namespace["check"], 1), name
    namespace = {}
    exec("def check(initial, final, transcript):\n    return transcript == []\n", namespace)
    assert not reads_parameter(namespace["check"], 0) and not reads_parameter(namespace["check"], 1)


async def test_sessions_that_start_alike_share_one_read_state_and_others_do_not(pool):
    first = await pool.open_session(wallet(), STATE)
    second = await pool.open_session(wallet(), STATE)
    other = await pool.open_session(wallet(), {**STATE, "log": ["other"]})
    one, two, three = [await s.state(shared=True) for s in (first, second, other)]
    assert one is two and one == STATE
    assert three is not one and three["log"] == ["other"]
    # A reader that does not promise to leave the state alone gets its own object, and changing it reaches no one.
    own = await first.state()
    assert own == one and own is not one
    own["accounts"]["A"]["balance"] = 0
    await first.call(transfer(30))
    moved = await first.state(shared=True)
    assert moved is not one and moved["accounts"]["A"]["balance"] == 70
    assert (await second.state(shared=True))["accounts"]["A"]["balance"] == 100
    for session in (first, second, other):
        await session.close()


def record_opened_states(pool: SandboxPool) -> list[dict]:
    """The initial state of each session ``pool`` opens from now on, in order; the sessions open for real."""
    opened: list[dict] = []
    real_open = pool.open_session

    async def counted(environment, initial_state, **options):
        opened.append(initial_state)
        return await real_open(environment, initial_state, **options)

    pool.open_session = counted
    return opened


async def test_screening_opens_one_session_per_distinct_start_and_judges_each_scenario():
    from harness.validate import ResetSnapshots, screen_scenario

    broken = {"accounts": [], "log": []}  # a list: the checks at reset fail on it
    scenarios = [
        scenario(CHECKS[:3]).model_copy(update={"id": "a"}),
        scenario(CHECKS[:3]).model_copy(update={"id": "b", "initial_state": {**STATE}}),
        scenario(CHECKS[:3]).model_copy(update={"id": "c", "initial_state": broken}),
    ]
    async with JailSpec(workers=1).pool() as pool:
        opened = record_opened_states(pool)
        snapshots = ResetSnapshots()
        screened = await asyncio.gather(*(screen_scenario(pool, s, wallet(), snapshots) for s in scenarios))
    assert opened == [STATE, broken]
    (a, snapshot_a, at_reset_a), (b, snapshot_b, _), (c, snapshot_c, _) = screened
    assert snapshot_a is snapshot_b and snapshot_a == STATE and snapshot_c == broken
    assert a.ok and b.ok and [r.check_id for r in at_reset_a] == ["moved", "envscaler", "untouched"]
    assert not c.ok and "fails to run on the initial state" in c.problems[0]


async def test_screening_keeps_only_the_latest_snapshots():
    from harness.validate import ResetSnapshots, screen_scenario

    other = {**STATE, "log": ["other"]}
    starts = [STATE, other, STATE, STATE]
    async with JailSpec(workers=1).pool() as pool:
        opened = record_opened_states(pool)
        snapshots = ResetSnapshots(capacity=1)
        for number, start in enumerate(starts):
            item = scenario(CHECKS[:3]).model_copy(update={"id": f"s{number}", "initial_state": start})
            report, snapshot, _ = await screen_scenario(pool, item, wallet(), snapshots)
            assert report.ok and snapshot == start
    # One kept: the return to STATE after OTHER opens a session again; the next STATE does not.
    assert opened == [STATE, other, STATE]


async def test_only_starting_states_are_remembered_so_changed_states_do_not_push_them_out(pool):
    starting = await pool.open_session(wallet(), STATE)
    start = await starting.state(shared=True)
    moved = []
    for amount in range(1, 7):  # more changed states than the pool keeps
        session = await pool.open_session(wallet(), STATE)
        await session.call(transfer(amount))
        first, second = await session.state(shared=True), await session.state(shared=True)
        assert first == second and first is not second  # read after a call: looked up, never remembered
        moved.append(first["accounts"]["A"]["balance"])
        await session.close()
    assert moved == [99, 98, 97, 96, 95, 94]
    late = await pool.open_session(wallet(), STATE)
    assert await late.state(shared=True) is start
    for session in (starting, late):
        await session.close()


MANY_ATTRIBUTES = '''
class Ledger:
    def __init__(self, init_config: dict):
        for index in range(init_config.get("count", 0)):
            setattr(self, f"entry_{index:05d}", {"index": index, "note": "n" * 40})

    def touch(self, index: int) -> dict:
        """Change one entry.

        Args:
            index: The entry to change.
        """
        getattr(self, f"entry_{index:05d}")["note"] = "changed"
        return {"success": True}
'''


async def test_a_state_of_thousands_of_attributes_arrives_whole(pool):
    """A state reply is written in pieces, two per attribute (more than one ``writev`` takes); it arrives whole,
    in the instance's order, before and after a call."""
    environment = Environment(
        id="ledger",
        name="Ledger",
        class_name="Ledger",
        code=MANY_ATTRIBUTES,
        tools=derive_tools(MANY_ATTRIBUTES, "Ledger"),
    )
    session = await pool.open_session(environment, {"count": 3000})
    expected = {f"entry_{index:05d}": {"index": index, "note": "n" * 40} for index in range(3000)}
    state = await session.state()
    assert state == {"count": 3000, **expected}
    assert list(state) == [*expected, "count"]
    await session.call(ToolCall(id="t", name="touch", arguments={"index": 2999}))
    expected["entry_02999"]["note"] = "changed"
    assert await session.state() == {"count": 3000, **expected}
    await session.close()
