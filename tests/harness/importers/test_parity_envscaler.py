"""Parity with upstream EnvScaler's runtime: scripted action sequences on an EnvScaler-format environment.

Each case gives the reward upstream's runtime (``interact_with_env/``: ``envscaler_env/base_env.py``,
``utils/parse_util.py``, ``utils/env_util.py``, ``agent/task_solve_agent.py``) gives the sequence, with the
reason, worked out by reading that code; and the reward of our default ``harness`` rules. The episodes run
through the gym API (the reward a trainer gets) on the real sandbox, under both profiles.

The scenario has four checks in upstream's form (``check_func(final_state)`` with a global ``initial_state``).
At reset two hold (c3, c4) and two do not (c1, c2), so doing nothing earns 0.5.
  c1  B1 has one copy fewer than at reset
  c2  exactly one new loan, of B1 to M1             (reads ``initial_state["loans"]``: a constructor default)
  c3  B2 and the desk's branch are unchanged          (reads ``initial_state["branch"]``: a constructor default)
  c4  the configuration the desk was built from is kept (reads ``final_state["init_config"]``)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness.benchmarks.envscaler.importer import convert_environment, convert_scenario
from harness.gym import ToolEnv
from harness.library import Library
from harness.rules.protocols import UserTurn
from harness.sandbox import JailSpec, SandboxPool
from harness.schema import AgentSettings, DatasetRef, ModelSettings, Scenario
from harness.validate import screen_scenario

ENV_CODE = '''
from typing import Dict, TypedDict


class BookInfo(TypedDict):
    book_id: str
    title: str
    copies: int


class LibraryDesk:
    def __init__(self, init_config: dict):
        self.init_config = init_config
        self.books: Dict[str, BookInfo] = {}
        self.loans: Dict[str, dict] = {}
        self.branch = init_config.get("branch", "main")

    def get_book(self, book_id: str) -> dict:
        """Look a book up by id."""
        if book_id not in self.books:
            return {"success": False, "error": "Book not found"}
        return {"success": True, "data": self.books[book_id]}

    def lend_book(self, book_id: str, member_id: str) -> dict:
        """Lend one copy of a book to a member."""
        book = self.books.get(book_id)
        if book is None:
            return {"success": False, "error": "Book not found"}
        if book["copies"] < 1:
            return {"success": False, "error": "No copy left"}
        book["copies"] -= 1
        loan_id = "L" + str(len(self.loans) + 1)
        self.loans[loan_id] = {"loan_id": loan_id, "book_id": book_id, "member_id": member_id}
        return {"success": True, "message": "Loan " + loan_id + " created"}

    def set_copies(self, book_id: str, copies: int) -> dict:
        """Set how many copies of a book the desk holds."""
        if book_id not in self.books:
            return {"success": False, "error": "Book not found"}
        self.books[book_id]["copies"] = copies
        return {"success": True, "message": "Copies updated"}

    def move_copies(self, from_book_id: str, to_book_id: str, count: int) -> dict:
        """Move copies from one book record to another."""
        self.books[from_book_id]["copies"] -= count
        self.books[to_book_id]["copies"] += count
        return {"success": True, "message": "Moved"}
'''


def _tool(name: str, params: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": name.replace("_", " "),
            "parameters": {
                "type": "object",
                "properties": {p: {"type": t} for p, t in params.items()},
                "required": list(params),
            },
        },
    }


ENV_RECORD = {
    "env_id": "env_900_rl",
    "env_class_name": "LibraryDesk",
    "env_class_code": ENV_CODE,
    "environment_introduction": "A library lending desk.",
    "constraints_rules": ["A book with no copy left cannot be lent."],
    "tools": json.dumps(
        [
            _tool("get_book", {"book_id": "string"}),
            _tool("lend_book", {"book_id": "string", "member_id": "string"}),
            _tool("set_copies", {"book_id": "string", "copies": "integer"}),
            _tool("move_copies", {"from_book_id": "string", "to_book_id": "string", "count": "integer"}),
        ]
    ),
}

INIT_CONFIG = {
    "books": {
        "B1": {"book_id": "B1", "title": "Dune", "copies": 3},
        "B2": {"book_id": "B2", "title": "Emma", "copies": 2},
    }
}

CHECKS = [
    {
        "check_item": "B1 has one copy fewer",
        "check_func": "def check_func(final_state):\n"
        "    return final_state['books']['B1']['copies'] == initial_state['books']['B1']['copies'] - 1\n",
    },
    {
        "check_item": "One new loan, of B1 to M1",
        "check_func": "def check_func(final_state):\n"
        "    new = [l for k, l in final_state['loans'].items() if k not in initial_state['loans']]\n"
        "    return len(new) == 1 and new[0]['book_id'] == 'B1' and new[0]['member_id'] == 'M1'\n",
    },
    {
        "check_item": "B2 and the branch are unchanged",
        "check_func": "def check_func(final_state):\n"
        "    return final_state['books']['B2'] == initial_state['books']['B2'] "
        "and final_state['branch'] == initial_state['branch']\n",
    },
    {
        "check_item": "The starting configuration is kept",
        "check_func": "def check_func(final_state):\n"
        "    return final_state['init_config']['books']['B2']['title'] == 'Emma'\n",
    },
]


def _scenario(task_id: str, checks: list[dict[str, str]]) -> Scenario:
    record = {
        "env_id": "env_900_rl",
        "env_class_name": "LibraryDesk",
        "task_id": task_id,
        "init_config": json.dumps(INIT_CONFIG),
        "task": "Lend one copy of book B1 to member M1.",
        "checklist_with_func": json.dumps(checks),
    }
    return convert_scenario(record, 0)


ENVIRONMENT = convert_environment(ENV_RECORD)
SCENARIO = _scenario("env_900_rl-task_1", CHECKS)
THREE_CHECKS = _scenario("env_900_rl-task_2", CHECKS[:3])
LIBRARY = Library({ENVIRONMENT.id: ENVIRONMENT}, [SCENARIO, THREE_CHECKS], DatasetRef(source="parity"))


# ----------------------------------------------------------------------------------------- scripted turns


def call(name: str, arguments: Any, call_id: str = "") -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{name}", "type": "function", "function": {"name": name, "arguments": text}}


def calls(*entries: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(entries)}


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


LEND = call("lend_book", {"book_id": "B1", "member_id": "M1"})
DONE = say("Task Completed")


@dataclass(frozen=True)
class Case:
    name: str
    turns: list[dict[str, Any]]
    upstream: float
    upstream_reason: str
    harness: float
    harness_reason: str
    max_steps: int | None = None
    scenario: Scenario = field(default_factory=lambda: SCENARIO)
    termination: dict[str, str] = field(default_factory=dict)


CASES = [
    Case(
        "solved",
        [calls(LEND), DONE],
        1.0,
        "the call runs; the plain reply is chat_with_user, which ends a non-conversational episode and scores 4/4",
        1.0,
        "same",
        termination={"envscaler": "agent_done", "harness": "agent_done"},
    ),
    Case(
        "do nothing",
        [DONE],
        0.5,
        "c3 and c4 already hold on the state after construction: 2/4",
        0.5,
        "same: checks see the reset snapshot, so c2 and c3 read the constructor's defaults without a KeyError",
    ),
    Case(
        "a tool raises after changing the state",
        [calls(call("move_copies", {"from_book_id": "B1", "to_book_id": "B9", "count": 1})), DONE],
        0.0,
        "KeyError('B9') after B1 lost a copy: step() catches it, terminated=True, reward stays 0, no checks run",
        0.75,
        "an error observation; the episode goes on and the partial change is scored: c1, c3, c4 hold (3/4)",
        termination={"envscaler": "tool_exception", "harness": "agent_done"},
    ),
    Case(
        "a wrong argument type reaches the method",
        [calls(call("set_copies", {"book_id": "B2", "copies": "2"})), DONE],
        0.25,
        "method(**args) gets copies='2' and stores the string: c3 fails, only c4 holds (1/4)",
        0.5,
        "the schema refuses a string for an integer; nothing changes: 2/4",
    ),
    Case(
        "a wrong argument type makes the method raise",
        [calls(call("move_copies", {"from_book_id": "B2", "to_book_id": "B1", "count": "1"})), DONE],
        0.0,
        "int -= str raises TypeError before any change: the episode ends with reward 0",
        0.5,
        "the schema refuses the call; nothing changes: 2/4",
    ),
    Case(
        "an unknown keyword",
        [calls(call("lend_book", {"book": "B1", "member_id": "M1"})), calls(LEND), DONE],
        0.0,
        "lend_book(book=...) raises TypeError (unexpected keyword): the episode ends with reward 0",
        1.0,
        "an invalid-arguments observation; the agent retries correctly: 4/4",
    ),
    Case(
        "two calls in one turn",
        [calls(LEND, call("lend_book", {"book_id": "B1", "member_id": "M2"}, "call_second")), DONE],
        1.0,
        "parse_action takes tool_calls[0] only: one loan to M1, 4/4",
        0.5,
        "both calls run: B1 lost two copies and there are two loans, so c1 and c2 fail: 2/4",
    ),
    Case(
        "an empty turn",
        [say(""), calls(LEND), DONE],
        1.0,
        "no content and no tool call is a parse failure: an error user message, the episode goes on: 4/4",
        0.5,
        "an empty reply is a final answer: the episode ends before the loan, 2/4",
    ),
    Case(
        "the step limit",
        [calls(LEND), calls(call("get_book", {"book_id": "B1"}))],
        0.0,
        "run() stops at max_steps with terminated=False: no reward is ever computed, total_reward stays 0",
        1.0,
        "an episode cut at the step limit is still scored on its final state: 4/4",
        max_steps=2,
        termination={"envscaler": "max_steps", "harness": "max_steps"},
    ),
    Case(
        "an unknown tool name",
        [calls(call("renew_loan", {"loan_id": "L1"})), calls(LEND), DONE],
        1.0,
        "hasattr fails: 'Error: Invalid action' as a user message, the episode goes on: 4/4",
        1.0,
        "an unknown-tool observation, the episode goes on: 4/4",
    ),
    Case(
        "a state attribute called as a tool",
        [calls(call("books", {})), calls(LEND), DONE],
        0.0,
        "hasattr passes, then calling the dict raises TypeError: the episode ends with reward 0",
        1.0,
        "an unknown-tool observation, the episode goes on: 4/4",
    ),
    Case(
        "a tool reports failure",
        [calls(call("get_book", {"book_id": "B9"})), calls(LEND), DONE],
        1.0,
        "{'success': False, ...} is an ordinary tool result: 4/4",
        1.0,
        "same",
    ),
    Case(
        "text alongside a tool call",
        [calls(LEND, content="Lending the book now."), DONE],
        1.0,
        "with both content and tool calls, parse_action ignores the text and runs the call: 4/4",
        1.0,
        "same",
    ),
    Case(
        "arguments that are not JSON",
        [calls(call("lend_book", '{"book_id": "B1", "member_id": ')), calls(LEND), DONE],
        1.0,
        "json.loads fails inside parse_action: a parse-failure user message, the episode goes on: 4/4",
        1.0,
        "an invalid-arguments observation, the episode goes on: 4/4",
    ),
    Case(
        "rounding to 4 decimals",
        [DONE],
        0.3333,
        "one of three checks holds at reset: round(1/3, 4)",
        1 / 3,
        "not rounded",
        scenario=THREE_CHECKS,
    ),
    Case(
        "a reply through the upstream reply action",
        [calls(LEND), calls(call("chat_with_user", {"content": "Task Completed"}))],
        1.0,
        "a tool call named chat_with_user is the reply action: it ends the episode and scores 4/4",
        1.0,
        "an unknown-tool observation; then the step limit (2) cuts the episode, which is still scored: 4/4",
        max_steps=2,
        termination={"envscaler": "agent_done", "harness": "max_steps"},
    ),
]


@pytest.fixture
async def pool():
    async with JailSpec(workers=1).pool() as sandbox:
        yield sandbox


async def play(pool: SandboxPool, case: Case, rules: str) -> tuple[float, dict[str, Any], list[dict[str, Any]]]:
    env = ToolEnv(LIBRARY, pool=pool, rules=rules, max_steps=case.max_steps)
    await env.reset(case.scenario)
    for turn in case.turns:
        result = await env.step(turn)
        if result.terminated or result.truncated:
            return result.reward, result.info, result.messages
    raise AssertionError(f"{case.name}: the episode did not end after the scripted turns")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_envscaler_rules_give_upstream_reward(pool, case: Case) -> None:
    reward, info, _ = await play(pool, case, "envscaler")
    assert reward == case.upstream, f"{case.name}: upstream gives {case.upstream} because {case.upstream_reason}"
    if "envscaler" in case.termination:
        assert info["termination"] == case.termination["envscaler"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_harness_rules_keep_their_documented_reward(pool, case: Case) -> None:
    reward, info, _ = await play(pool, case, "harness")
    assert reward == pytest.approx(case.harness), f"{case.name}: {case.harness_reason}"
    if "harness" in case.termination:
        assert info["termination"] == case.termination["harness"]


async def test_envscaler_transcript_matches_upstream_format(pool) -> None:
    turns = [
        calls(call("get_book", {"book_id": "B1"})),
        say(""),
        calls(call("renew_loan", {})),
        calls(LEND, call("get_book", {"book_id": "B2"}, "call_extra")),
        DONE,
    ]
    _, info, messages = await play(pool, Case("format", turns, 1.0, "", 1.0, ""), "envscaler")
    system = messages[0]["content"]
    assert "Task Completed" in system and "one tool call per step" in system
    assert "A library lending desk." in system and "- A book with no copy left cannot be lent." in system
    tool_results = [m for m in messages if m["role"] == "tool"]
    # Upstream shows a tool result as the Python str() of the returned dict.
    assert tool_results[0]["content"] == "{'success': True, 'data': {'book_id': 'B1', 'title': 'Dune', 'copies': 3}}"
    assert [m["content"] for m in messages if m["role"] == "user"][1:] == [
        "Error: Failed to parse response to action",
        "Error: Invalid action",
    ]
    # Only the first call of the two-call turn ran and got a result.
    assert [m["tool_call_id"] for m in tool_results] == ["call_get_book", "call_lend_book"]
    assert len(info["trajectory"].steps) == 2
    assert info["rules"] == "envscaler" and len(info["check_results"]) == 4


async def test_raising_tool_is_reported_to_the_agent_and_recorded(pool) -> None:
    case = CASES[2]
    _, info, messages = await play(pool, case, "envscaler")
    assert messages[-1]["role"] == "user" and messages[-1]["content"].startswith("Error: <Exception>")
    assert "KeyError" in messages[-1]["content"]
    trajectory = info["trajectory"]
    assert trajectory.termination.value == "tool_exception" and trajectory.reward.state_reward == 0.0
    assert info["check_results"] == []  # upstream runs no checks on this ending
    # The partial change is on record even though the reward is 0.
    assert any(d.path[:3] == ["books", "B1", "copies"] for d in trajectory.final_state_diff)


async def test_checks_read_constructor_defaults_and_init_config_at_reset(pool) -> None:
    report, snapshot, at_reset = await screen_scenario(pool, SCENARIO, ENVIRONMENT)
    assert report.ok, report.problems
    assert snapshot is not None and snapshot["loans"] == {} and snapshot["branch"] == "main"
    assert "init_config" in snapshot
    assert [(r.check_id, r.passed, r.error) for r in at_reset] == [
        ("c1", False, None),
        ("c2", False, None),
        ("c3", True, None),
        ("c4", True, None),
    ]
    for rules in ("envscaler", "harness"):
        _, info, _ = await play(pool, CASES[1], rules)
        assert all(r["error"] is None for r in info["check_results"]), info["check_results"]
        assert [r["passed_at_reset"] for r in info["check_results"]] == [False, False, True, True]


class StopOnSecondReply:
    """Says the task, answers the first reply with a transfer request and the second with the stop token."""

    settings = AgentSettings(kind="simulated_user", role="user", model=ModelSettings(model="scripted"))

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn:
        replies = sum(1 for m in messages if m["role"] == "user") - 1
        if replies == 0:
            return UserTurn(text="Please lend B1 to member M1.")
        if replies == 1:
            return UserTurn(text="Can I talk to a person? ###TRANSFER###", stop_token="###TRANSFER###")
        return UserTurn(text="Thanks. ###STOP###", stop_token="###STOP###")


@pytest.mark.parametrize(("rules", "user_turns"), [("envscaler", 3), ("harness", 2)])
async def test_conversation_ends_on_the_profiles_stop_tokens(pool, rules: str, user_turns: int) -> None:
    """Upstream ends a conversation only on ###STOP###; our default also on ###TRANSFER###."""
    env = ToolEnv(LIBRARY, pool=pool, mode="conv", user=StopOnSecondReply(), rules=rules)
    await env.reset(SCENARIO)
    for turn in [calls(LEND), say("Done."), say("I cannot transfer you, sorry.")]:
        result = await env.step(turn)
        if result.terminated or result.truncated:
            break
    assert result.terminated and result.info["termination"] == "user_stop"
    assert sum(1 for m in result.messages if m["role"] == "user") == user_turns
    assert result.reward == 1.0
