"""EnvFactory's composite reward on hand-built trajectories."""

from __future__ import annotations

import pytest

from harness.schema import (
    AgentSettings,
    Check,
    DiffEntry,
    ModelSettings,
    Observation,
    ReferenceAction,
    RewardBreakdown,
    Scenario,
    Step,
    TerminationReason,
    ToolCall,
    Trajectory,
)
from harness.scoring.reward import CompositeWeights, composite, trajectory_match, trajectory_reward, values_match

REFERENCE = [
    ReferenceAction(name="find_user", arguments={"email": "a@b.c"}),
    ReferenceAction(
        name="refund", arguments={"order_id": "O-1", "amount": 12.5, "note": "late"}, masked_arguments=["note"]
    ),
]


def calls(*items: tuple[str, dict]) -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", name=name, arguments=args) for i, (name, args) in enumerate(items)]


def reward(state: float = 1.0) -> RewardBreakdown:
    return RewardBreakdown(state_reward=state, success=state == 1.0, checks_passed=int(state * 2), checks_total=2)


def scenario(**extra) -> Scenario:
    return Scenario(
        id="s",
        environment_id="e",
        initial_state={"orders": {"O-1": {"status": "paid"}}},
        task="t",
        reference_actions=REFERENCE,
        **extra,
    )


def test_order_of_reference_calls_does_not_matter():
    swapped = calls(("refund", {"order_id": "O-1", "amount": 12.5, "note": "x"}), ("find_user", {"email": "a@b.c"}))
    assert trajectory_match(REFERENCE, swapped) == 1.0
    result = composite(scenario(), swapped, reward())
    assert result.composite == pytest.approx(1.0) and result.length_penalty == 0.0


def test_masked_argument_may_differ_but_others_may_not():
    assert (
        trajectory_match(
            REFERENCE,
            calls(("find_user", {"email": "a@b.c"}), ("refund", {"order_id": "O-1", "amount": 12.5, "note": "other"})),
        )
        == 1.0
    )
    assert (
        trajectory_match(
            REFERENCE,
            calls(("find_user", {"email": "a@b.c"}), ("refund", {"order_id": "O-2", "amount": 12.5, "note": "late"})),
        )
        == 0.5
    )


def test_numbers_within_and_beyond_tolerance():
    within = calls(
        ("find_user", {"email": "a@b.c"}), ("refund", {"order_id": "O-1", "amount": 12.5 * (1 + 5e-7), "note": ""})
    )
    beyond = calls(
        ("find_user", {"email": "a@b.c"}), ("refund", {"order_id": "O-1", "amount": 12.5 * (1 + 5e-6), "note": ""})
    )
    assert trajectory_match(REFERENCE, within) == 1.0
    assert trajectory_match(REFERENCE, beyond) == 0.5
    assert values_match(1, 1.0) and not values_match(True, 1)


def test_extra_calls_are_penalized_and_capped():
    base = [("find_user", {"email": "a@b.c"}), ("refund", {"order_id": "O-1", "amount": 12.5})]
    three_extra = calls(*base, *[("find_user", {"email": "x"})] * 3)
    result = composite(scenario(), three_extra, reward())
    assert result.length_penalty == pytest.approx(0.15)
    assert result.composite == pytest.approx(1.0 - 0.15)
    many = calls(*base, *[("find_user", {"email": "x"})] * 30)
    assert composite(scenario(), many, reward()).length_penalty == pytest.approx(0.5)


def test_alpha_and_gamma_are_parameters():
    half = calls(("find_user", {"email": "a@b.c"}))
    weights = CompositeWeights(alpha=0.25, gamma=2.0)
    result = composite(scenario(), half, reward(0.5), weights=weights)
    assert result.composite == pytest.approx(0.25 * 0.5 + 0.75 * 0.5)


