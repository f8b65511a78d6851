"""The harness trusts nothing a jailed process sends: sizes, nesting, numbers and error texts are bounded.

Each hostile tool below rewrites its own worker (it reaches ``harness.sandbox.runtime`` through an allowed module's
attribute and swaps the function that encodes its replies), so the frame the harness receives is whatever the
code chose: tens of megabytes, 500 levels deep, numbers JSON cannot carry, a 5 MB error text. Each must end as a
recorded error with its reason, and the run folder must stay readable by ``harness show`` and ``--resume``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from harness.library import write_seed_layout
from harness.results.metrics import read_results
from harness.results.store import ResultStore
from harness.sandbox import JailSpec, SandboxError, SandboxLimits, find_problems
from harness.schema import (
    Check,
    Environment,
    Observation,
    ObservationKind,
    ReferenceAction,
    Scenario,
    TerminationReason,
    ToolCall,
    Trajectory,
)
from harness.toolspec import derive_tools
from tests.support.cli_process import harness
from tests.support.trajectories import one_call_trajectory
from tests.support.unprivileged import open_to_ordinary_user, run_as_ordinary_user

FORGER = '''
import typing


def _runtime():
    return typing.sys.modules["harness.sandbox.runtime"]


def _forge(body, on_state=False):
    """The next reply (or the next state reply) this process sends is ``body``: its worker's encoder is swapped."""
    runtime = _runtime()
    honest = runtime._encode

    def forged(response):
        if on_state and not isinstance(response, (bytes, list)):  # a state reply: its text or its pieces
            return honest(response)
        runtime._encode = honest
        return body

    runtime._encode = forged


class Forger:
    def __init__(self, init_config: dict):
        self.counter = init_config.get("counter", 0)

    def bump(self) -> dict:
        """Increment the counter."""
        self.counter += 1
        return {"success": True, "data": self.counter}

    def huge_reply(self, megabytes: int = 30) -> dict:
        """Answer with a result of ``megabytes`` MB."""
        _forge(b'{"ok":true,"result":"' + b"x" * (megabytes << 20) + b'"}')
        return {"success": True}

    def deep_reply(self, depth: int = 500) -> dict:
        """Answer with a result nested ``depth`` levels deep."""
        _forge(b'{"ok":true,"result":' + b"[" * depth + b"]" * depth + b"}")
        return {"success": True}

    def raw_reply(self, body: str) -> dict:
        """Answer with ``body`` as it is."""
        _forge(body.encode())
        return {"success": True}

    def huge_error(self, megabytes: int = 5) -> dict:
        """Fail with an error text of ``megabytes`` MB."""
        _forge(b'{"ok":false,"kind":"tool_exception","error":"' + b"e" * (megabytes << 20) + b'"}')
        return {"success": True}

    def forge_state(self, body: str) -> dict:
        """The next state read answers ``body``."""
        _forge(body.encode(), on_state=True)
        return {"success": True}

    def big_number(self) -> dict:
        """Return an integer JSON cannot carry."""
        return {"success": True, "data": 2**70}
