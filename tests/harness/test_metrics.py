"""Metrics on hand-built runs whose answers are worked out by hand."""

from __future__ import annotations

import itertools
import json
import logging
from fractions import Fraction
from pathlib import Path

import pytest

from harness.results.metrics import (
    RunSummary,
    load_run,
    pass_hat_k,
    read_results,
    write_summary,
)
from harness.results.tally import summarize, summarize_overall, summarize_run
from harness.schema import TerminationReason
from tests.support.leaderboard_runs import make_trajectory, write_run

INFRA = TerminationReason.INFRA_ERROR


def test_pass_hat_k_matches_tau_bench_values() -> None:
    assert pass_hat_k(3, 2, 1) == pytest.approx(2 / 3)
    assert pass_hat_k(3, 2, 2) == pytest.approx(1 / 3)
    assert pass_hat_k(3, 2, 3) == 0.0
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(5, 0, 1) == 0.0
    with pytest.raises(ValueError):
        pass_hat_k(2, 1, 3)
    with pytest.raises(ValueError):
        pass_hat_k(2, 3, 1)


def test_pass_hat_k_equals_share_of_all_successful_k_subsets() -> None:
    for n in range(1, 7):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                expected = Fraction(sum(all(s) for s in subsets), len(subsets))
                assert pass_hat_k(n, c, k) == pytest.approx(float(expected))


def _known_run(tmp_path: Path) -> Path:
    """Two tasks, three trials each, one infrastructure error and one retried episode.

    s1: rewards 1.0, 1.0, 0.5 (the last first recorded as an infra error, then retried) -> n=3, c=2
    s2: rewards 1.0, 1.0 and an infra error                                              -> n=2, c=2
    """
    t = make_trajectory
    lines = [
        t(
            "e-s1-0",
            scenario_id="s1",
            trial=0,
            state_reward=1.0,
            delta_reward=1.0,
            tool_calls=2,
            cost_usd=0.02,
        ),
        t(
            "e-s1-1",
            scenario_id="s1",
            trial=1,
            state_reward=1.0,
            delta_reward=None,
            tool_calls=2,
            cost_usd=0.02,
        ),
        t("e-s1-2", scenario_id="s1", trial=2, termination=INFRA, tool_calls=0, cost_usd=0.5),
        t(
            "e-s2-0",
            scenario_id="s2",
            trial=0,
            state_reward=1.0,
            delta_reward=1.0,
            tool_calls=1,
            cost_usd=0.01,
        ),
        t(
            "e-s2-1",
            scenario_id="s2",
            trial=1,
            state_reward=1.0,
            delta_reward=1.0,
            tool_calls=1,
            cost_usd=0.01,
        ),
        t("e-s2-2", scenario_id="s2", trial=2, termination=INFRA, tool_calls=0, cost_usd=0.5),
        # the retry of e-s1-2 comes last and wins
        t(
            "e-s1-2",
            scenario_id="s1",
            trial=2,
            state_reward=0.5,
            delta_reward=0.0,
            termination=TerminationReason.MAX_STEPS,
            tool_calls=3,
            cost_usd=0.03,
        ),
    ]
    return write_run(tmp_path / "run", lines)


def test_summary_of_a_known_run(tmp_path: Path) -> None:
    manifest, trajectories = load_run(_known_run(tmp_path))
    assert manifest.run_id == "run"
    assert len(trajectories) == 6, "the duplicated episode id must count once"

    [group] = summarize(trajectories)
    assert group.key == {"environment_id": "retail_orders", "mode": "nonconv"}
    assert group.episodes == 6
    assert group.infra_errors == 1
    assert group.scored == 5
    assert group.unscored == 0
    assert group.tasks == 2
    assert group.mean_state_reward == pytest.approx((1 + 1 + 0.5 + 1 + 1) / 5)
    assert group.mean_delta_reward == pytest.approx((1 + 0 + 1 + 1) / 4)
    assert group.delta_defined == 4
    assert group.success_rate == pytest.approx(4 / 5)
    # K = min trials per task = 2 (s2 lost one trial to the infra error)
    assert set(group.pass_hat_k) == {1, 2}
    assert group.pass_hat_k[1] == pytest.approx((2 / 3 + 1) / 2)
    assert group.pass_hat_k[2] == pytest.approx((1 / 3 + 1) / 2)
    # assistant turns: one per tool call plus the final answer; infra episodes excluded from the means
    assert group.mean_tool_calls == pytest.approx((2 + 2 + 3 + 1 + 1) / 5)
    assert group.mean_steps == pytest.approx((3 + 3 + 4 + 2 + 2) / 5)
    assert group.mean_tokens == pytest.approx(120)
    assert group.mean_cost_usd == pytest.approx((0.02 + 0.02 + 0.03 + 0.01 + 0.01) / 5)
    # money spent counts every episode, the infra error included
    assert group.total_cost_usd == pytest.approx(0.09 + 0.5)
    assert group.terminations == {"agent_done": 4, "max_steps": 1, "infra_error": 1}


