"""BFCL multi-turn scoring: scripted agents on real imported entries, each case with the outcome BFCL's checker
(bfcl-eval 2026.3.23, ``multi_turn_checker``) gives it and the rule that decides it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agents.scripted_user import ScriptedUser
from harness.episode.config import EpisodeConfig
from harness.episode.loop import run_episode
from harness.library import Library, load_library
from harness.rules.protocols import AgentTurn, openai_tool_call
from harness.sandbox import JailSpec
from harness.schema import AgentSettings, ModelSettings, Scenario, TerminationReason, ToolCall, Trajectory

Call = tuple[str, dict[str, Any]]
Plan = Callable[[int, list[Call]], list[list[Call]]]
"""(turn index, the turn's ground-truth calls) → the agent's steps in that turn (each step: calls in one message)."""


def current_turn(messages: list[dict[str, Any]], scenario: Scenario) -> tuple[int, int]:
    """The scripted turn under way and the index of the message that opened it."""
    turn, start = -1, 0
    for position, message in enumerate(messages):
        if message.get("role") != "user" or turn + 1 >= len(scenario.turns):
            continue
        if message.get("content") == scenario.turns[turn + 1].content:
            turn, start = turn + 1, position
    return turn, start


@dataclass
class PlannedAgent:
    """Plays a plan per turn, one step per agent turn, then ends the turn with a text reply."""

    scenario: Scenario
    plan: Plan
    settings: AgentSettings = field(
        default_factory=lambda: AgentSettings(kind="planned", model=ModelSettings(model="planned"))
    )

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        turn, start = current_turn(messages, self.scenario)
        truth = [(a.name, dict(a.arguments)) for a in self.scenario.turns[turn].reference_actions]
        steps = self.plan(turn, truth)
        done = sum(1 for m in messages[start:] if m.get("role") == "assistant" and m.get("tool_calls"))
        if done >= len(steps) or not steps[done]:
            return AgentTurn(message={"role": "assistant", "content": "Done."})
        calls = [ToolCall(id=f"c{len(messages)}_{i}", name=n, arguments=a) for i, (n, a) in enumerate(steps[done])]
        message = {"role": "assistant", "content": None, "tool_calls": [openai_tool_call(c) for c in calls]}
        return AgentTurn(message=message, tool_calls=calls)


def ground_truth(turn: int, truth: list[Call]) -> list[list[Call]]:
    return [truth] if truth else []


def nothing(turn: int, truth: list[Call]) -> list[list[Call]]:
    return []


@pytest.fixture(scope="module")
def library(bfcl_library: Path) -> Library:
    return load_library(bfcl_library)


async def play(library: Library, scenario_id: str, plan: Plan, seed: int = 0) -> Trajectory:
    scenario = next(s for s in library.scenarios if s.id == scenario_id)
    async with JailSpec(workers=1).pool() as pool:
        return await run_episode(
            scenario,
            library.environments[scenario.environment_id],
            pool=pool,
            agent=PlannedAgent(scenario, plan),
            user=ScriptedUser(scenario),
            config=EpisodeConfig(mode="conv", seed=seed),
            episode_id=f"{scenario_id}-test",
        )


def verdicts(trajectory: Trajectory) -> dict[str, bool]:
    return {result.check_id: result.passed for result in trajectory.check_results}


def replace_in_turn(turn_index: int, change: Callable[[list[Call]], list[list[Call]]]) -> Plan:
    def plan(turn: int, truth: list[Call]) -> list[list[Call]]:
        return change(truth) if turn == turn_index else ground_truth(turn, truth)

    return plan


# multi_turn_base_0 (GorillaFileSystem + TwitterAPI), ground truth per turn:
#   0: cd(document), mkdir(temp), mv(final_report.pdf → temp)   1: cd(temp), grep(final_report.pdf, 'budget analysis')
#   2: sort(final_report.pdf)   3: cd(..), mv(previous_report.pdf → temp), cd(temp), diff(final, previous)


async def test_the_ground_truth_passes_every_turn(library: Library) -> None:
    trajectory = await play(library, "multi_turn_base_0", ground_truth)
    assert trajectory.termination is TerminationReason.USER_STOP
    assert verdicts(trajectory) == {"turn_0": True, "turn_1": True, "turn_2": True, "turn_3": True}
    assert trajectory.reward is not None and trajectory.reward.success and trajectory.reward.state_reward == 1.0


async def test_doing_nothing_fails_every_turn_with_calls(library: Library) -> None:
    # Rule: a turn whose ground truth has calls fails when the model made no decodable call in it.
    trajectory = await play(library, "multi_turn_base_0", nothing)
    assert set(verdicts(trajectory).values()) == {False}
    assert all(r.value == "no function call in this turn" for r in trajectory.check_results)
    assert trajectory.reward is not None and trajectory.reward.state_reward == 0.0 and not trajectory.reward.success


async def test_one_wrong_argument_fails_on_state(library: Library) -> None:
    # Rule: every public attribute must equal the ground truth's after the turn; mkdir('tmp') leaves another tree.
    def wrong(truth: list[Call]) -> list[list[Call]]:
        return [[(n, {"dir_name": "tmp"} if n == "mkdir" else a) for n, a in truth]]

    trajectory = await play(library, "multi_turn_base_0", replace_in_turn(0, wrong))
    assert verdicts(trajectory)["turn_0"] is False
    assert "state differs" in (trajectory.check_results[0].value or "")
    assert trajectory.reward is not None and not trajectory.reward.success


async def test_a_missing_read_fails_on_the_response(library: Library) -> None:
    # Rule: the turn's ground-truth results must appear among the model's results; grep changes no state, so
    # only the response check catches its absence. Later turns still pass (per-turn accuracy 3/4).
    trajectory = await play(
        library, "multi_turn_base_0", replace_in_turn(1, lambda t: [[c for c in t if c[0] != "grep"]])
    )
    assert verdicts(trajectory) == {"turn_0": True, "turn_1": False, "turn_2": True, "turn_3": True}
    assert "ground-truth result" in (trajectory.check_results[1].value or "")
    assert trajectory.reward is not None and trajectory.reward.state_reward == 0.75 and not trajectory.reward.success


async def test_an_extra_harmless_read_still_passes(library: Library) -> None:
    # Rule: extra results do not matter (containment, not equality), and ls() changes no public attribute.
    trajectory = await play(library, "multi_turn_base_0", replace_in_turn(1, lambda t: [[("ls", {}), *t]]))
    assert trajectory.reward is not None and trajectory.reward.success


async def test_calls_in_another_order_that_reach_the_same_state_pass(library: Library) -> None:
    # multi_turn_base_106 turn 0: get_stock_info(AAPL), place_order(...). Rule: results are compared in any order.
    trajectory = await play(library, "multi_turn_base_106", replace_in_turn(0, lambda t: [list(reversed(t))]))
    assert verdicts(trajectory)["turn_0"] is True
    assert trajectory.reward is not None and trajectory.reward.success


async def test_work_done_in_an_earlier_turn_counts(library: Library) -> None:
    # Rule: the response check is cumulative over all the model's results so far, and the file system's current
    # directory is private (not compared): doing turn 1's cd+grep in turn 0, then only pwd() in turn 1, passes.
    def plan(turn: int, truth: list[Call]) -> list[list[Call]]:
        if turn == 0:
            return [
                [
                    *truth,
                    ("cd", {"folder": "temp"}),
                    ("grep", {"file_name": "final_report.pdf", "pattern": "budget analysis"}),
                ]
            ]
        if turn == 1:
            return [[("pwd", {})]]
        return ground_truth(turn, truth)

    trajectory = await play(library, "multi_turn_base_0", plan)
    assert trajectory.reward is not None and trajectory.reward.success, trajectory.check_results


async def test_a_float_for_an_integer_keeps_the_state_but_not_the_response(library: Library) -> None:
    # multi_turn_base_102 turn 0: place_order(..., price=700, amount=100). Arguments are never coerced by the
    # schema: 100.0 stores an order equal in value (state passes) but its result text differs (response fails).
    def as_float(truth: list[Call]) -> list[list[Call]]:
        return [[(n, {**a, "amount": float(a["amount"])} if n == "place_order" else a) for n, a in truth]]

    trajectory = await play(library, "multi_turn_base_102", replace_in_turn(0, as_float))
    first = trajectory.check_results[0]
    assert first.check_id == "turn_0" and not first.passed
    assert "ground-truth result" in (first.value or "")


async def test_a_float_dict_key_equals_the_integer_key_as_under_python_equality(library: Library) -> None:
    # multi_turn_base_52 turn 3: comment(tweet_id=10, ...) stores the comments under the key tweet_id. With 10.0
    # the model's TwitterAPI.comments is {10.0: [...]} and the ground truth's {10: [...]}; BFCL compares them with
    # != on the live objects, where 10.0 == 10 and the dicts are equal (as JSON, their keys "10.0" and "10" differ).
    def as_float(truth: list[Call]) -> list[list[Call]]:
        return [[(n, {**a, "tweet_id": float(a["tweet_id"])} if n == "comment" else a) for n, a in truth]]

    trajectory = await play(library, "multi_turn_base_52", replace_in_turn(3, as_float))
    assert verdicts(trajectory) == {"turn_0": True, "turn_1": True, "turn_2": True, "turn_3": True}
    assert trajectory.reward is not None and trajectory.reward.success
    comment = next(
        c for m in trajectory.messages for c in m.get("tool_calls") or [] if c["function"]["name"] == "comment"
    )
    assert '"tweet_id": 10.0' in comment["function"]["arguments"]


async def test_a_text_dict_key_differs_from_the_integer_key(library: Library) -> None:
    # The converse: where Python's == says unequal, the turn fails. comment(tweet_id="10") is refused by the
    # tool ("10" is not a key of tweets), so no comment is stored and TwitterAPI.comments differs.
    def as_text(truth: list[Call]) -> list[list[Call]]:
        return [[(n, {**a, "tweet_id": str(a["tweet_id"])} if n == "comment" else a) for n, a in truth]]

    trajectory = await play(library, "multi_turn_base_52", replace_in_turn(3, as_text))
    last = trajectory.check_results[-1]
    assert last.check_id == "turn_3" and not last.passed
    assert "TwitterAPI.comments" in (last.value or "")


async def test_a_raising_call_is_a_result_and_the_conversation_goes_on(library: Library) -> None:
    # Rule: a call that raises yields "Error during execution: ..." as its result; the entry can still pass.
    trajectory = await play(
        library, "multi_turn_base_0", replace_in_turn(0, lambda t: [[("cd", {"folder": "document", "depth": 2})], t])
    )
    first = trajectory.steps[0].observation
    assert isinstance(first.content, str) and first.content.startswith("Error during execution: ")
    assert "unexpected keyword argument 'depth'" in first.content
    assert trajectory.reward is not None and trajectory.reward.success


async def test_calls_in_a_turn_without_ground_truth_change_the_next_turn(library: Library) -> None:
    # multi_turn_miss_func_0: turn 2 has empty ground truth (sort is withheld until turn 3). Rule: it is not
    # judged, but its calls still run: an extra mkdir there makes turn 3's state differ; a read does not.
    def extra(change: Call) -> Plan:
        return replace_in_turn(2, lambda t: [[change]])

    harmless = await play(library, "multi_turn_miss_func_0", extra(("ls", {})))
    assert "turn_2" not in verdicts(harmless)
    assert harmless.reward is not None and harmless.reward.success
    harmful = await play(library, "multi_turn_miss_func_0", extra(("mkdir", {"dir_name": "extra"})))
    assert verdicts(harmful)["turn_3"] is False
    assert harmful.reward is not None and not harmful.reward.success


async def test_withheld_functions_appear_from_their_turn_on(library: Library) -> None:
    scenario = next(s for s in library.scenarios if s.id == "multi_turn_miss_func_0")
    seen: list[tuple[int, bool]] = []

    class Watcher(PlannedAgent):
        async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
            seen.append((current_turn(messages, scenario)[0], any(t["function"]["name"] == "sort" for t in tools)))
            return await super().act(messages, tools)

    async with JailSpec(workers=1).pool() as pool:
        trajectory = await run_episode(
            scenario,
            library.environments[scenario.environment_id],
            pool=pool,
            agent=Watcher(scenario, ground_truth),
            user=ScriptedUser(scenario),
            config=EpisodeConfig(mode="conv"),
            episode_id="watch",
        )
    assert {turn: visible for turn, visible in seen} == {0: False, 1: False, 2: False, 3: True, 4: True}
    assert trajectory.reward is not None and trajectory.reward.success


async def test_more_than_twenty_steps_in_a_turn_fails_the_entry(library: Library) -> None:
    # Rule: BFCL force-quits a turn after its 21st tool-calling step and fails the whole entry; 20 are allowed.
    def steps(count: int) -> Plan:
        return replace_in_turn(0, lambda t: [*([("pwd", {})],) * (count - 1), t])

    allowed = await play(library, "multi_turn_base_0", steps(20))
    assert allowed.reward is not None and allowed.reward.success
    cut = await play(library, "multi_turn_base_0", steps(21))
    assert cut.termination is TerminationReason.MAX_STEPS
    assert cut.reward is not None and not cut.reward.success
    assert verdicts(cut)["turn_1"] is False


async def test_scoring_is_deterministic(library: Library) -> None:
    def record(trajectory: Trajectory) -> tuple[Any, ...]:
        return (
            [r.model_dump() for r in trajectory.check_results],
            trajectory.reward.model_dump() if trajectory.reward else None,
            [s.observation.content for s in trajectory.steps],
        )

    for scenario_id in ("multi_turn_base_106", "multi_turn_miss_param_10", "multi_turn_long_context_3"):
        first = await play(library, scenario_id, replace_in_turn(0, lambda t: [list(reversed(t))]), seed=1)
        second = await play(library, scenario_id, replace_in_turn(0, lambda t: [list(reversed(t))]), seed=2)
        assert record(first) == record(second)
