"""Summaries kept as running aggregates: each record is counted as it is written or read, and never held.

A :class:`GroupTally` holds what the numbers of one group of episodes need (counts, exact sums, per task only the
number of scored trials and of successes for pass^k, the versions seen); :class:`SummaryTally` one per group and
one for the whole; :class:`RunTally` adds what a run's outcome says (the causes of failed episodes, the spend
recorded). A record replaced by a later line of its episode (a retry) is taken out again, exactly: sums are
:class:`~harness.exact_sum.ExactSum`, so every mean is the float that ``math.fsum`` over the whole list gives, in
any order. The accounting rules are those of :mod:`harness.results.metrics`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from harness.exact_sum import ExactSum
from harness.records.versions import VersionsTally
from harness.results.metrics import (
    DEFAULT_GROUP_BY,
    GroupSummary,
    RunSummary,
    assistant_turns,
    deduplicate,
    episode_cost,
    episode_tokens,
    group_value,
    pass_hat_k,
    task_key,
)
from harness.schema import FailureParty, TerminationReason, Trajectory

TaskKey = tuple[str, str, str]


def pass_hat_k_of(outcomes: Iterable[tuple[int, int]]) -> dict[int, float]:
    """pass^k for k = 1..K from each task's (scored trials, successes), K the fewest trials of any task."""
    tasks = [(n, c) for n, c in outcomes if n]
    if not tasks:
        return {}
    max_k = min(n for n, _ in tasks)
    return {k: math.fsum(pass_hat_k(n, c, k) for n, c in tasks) / len(tasks) for k in range(1, max_k + 1)}