def test_gold_final_state_replaces_check_rate_and_reads_the_trajectory():
    gold = {"orders": {"O-1": {"status": "refunded"}}}
    sc = scenario(gold_final_state=gold)
    made = calls(("find_user", {"email": "a@b.c"}), ("refund", {"order_id": "O-1", "amount": 12.5}))
    trajectory = Trajectory(
        episode_id="e1",
        scenario_id="s",
        environment_id="e",
        mode="nonconv",
        agent=AgentSettings(model=ModelSettings(model="m")),
        steps=[
            Step(index=i, call=c, observation=Observation(tool_call_id=c.id, name=c.name)) for i, c in enumerate(made)
        ],
        final_state_diff=[DiffEntry(path=["orders", "O-1", "status"], op="change", before="paid", after="refunded")],
        reward=reward(0.5),
        termination=TerminationReason.AGENT_DONE,
    )
    assert trajectory_reward(sc, trajectory) == pytest.approx(1.0)
    wrong = trajectory.model_copy(update={"final_state_diff": []})
    assert trajectory_reward(sc, wrong) == pytest.approx(0.5)


def test_without_reference_actions_the_reward_is_the_state_reward():
    bare = Scenario(id="s", environment_id="e", initial_state={}, task="t")
    result = composite(bare, calls(("a", {}), ("b", {})), reward(0.5))
    assert result.composite == 0.5 and result.trajectory_reward is None and result.length_penalty is None


def _refund_trajectory(made: list[ToolCall], note: str, state_reward: float) -> Trajectory:
    return Trajectory(
        episode_id="e2",
        scenario_id="s",
        environment_id="e",
        mode="nonconv",
        agent=AgentSettings(model=ModelSettings(model="m")),
        steps=[
            Step(index=i, call=c, observation=Observation(tool_call_id=c.id, name=c.name)) for i, c in enumerate(made)
        ],
        final_state_diff=[
            DiffEntry(path=["orders", "O-1", "status"], op="change", before="paid", after="refunded"),
            DiffEntry(path=["orders", "O-1", "note"], op="add", after=note),
        ],
        reward=reward(state_reward),
        termination=TerminationReason.AGENT_DONE,
    )


GOLD = {"orders": {"O-1": {"status": "refunded", "note": "late"}}}
REFUND_CHECK = Check(
    id="c1",
    description="O-1 is refunded.",
    source="def check(initial_state, final_state):\n    return final_state['orders']['O-1']['status'] == 'refunded'\n",
)


def test_a_correct_shorter_trajectory_with_other_free_text_gets_full_reward():
    # The agent knows the order already: it skips the lookup and words the note its own way.
    shorter = calls(("refund", {"order_id": "O-1", "amount": 12.5, "note": "arrived two weeks late"}))
    with_checks = scenario(gold_final_state=GOLD, checks=[REFUND_CHECK])
    trajectory = _refund_trajectory(shorter, "arrived two weeks late", 1.0)
    result = composite(
        with_checks,
        shorter,
        trajectory.reward,
        {"orders": {"O-1": {"status": "refunded", "note": "arrived two weeks late"}}},
    )
    assert result.trajectory_reward == 1.0 and result.length_penalty == 0.0
    assert result.gold_state_match is True  # the note is masked free text
    assert trajectory_reward(with_checks, trajectory) == pytest.approx(1.0)
    # Without checks the gold state decides, free text still ignored.
    assert trajectory_reward(scenario(gold_final_state=GOLD), trajectory) == pytest.approx(1.0)


def test_a_wrong_final_state_is_still_marked_down():
    wrong = calls(("refund", {"order_id": "O-1", "amount": 99.0, "note": "late"}))
    trajectory = _refund_trajectory(wrong, "late", 0.5).model_copy(update={"final_state_diff": []})
    with_checks = scenario(gold_final_state=GOLD, checks=[REFUND_CHECK])
    # R_state = check pass rate 0.5, R_traj = 0 of 2 reference calls matched.
    assert trajectory_reward(with_checks, trajectory) == pytest.approx(0.25)
    assert trajectory_reward(scenario(gold_final_state=GOLD), trajectory) == pytest.approx(0.0)
