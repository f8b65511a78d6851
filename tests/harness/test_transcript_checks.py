"""Checks on what the agent said: the helpers, their injection into checks run in the sandbox, the seed
library's refusals under both episode rules, and validate's rule that silence must not succeed."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agents.oracle import OracleAgent
from harness.cli import app
from harness.episode.config import EpisodeConfig
from harness.episode.loop import run_episode
from harness.library import load_library, write_seed_layout
from harness.rules.protocols import AgentTurn, tool_calls_from_message
from harness.sandbox import JailSpec
from harness.schema import AgentSettings, Check, Environment, ModelSettings, ReferenceAction, Scenario
from harness.scoring.checks import prepared_checks
from harness.scoring.transcript_checks import HELPER_SOURCE, asked_user, said_any, told_user, with_helpers
from harness.toolspec import derive_tools

LIBRARY = load_library()
REFUSALS = [s for s in LIBRARY.scenarios if "transcript-check" in s.tags]

TOOL_ONLY_TURN = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}],
}
TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "user", "content": "Cancel order O-1005, and refund the 1,035.50 you charged."},
    TOOL_ONLY_TURN,
    {"role": "tool", "tool_call_id": "c1", "content": '{"status": "shipped", "order_id": "O-1005"}'},
    {"role": "assistant", "content": "Which address should the return label go to?"},
    {"role": "user", "content": "Home."},
    {"role": "assistant", "content": "Sorry, I can't cancel O-1005: it has shipped. I refunded $1035.5."},
]


def test_said_any_reads_only_the_agents_text() -> None:
    assert said_any(TRANSCRIPT, ["CAN'T   cancel"])
    assert said_any(TRANSCRIPT, "has shipped")
    assert not said_any(TRANSCRIPT, ["Home"])  # the user's words
    assert not said_any(TRANSCRIPT, ['"status": "shipped"'])  # a tool result
    assert not said_any([TOOL_ONLY_TURN], ["get_order"])  # a tool-only turn has no text
    assert not said_any([], ["sorry"]) and not said_any(TRANSCRIPT, [])


def test_told_user_matches_ids_as_tokens_and_numbers_however_written() -> None:
    assert told_user(TRANSCRIPT, "o-1005")
    assert not told_user(TRANSCRIPT, "O-100")  # a prefix of the id is not the id
    assert told_user(TRANSCRIPT, 1035.5) and told_user(TRANSCRIPT, -1035.50)
    assert not told_user(TRANSCRIPT, 1035.6)
    assert not told_user(TRANSCRIPT[:3], "O-1005")  # only the user and a tool result said it


def test_asked_user_finds_questions_and_their_subject() -> None:
    assert asked_user(TRANSCRIPT)
    assert asked_user(TRANSCRIPT, about=["address"])
    assert not asked_user(TRANSCRIPT, about="phone")
    assert not asked_user([TRANSCRIPT[0], TOOL_ONLY_TURN])


def test_helpers_are_appended_only_to_checks_that_call_them() -> None:
    plain = "def check(initial_state, final_state):\n    return True\n"
    assert with_helpers(plain) == plain
    uses = "def check(initial_state, final_state, transcript):\n    return said_any(transcript, ['x'])\n"
    prepared = with_helpers(uses)
    assert prepared.startswith(uses.rstrip("\n")) and prepared.endswith(HELPER_SOURCE)


async def test_helpers_run_in_the_sandbox_and_pass_its_static_checks() -> None:
    checks = [
        Check(
            id="refused",
            description="",
            source="def check(i, f, transcript):\n    return said_any(transcript, 'sorry')\n",
        ),
        Check(id="named", description="", source="def check(i, f, t):\n    return told_user(t, 'O-1005')\n"),
        Check(id="asked", description="", source="def check(i, f, t):\n    return asked_user(t, 'address')\n"),
        Check(id="silent", description="", source="def check(i, f, t):\n    return said_any(t, 'refund')\n"),
        Check(id="error", description="", source="def check(i, f, t):\n    return said_any(t)\n"),
    ]
    async with JailSpec(workers=1).pool() as pool:
        for check in prepared_checks(checks):
            assert pool.static_problems(check.source) == []
        results = await pool.run_checks(prepared_checks(checks), {}, {}, transcript=TRANSCRIPT)
        silent = await pool.run_checks(prepared_checks(checks), {}, {}, transcript=[TRANSCRIPT[0], TOOL_ONLY_TURN])
    assert [r.passed for r in results] == [True, True, True, True, False]
    assert results[4].error is not None and "said_any" in results[4].error  # a wrong call is recorded, not raised
    assert [r.passed for r in silent] == [False, False, False, False, False]


# ------------------------------------------------------------------------------------------ seed refusals


def test_every_seed_environment_has_a_refusal_scored_on_the_transcript() -> None:
    assert {s.environment_id for s in REFUSALS} == set(LIBRARY.environments)
    for scenario in REFUSALS:
        assert scenario.reference_reply
        assert any("transcript" in c.source.split(":")[0] for c in scenario.checks), scenario.id


class Scripted:
    """Plays fixed assistant messages: tool-only turns, then a reply."""

    settings = AgentSettings(kind="scripted", model=ModelSettings(model="scripted"))

    def __init__(self, messages: list[dict[str, Any]]):
        self.messages = messages

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        turn = sum(1 for m in messages if m["role"] == "assistant")
        message = self.messages[min(turn, len(self.messages) - 1)]
        return AgentTurn(message=message, tool_calls=tool_calls_from_message(message))


def lookup_then(scenario: Scenario, reply: str) -> Scripted:
    action = scenario.reference_actions[0]
    call = {
        "id": "c0",
        "type": "function",
        "function": {"name": action.name, "arguments": json.dumps(action.arguments)},
    }
    return Scripted(
        [{"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "assistant", "content": reply}]
    )


@pytest.mark.parametrize("rules", ["harness", "envscaler"])
async def test_refusals_need_the_right_words_not_just_no_change(rules: str) -> None:
    """Doing nothing and saying nothing useful no longer succeeds; the reference refusal does."""
    async with JailSpec(workers=2).pool() as pool:
        for scenario in REFUSALS[:4]:
            environment = LIBRARY.environments[scenario.environment_id]

            async def play(agent: Any, scenario: Scenario = scenario, environment: Environment = environment) -> Any:
                return await run_episode(
                    scenario,
                    environment,
                    pool=pool,
                    agent=agent,
                    config=EpisodeConfig(rules=rules),
                    episode_id=scenario.id,
                )

            oracle = await play(OracleAgent(scenario))
            silent = await play(lookup_then(scenario, "Task Completed"))
            assert oracle.reward.success and oracle.reward.composite == 1.0, (scenario.id, oracle.check_results)
            assert [r.passed for r in silent.check_results] == [True, False, False]
            expected = 0.3333 if rules == "envscaler" else pytest.approx(1 / 3)
            assert silent.reward.state_reward == expected
            # The tool result names the order and its status, but only the agent's own words count.
            assert [r.passed_at_reset for r in silent.check_results] == [True, False, False]


@pytest.mark.parametrize("rules", ["harness", "envscaler"])
async def test_a_refusal_that_still_changes_the_state_fails(rules: str) -> None:
    scenario = next(s for s in REFUSALS if s.environment_id == "library_circulation")
    environment = LIBRARY.environments[scenario.environment_id]
    pay = {
        "id": "p",
        "type": "function",
        "function": {"name": "pay_fine", "arguments": '{"fine_id": "F-2", "amount": 1.0}'},
    }
    agent = Scripted(
        [
            {"role": "assistant", "content": None, "tool_calls": [pay]},
            {"role": "assistant", "content": scenario.reference_reply},
        ]
    )
    async with JailSpec(workers=1).pool() as pool:
        trajectory = await run_episode(
            scenario,
            environment,
            pool=pool,
            agent=agent,
            config=EpisodeConfig(rules=rules),
            episode_id="x",
        )
    assert [r.passed for r in trajectory.check_results] == [False, True, True]
    assert not trajectory.reward.success


# -------------------------------------------------------------------------------------------- validate

CODE = '''
class Box:
    def __init__(self, init_config: dict):
        self.items = init_config.get("items", {})

    def peek(self, key: str) -> dict:
        """Read an item.

        Args:
            key: The item.
        """
        return {"success": True, "data": self.items.get(key)}
'''

UNCHANGED = Check(id="same", description="", source="def check(i, f):\n    return f == i\n")
TOLD = Check(id="told", description="", source="def check(i, f, t):\n    return said_any(t, ['cannot'])\n")


def refusal(scenario_id: str, checks: list[Check], reply: str | None) -> Scenario:
    return Scenario(
        id=scenario_id,
        environment_id="box",
        initial_state={"items": {"a": 1}},
        task="Delete item a.",
        checks=checks,
        reference_actions=[ReferenceAction(name="peek", arguments={"key": "a"})],
        reference_reply=reply,
    )


def test_validate_marks_a_refusal_that_silence_would_pass_as_invalid(tmp_path) -> None:
    box = Environment(id="box", name="Box", class_name="Box", code=CODE, tools=derive_tools(CODE, "Box"))
    scenarios = [
        refusal("state-only", [UNCHANGED], "I cannot delete items."),
        refusal("with-transcript", [UNCHANGED, TOLD], "I cannot delete items."),
        refusal("reply-misses", [UNCHANGED, TOLD], "Done."),
    ]
    write_seed_layout([box], scenarios, tmp_path)
    result = CliRunner().invoke(app, ["validate", str(tmp_path), "--json"])
    records = {r["id"]: r for r in orjson.loads(result.stdout)["records"]}
    assert "at reset and on an empty transcript" in " ".join(records["state-only"]["problems"])
    assert records["with-transcript"]["ok"], records["with-transcript"]
    assert "do not reach success" in " ".join(records["reply-misses"]["problems"])
    assert result.exit_code == 1