class GroupTally:
    """The numbers of one group of episodes, record by record (see :func:`summarize_group` for their meaning)."""

    def __init__(self) -> None:
        self.episodes = 0
        self.infra_errors = 0
        self.environment_errors = 0
        self.scored = 0
        self.failed = 0
        """Infrastructure and environment errors (the share the user simulator caused is of these)."""
        self.by_user = 0
        self.state_rewards = ExactSum()
        self.delta_rewards = ExactSum()
        self.delta_defined = 0
        self.successes = 0
        self.steps = 0
        self.tool_calls = 0
        self.ran_tokens = 0
        self.total_tokens = 0
        self.cost = ExactSum()
        self.ran_cost = ExactSum()
        self.unpriced_requests = 0
        self.judge_requests = 0
        self.judge_cost = ExactSum()
        self.terminations: Counter[str] = Counter()
        self.tasks: dict[TaskKey, list[int]] = {}
        """Per task (environment, scenario, mode): [scored trials, successes]."""
        self.versions = VersionsTally()

    def count(self, trajectory: Trajectory, times: int = 1) -> None:
        """Count ``trajectory`` (``times=-1`` takes it out again)."""
        self.episodes += times
        self.terminations[trajectory.termination.value] += times
        cost = episode_cost(trajectory)
        self.cost.add(cost, times)
        tokens = episode_tokens(trajectory)
        self.total_tokens += times * tokens
        self.unpriced_requests += times * sum(usage.unpriced_requests for usage in trajectory.usage.values())
        judge = trajectory.usage.get("judge")
        if judge is not None:
            self.judge_requests += times * judge.requests
            self.judge_cost.add(judge.cost_usd, times)
        self.versions.count(trajectory, times)
        if trajectory.infra_error or trajectory.environment_error:
            self.failed += times
            failure = trajectory.failure
            if failure is not None and failure.at_fault is FailureParty.USER_SIMULATOR:
                self.by_user += times
        if trajectory.environment_error:
            self.environment_errors += times
        if trajectory.infra_error:
            self.infra_errors += times
            return
        self.steps += times * assistant_turns(trajectory)
        self.tool_calls += times * trajectory.num_tool_calls
        self.ran_tokens += times * tokens
        self.ran_cost.add(cost, times)
        reward = trajectory.reward
        if reward is None:
            return
        self.scored += times
        self.state_rewards.add(reward.state_reward, times)
        if reward.delta_reward is not None:
            self.delta_rewards.add(reward.delta_reward, times)
            self.delta_defined += times
        self.successes += times * reward.success
        task = self.tasks.setdefault(task_key(trajectory), [0, 0])
        task[0] += times
        task[1] += times * reward.success
        if not task[0]:
            del self.tasks[task_key(trajectory)]

    def add(self, trajectory: Trajectory) -> None:
        self.count(trajectory)

    def remove(self, trajectory: Trajectory) -> None:
        self.count(trajectory, -1)

    def merge(self, other: GroupTally) -> None:
        """Add every episode ``other`` counted (the two groups must not share one)."""
        for name in (
            "episodes",
            "infra_errors",
            "environment_errors",
            "scored",
            "failed",
            "by_user",
            "delta_defined",
            "successes",
            "steps",
            "tool_calls",
            "ran_tokens",
            "total_tokens",
            "unpriced_requests",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in (
            (self.state_rewards, other.state_rewards),
            (self.delta_rewards, other.delta_rewards),
            (self.cost, other.cost),
            (self.ran_cost, other.ran_cost),
        ):
            mine.merge(theirs)
        self.terminations.update(other.terminations)
        for key, (trials, successes) in other.tasks.items():
            task = self.tasks.setdefault(key, [0, 0])
            task[0] += trials
            task[1] += successes
        self.versions.merge(other.versions)

    @property
    def ran(self) -> int:
        """Episodes that did not end in an infrastructure error."""
        return self.episodes - self.infra_errors

    def summary(self, key: dict[str, str] | None = None) -> GroupSummary:
        ran = self.ran
        return GroupSummary(
            key=dict(key or {}),
            episodes=self.episodes,
            scored=self.scored,
            infra_errors=self.infra_errors,
            unscored=ran - self.scored,
            environment_errors=self.environment_errors,
            user_simulator_failures=self.by_user,
            user_simulator_failure_share=self.by_user / self.failed if self.failed else None,
            tasks=len(self.tasks),
            mean_state_reward=_mean(self.state_rewards, self.scored),
            mean_delta_reward=_mean(self.delta_rewards, self.delta_defined),
            delta_defined=self.delta_defined,
            success_rate=float(self.successes) / self.scored if self.scored else None,
            pass_hat_k=pass_hat_k_of((n, c) for n, c in self.tasks.values()),
            mean_steps=float(self.steps) / ran if ran else None,
            mean_tool_calls=float(self.tool_calls) / ran if ran else None,
            mean_tokens=float(self.ran_tokens) / ran if ran else None,
            total_tokens=self.total_tokens,
            total_cost_usd=self.cost.value,
            mean_cost_usd=_mean(self.ran_cost, ran),
            unpriced_requests=self.unpriced_requests,
            judge_requests=self.judge_requests,
            judge_cost_usd=self.judge_cost.value,
            terminations={
                reason.value: self.terminations[reason.value]
                for reason in TerminationReason
                if self.terminations[reason.value]
            },
        )


def _mean(total: ExactSum, count: int) -> float | None:
    return total.value / count if count else None


class SummaryTally:
    """One :class:`GroupTally` per distinct value of ``group_by`` and one over every episode."""

    def __init__(self, group_by: Sequence[str] = DEFAULT_GROUP_BY) -> None:
        self.group_by = tuple(group_by)
        self.overall = GroupTally()
        self.groups: dict[tuple[str, ...], GroupTally] = {}

    def key_of(self, trajectory: Trajectory) -> tuple[str, ...]:
        return tuple(group_value(trajectory, key) for key in self.group_by)

    def count(self, trajectory: Trajectory, times: int = 1) -> None:
        """Count ``trajectory`` in its group and in the whole (``times=-1`` takes it out again)."""
        self.overall.count(trajectory, times)
        key = self.key_of(trajectory)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = GroupTally()
        group.count(trajectory, times)
        if not group.episodes:
            del self.groups[key]

    def add(self, trajectory: Trajectory, position: int = 0) -> None:
        """As a :class:`harness.results.store.RecordListener`: a record that stands."""
        self.count(trajectory)

    def remove(self, trajectory: Trajectory, position: int = 0) -> None:
        """As a :class:`harness.results.store.RecordListener`: a record replaced by a later line."""
        self.count(trajectory, -1)

    def group_summaries(self) -> list[GroupSummary]:
        """One summary per group, sorted by key."""
        return [
            group.summary(dict(zip(self.group_by, values, strict=True)))
            for values, group in sorted(self.groups.items())
        ]

    def run_summary(self, run_id: str | None = None) -> RunSummary:
        return RunSummary(
            run_id=run_id,
            group_by=list(self.group_by),
            overall=self.overall.summary(),
            groups=self.group_summaries(),
            versions=self.overall.versions.summary(),
        )


def summary_tally(trajectories: Iterable[Trajectory], group_by: Sequence[str] = DEFAULT_GROUP_BY) -> SummaryTally:
    """The tally of ``trajectories``, each episode once (the last of its records)."""
    tally = SummaryTally(group_by)
    for trajectory in deduplicate(trajectories):
        tally.add(trajectory)
    return tally


def summarize_group(trajectories: Iterable[Trajectory], key: dict[str, str] | None = None) -> GroupSummary:
    """Metrics of one group of (already de-duplicated) trajectories."""
    tally = GroupTally()
    for trajectory in trajectories:
        tally.add(trajectory)
    return tally.summary(key)


def summarize(trajectories: Iterable[Trajectory], group_by: Sequence[str] = DEFAULT_GROUP_BY) -> list[GroupSummary]:
    """One summary per distinct value of ``group_by``, sorted by key; duplicates by episode_id: last wins."""
    return summary_tally(trajectories, group_by).group_summaries()


def summarize_overall(trajectories: Iterable[Trajectory]) -> GroupSummary:
    """The summary of every episode together (key ``{}``)."""
    return summary_tally(trajectories, ()).overall.summary()


def summarize_run(
    trajectories: Iterable[Trajectory], run_id: str | None = None, group_by: Sequence[str] = DEFAULT_GROUP_BY
) -> RunSummary:
    return summary_tally(trajectories, group_by).run_summary(run_id)


def pass_hat_k_curve(trajectories: Iterable[Trajectory]) -> dict[int, float]:
    """pass^k for k = 1..K over the scored trajectories, K the fewest scored trials of any task."""
    tally = GroupTally()
    for trajectory in trajectories:
        if trajectory.reward is not None and not trajectory.infra_error:
            tally.count(trajectory)
    return pass_hat_k_of((n, c) for n, c in tally.tasks.values())