'''

BUMPED = "def check(initial_state, final_state):\n    return final_state['counter'] == initial_state['counter'] + 1\n"
CHECK_LIMIT_CHARS = 2_000


def forger() -> Environment:
    assert not find_problems(FORGER), find_problems(FORGER)
    return Environment(
        id="forger", name="Forger", class_name="Forger", code=FORGER, tools=derive_tools(FORGER, "Forger")
    )


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"call_{name}", name=name, arguments=dict(arguments))


def scenario(scenario_id: str, attack: str, **arguments: object) -> Scenario:
    return Scenario(
        id=scenario_id,
        environment_id="forger",
        initial_state={"counter": 0},
        task="Bump the counter once.",
        checks=[Check(id="bumped", description="counter bumped once", source=BUMPED)],
        reference_actions=[ReferenceAction(name=attack, arguments=dict(arguments)), ReferenceAction(name="bump")],
    )


def forger_library(root: Path, scenarios: list[Scenario]) -> Path:
    write_seed_layout([forger()], scenarios, root)
    return root


# --------------------------------------------------------------------------------------- the pool's reading


async def test_an_oversized_reply_is_refused_on_its_header_and_ends_only_its_session():
    async with JailSpec().pool() as pool:
        attacker = await pool.open_session(forger(), {"counter": 0}, record_diffs=False)
        bystander = await pool.open_session(forger(), {"counter": 5}, record_diffs=False)
        observation, diff = await attacker.call(call("huge_reply", megabytes=40))
        with pytest.raises(SandboxError, match="protocol violation"):
            await attacker.call(call("bump"))
        bystanding, _ = await bystander.call(call("bump"))
        await attacker.close()
        await bystander.close()
    assert observation.kind is ObservationKind.FORBIDDEN and observation.content is None and diff == []
    assert "reply of 41,943,0" in (observation.error or "") and "(limit 1,0" in (observation.error or "")
    assert bystanding.content["data"] == 6


async def test_an_oversized_result_beside_a_diff_is_an_error_observation_and_the_session_goes_on():
    async with JailSpec().pool() as pool:
        session = await pool.open_session(forger(), {"counter": 0})  # with diffs the frame may be larger
        observation, _ = await session.call(call("huge_reply", megabytes=30))
        bumped, _ = await session.call(call("bump"))
        await session.close()
    assert observation.kind is ObservationKind.BAD_RESULT and observation.content is None
    assert "the result has 31,457,2" in (observation.error or "") and "the limit is 1,000,000" in observation.error
    assert bumped.content["data"] == 1


async def test_a_result_500_levels_deep_is_an_error_observation_and_the_session_goes_on():
    async with JailSpec().pool() as pool:
        session = await pool.open_session(forger(), {"counter": 0})
        deep, _ = await session.call(call("deep_reply", depth=500))
        at_limit, _ = await session.call(call("deep_reply", depth=64))
        bumped, _ = await session.call(call("bump"))
        await session.close()
    assert deep.kind is ObservationKind.BAD_RESULT and deep.content is None
    assert "nests more than 64 levels deep" in (deep.error or "")
    assert at_limit.ok, at_limit.error
    assert bumped.content["data"] == 1


async def test_depth_items_and_string_limits_are_the_pools_own_settings():
    limits = SandboxLimits(max_result_depth=8, max_result_items=10, max_string_chars=100)
    many, long = "[" + ",".join(["0"] * 11) + "]", '"' + "s" * 101 + '"'
    async with JailSpec(limits=limits).pool() as pool:
        session = await pool.open_session(forger(), {"counter": 0})
        nine, _ = await session.call(call("deep_reply", depth=9))
        eight, _ = await session.call(call("deep_reply", depth=8))
        eleven_items, _ = await session.call(call("raw_reply", body='{"ok":true,"result":' + many + "}"))
        long_string, _ = await session.call(call("raw_reply", body='{"ok":true,"result":' + long + "}"))
        await session.close()
    assert nine.kind is ObservationKind.BAD_RESULT and "nests more than 8 levels deep" in (nine.error or "")
    assert eight.ok, eight.error
    assert "holds more than 10 keys and items" in (eleven_items.error or "")
    assert "holds a string of 101 characters; the limit is 100" in (long_string.error or "")


async def test_a_state_500_levels_deep_is_a_failed_state_read_with_the_reason():
    deep_state = '{"ok":true,"state":{"counter":' + "[" * 500 + "]" * 500 + "}}"
    async with JailSpec().pool() as pool:
        session = await pool.open_session(forger(), {"counter": 0})
        await session.call(call("forge_state", body=deep_state))
        with pytest.raises(SandboxError, match="reading the state failed: the state nests more than 96 levels"):
            await session.state()
        await session.close()


def large_state(extra: str) -> str:
    """A state reply of about 1.4 MB: 20,000 short strings, then ``extra`` (JSON) deep inside."""
    rows = ",".join(f'{{"name":"user {n}"}}' for n in range(20_000))
    return '{"ok":true,"state":{"rows":[' + rows + '],"deep":{"notes":[[' + extra + "]]}}}"


async def test_a_long_string_deep_in_a_large_state_is_refused_and_escaped_quotes_cannot_hide_one():
    # Within the limit: the state is read whole. One character more, directly or split by escaped quotes into
    # runs shorter than the limit, is refused.
    within = large_state('"' + "s" * 1_000_000 + '"')
    beyond = large_state('"' + "s" * 1_000_001 + '"')
    hidden = large_state('"' + "s" * 600_000 + '\\"' + "s" * 400_000 + '"')
    async with JailSpec().pool() as pool:
        session = await pool.open_session(forger(), {"counter": 0}, record_diffs=False)
        await session.call(call("forge_state", body=within))
        state = await session.state()
        refused = []
        for body in (beyond, hidden):
            await session.call(call("forge_state", body=body))
            with pytest.raises(SandboxError, match="reading the state failed") as failure:
                await session.state()
            refused.append(str(failure.value))
        await session.close()
    assert len(state["rows"]) == 20_000 and len(state["deep"]["notes"][0][0]) == 1_000_000
    assert "holds a string of 1,000,001 characters; the limit is 1,000,000" in refused[0]
    assert "holds a string of 1,000,001 characters; the limit is 1,000,000" in refused[1]


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_numbers_json_cannot_carry_are_refused_in_a_result_and_in_a_state(number: str):
    async with JailSpec().pool() as pool:
        session = await pool.open_session(forger(), {"counter": 0})
        observation, _ = await session.call(call("raw_reply", body='{"ok":true,"result":{"n":' + number + "}}"))
        await session.close()
        other = await pool.open_session(forger(), {"counter": 0})
        await other.call(call("forge_state", body='{"ok":true,"state":{"counter":' + number + "}}"))
        with pytest.raises(SandboxError, match="invalid JSON"):
            await other.state()
        await other.close()
    assert observation.kind is ObservationKind.FORBIDDEN and observation.content is None
    assert "invalid JSON" in (observation.error or "")


async def test_an_integer_beyond_64_bits_is_refused_with_the_reason():
    async with JailSpec().pool() as pool:
        session = await pool.open_session(forger(), {"counter": 0})
        observation, _ = await session.call(call("big_number"))
        await session.close()
    assert observation.kind is ObservationKind.BAD_RESULT and observation.content is None
    assert "64-bit" in (observation.error or "")


async def test_a_5_mb_error_text_is_cut_with_a_marker():
    async with JailSpec().pool() as pool:
        session = await pool.open_session(forger(), {"counter": 0})
        observation, _ = await session.call(call("huge_error", megabytes=5))
        await session.close()
    error = observation.error or ""
    assert observation.kind is ObservationKind.TOOL_EXCEPTION
    assert (
        error.startswith("e" * CHECK_LIMIT_CHARS)
        and f"[{(5 << 20) - CHECK_LIMIT_CHARS:,} more characters cut]" in error
    )
    assert len(error) < CHECK_LIMIT_CHARS + 100


async def test_check_answers_are_bounded_in_size_and_their_texts_are_cut():
    def forging_check(error_chars: int) -> Check:
        # The check writes its own answer, a frame for the batch's request (sequence 1), on the process's channel
        # and ends the process before the real answer: the harness reads only what the check forged.
        return Check(
            id=f"forged-{error_chars}",
            description="answers with a long error",
            source=(
                "import typing\n"
                "def check(initial_state, final_state):\n"
                "    os = typing.sys.modules['os']\n"
                "    stat = typing.sys.modules['stat']\n"
                '    body = b\'{"ok":true,"results":[{"passed":false,"value":null,"error":"\'\n'
                f"    body += b'e' * {error_chars} + b'\"}}]}}'\n"
                "    frame = len(body).to_bytes(4, 'little') + (1).to_bytes(4, 'little') + body\n"
                "    for fd in range(3, 64):\n"
                "        try:\n"
                "            if stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
                "                while frame:\n"
                "                    frame = frame[os.write(fd, frame):]\n"
                "                os._exit(0)\n"
                "        except OSError:\n"
                "            pass\n"
                "    return True\n"
            ),
        )

    async with JailSpec().pool() as pool:
        within = await pool.run_checks([forging_check(10_000)], {}, {})
        over = await pool.run_checks([forging_check(5 << 20)], {}, {})
    assert within[0].passed is False and "more characters cut]" in (within[0].error or "")
    assert len(within[0].error or "") < CHECK_LIMIT_CHARS + 100
    assert over[0].passed is False and "protocol violation" in (over[0].error or "") and "(limit" in over[0].error


# ------------------------------------------------------------------------------------------- the result store


def trajectory(episode_id: str, content: object) -> Trajectory:
    observation = Observation(tool_call_id="c1", name="bump", content=content)
    return one_call_trajectory(episode_id, observation, environment_id="forger")


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("content", [2**70, nested(150)], ids=["2**70", "150-deep"])
def test_a_record_that_would_not_read_back_is_stored_as_an_infra_error_saying_why(tmp_path: Path, content: object):
    path = tmp_path / "results.jsonl"
    store = ResultStore(path)
    store.append(trajectory("bad", {"n": content}))
    store.append(trajectory("good", {"n": 1}))
    store.close()
    stored = {t.episode_id: t for t in read_results(path)}
    assert stored["good"].steps[0].observation.content == {"n": 1}
    assert stored["bad"].termination is TerminationReason.INFRA_ERROR and stored["bad"].steps == []
    assert "could not be stored" in (stored["bad"].termination_detail or "")
    assert ResultStore(path).finished(retry_errors=True) == {"good"}


def test_numbers_json_cannot_carry_are_stored_as_null_and_read_back(tmp_path: Path):
    path = tmp_path / "results.jsonl"
    store = ResultStore(path)
    store.append(trajectory("floats", {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf")}))
    store.close()
    (stored,) = read_results(path)
    assert stored.steps[0].observation.content == {"nan": None, "inf": None, "ninf": None}


# ------------------------------------------------------------------------------------------ the user's commands


def hostile_run_scenarios() -> list[Scenario]:
    return [
        scenario("huge", "huge_reply", megabytes=30),
        scenario("deep", "deep_reply", depth=500),
        scenario("error", "huge_error", megabytes=5),
    ]


def first_observations(run_dir: Path) -> dict[str, Observation]:
    return {t.scenario_id: t.steps[0].observation for t in read_results(run_dir / "results.jsonl")}


def assert_refused_and_recorded(run_dir: Path, scenario_ids: list[str]) -> None:
    assert (run_dir / "results.jsonl").stat().st_size < 200_000
    observations = first_observations(run_dir)
    assert sorted(observations) == sorted(scenario_ids)
    assert "the result has 31,457,2" in (observations["huge"].error or "")
    assert "the result nests more than 64 levels deep" in (observations["deep"].error or "")
    assert all(observation.content is None for observation in observations.values())


def test_a_hostile_library_runs_to_the_end_and_its_run_folder_reads_back(tmp_path: Path):
    library = forger_library(tmp_path / "library", hostile_run_scenarios())
    run_dir = tmp_path / "run"
    ran = harness(["run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir)])
    assert ran.code == 0, ran.stdout + ran.stderr
    assert ran.last_line == "exit 0: all 3 episodes were scored"
    assert_refused_and_recorded(run_dir, ["huge", "deep", "error"])
    error = first_observations(run_dir)["error"].error or ""
    assert f"[{(5 << 20) - CHECK_LIMIT_CHARS:,} more characters cut]" in error and len(error) < CHECK_LIMIT_CHARS + 100
    deep_id = next(t.episode_id for t in read_results(run_dir / "results.jsonl") if t.scenario_id == "deep")

    shown = harness(["show", str(run_dir)])
    episode = harness(["show", str(run_dir), "--episode", deep_id])
    assert shown.code == 0 and "3 recorded of 3 planned" in shown.stdout, shown.stdout + shown.stderr
    assert episode.code == 0 and "nests more than 64 levels deep" in episode.stdout, episode.stdout + episode.stderr


def test_damaged_lines_are_reported_and_skipped_by_show_and_resume(tmp_path: Path):
    library = forger_library(tmp_path / "library", [scenario("deep", "deep_reply", depth=500)])
    run_dir = tmp_path / "run"
    ran = harness(["run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir)])
    assert ran.code == 0, ran.stdout + ran.stderr
    results = run_dir / "results.jsonl"
    (recorded,) = results.read_bytes().splitlines()
    over_deep = orjson.dumps({"episode_id": "x", "deep": nested(200)})
    results.write_bytes(b"not json at all\n" + over_deep + b"\n" + recorded + b"\n")

    shown = harness(["show", str(run_dir)])
    resumed = harness(["run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir), "--resume"])

    warned, resume_warned = " ".join(shown.stderr.split()), " ".join(resumed.stderr.split())  # lines wrap
    assert shown.code == 0 and "1 recorded of 1 planned" in shown.stdout, shown.stdout + shown.stderr
    assert "results.jsonl:1: skipping a line that is not a Trajectory" in warned
    assert "results.jsonl:2: skipping a line that is not a Trajectory: nests more than 128 levels" in warned
    assert resumed.code == 0, resumed.stdout + resumed.stderr
    assert "results.jsonl:2: skipping" in resume_warned and "0 to run, 1 already recorded" in resumed.stdout
    assert results.read_bytes().splitlines()[2] == recorded  # nothing removed, nothing run twice
    assert len(results.read_bytes().splitlines()) == 3


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder the ordinary user can enter for the whole test: outside pytest's base folder, whose mode another
    pytest process of the same user may reset to 0700 while this test runs."""
    folder = Path(tempfile.mkdtemp(prefix="harness-replies-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_an_ordinary_user_run_refuses_oversized_and_deep_replies(shared_folder: Path):
    library = forger_library(shared_folder / "library", hostile_run_scenarios()[:2])
    home = shared_folder / "home"
    home.mkdir()
    open_to_ordinary_user(shared_folder, home)
    run_dir = shared_folder / "run"
    harness_command = [sys.executable, "-m", "harness.cli"]
    ran = run_as_ordinary_user(
        [*harness_command, "run", "--envs", str(library), "--agent", "oracle", "--out", str(run_dir)], home
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "exit 0: all 2 episodes were scored" in ran.stdout
    assert_refused_and_recorded(run_dir, ["huge", "deep"])
    shown = run_as_ordinary_user([*harness_command, "show", str(run_dir)], home)
    assert shown.returncode == 0 and "2 recorded of 2 planned" in shown.stdout, shown.stdout + shown.stderr


async def test_a_refused_state_is_never_remembered_for_shared_readers():
    deep_state = '{"ok":true,"state":{"counter":' + "[" * 500 + "]" * 500 + "}}"
    async with JailSpec().pool() as pool:
        session = await pool.open_session(forger(), {"counter": 0})
        for _ in range(2):
            await session.call(call("forge_state", body=deep_state))
            with pytest.raises(SandboxError, match="reading the state failed: the state nests more than 96 levels"):
                await session.state(shared=True)
        await session.close()