def test_infrastructure_errors_are_not_scored_as_zero(tmp_path: Path) -> None:
    scored = [make_trajectory(f"ok-{i}", scenario_id=f"s{i}", state_reward=0.75, success=False) for i in range(3)]
    broken = [make_trajectory(f"bad-{i}", scenario_id=f"s{i}", termination=INFRA) for i in range(5)]
    summary = summarize_overall(scored + broken)
    assert summary.episodes == 8
    assert summary.infra_errors == 5
    assert summary.scored == 3
    assert summary.mean_state_reward == pytest.approx(0.75)
    assert summary.success_rate == 0.0
    assert summary.terminations["infra_error"] == 5

    only_broken = summarize_overall(broken)
    assert only_broken.mean_state_reward is None
    assert only_broken.success_rate is None
    assert only_broken.pass_hat_k == {}
    assert only_broken.infra_errors == 5


def test_unscored_episodes_are_counted_apart(tmp_path: Path) -> None:
    unscored = make_trajectory("u", state_reward=None, termination=TerminationReason.AGENT_ERROR)
    scored = make_trajectory("s", state_reward=0.5, success=False, scenario_id="s2")
    summary = summarize_overall([unscored, scored])
    assert (summary.episodes, summary.scored, summary.unscored, summary.infra_errors) == (2, 1, 1, 0)
    assert summary.mean_state_reward == 0.5
    assert summary.mean_tool_calls == 1.0  # both ran one tool call


def test_group_by_model_and_mode() -> None:
    trajectories = [
        make_trajectory("a1", model="model-a", mode="nonconv", state_reward=1.0),
        make_trajectory("a2", model="model-a", mode="conv", state_reward=0.0, user_model="sim"),
        make_trajectory("b1", model="model-b", mode="nonconv", state_reward=0.5),
    ]
    groups = summarize(trajectories, group_by=("model", "mode"))
    keyed = {tuple(g.key.values()): g for g in groups}
    assert set(keyed) == {("model-a", "conv"), ("model-a", "nonconv"), ("model-b", "nonconv")}
    assert keyed[("model-a", "conv")].mean_state_reward == 0.0
    assert keyed[("model-b", "nonconv")].mean_state_reward == 0.5
    with pytest.raises(ValueError, match="cannot group by"):
        summarize(trajectories, group_by=("no_such_field",))


def test_last_line_wins_and_torn_tail_is_skipped(tmp_path: Path) -> None:
    first = make_trajectory("same", state_reward=0.0, success=False)
    second = make_trajectory("same", state_reward=1.0)
    run = write_run(tmp_path / "r", [first, second], tail='{"episode_id": "cut sho')
    _, trajectories = load_run(run)
    assert len(trajectories) == 1
    assert trajectories[0].reward is not None and trajectories[0].reward.state_reward == 1.0


def test_corrupt_line_in_the_middle_is_skipped_with_a_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "results.jsonl"
    good = make_trajectory("x").model_dump_json()
    other = make_trajectory("y").model_dump_json()
    path.write_text(good + "\nnot json\n" + other + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        trajectories = read_results(path)
    assert [t.episode_id for t in trajectories] == ["x", "y"]
    assert "results.jsonl:2: skipping a line that is not a Trajectory" in caplog.text


def test_summary_file_round_trip(tmp_path: Path) -> None:
    _, trajectories = load_run(_known_run(tmp_path))
    summary = summarize_run(trajectories, run_id="run")
    path = write_summary(tmp_path, summary)
    loaded = RunSummary.model_validate(json.loads(path.read_text()))
    assert loaded == summary
    assert loaded.overall.pass_hat_k[2] == pytest.approx(2 / 3)
    assert loaded.groups[0].key["mode"] == "nonconv"
