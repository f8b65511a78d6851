"""What a leaderboard row and a run's failure list need, counted one record at a time in the order the records
stand (the order the whole list of them had), never holding them.

A row's summary is a :class:`harness.results.tally.GroupTally`; its 95% interval on the mean reward needs each distinct
reward value with its count (the variance is a second sum over the values, once the mean is known); its pass^k
needs, per run and task, the trials and successes; the mean reward per domain and per mode is a plain running sum
in that order, as it always was. A run's failures need, per environment and per scenario, counts, a running sum and
the failing trial with the lowest reward (the example each gets a page for).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from harness.exact_sum import ExactSum
from harness.results.metrics import task_key
from harness.results.tally import GroupTally, pass_hat_k_of
from harness.schema import AgentSettings, Trajectory

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int) -> list[float] | None:
    """95% Wilson score interval of a proportion (sound at 0%, 100% and small n, unlike the normal one)."""
    if n < 1:
        return None
    p = successes / n
    denominator = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denominator
    return [max(0.0, centre - half), min(1.0, centre + half)]


def interval_of_counts(values: Counter[float]) -> list[float] | None:
    """95% interval of the mean of values in [0, 1], each given with its count (normal approximation, clipped);
    None below two values. The same floats as over the list of values: ``math.fsum`` is exact, whatever the order
    and the grouping."""
    n = values.total()
    if n < 2:
        return None
    total = ExactSum()
    for value, count in values.items():
        total.add(value, count)
    mean = total.value / n
    squares = ExactSum()
    for value, count in values.items():
        squares.add((value - mean) ** 2, count)
    half = Z95 * math.sqrt(squares.value / (n - 1) / n)
    return [max(0.0, mean - half), min(1.0, mean + half)]


class RunningMean:
    """A mean reward summed in the order the records come (a plain sum, as the reports always took it)."""

    __slots__ = ("count", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def add(self, value: float) -> None:
        self.total += value
        self.count += 1

    @property
    def value(self) -> float | None:
        return self.total / self.count if self.count else None


def scored_reward(trajectory: Trajectory) -> float | None:
    """The state reward of an episode that was scored (None for one that was not, or an infrastructure error)."""
    if trajectory.reward is None or trajectory.infra_error:
        return None
    return trajectory.reward.state_reward


@dataclass
class RowTally:
    """One leaderboard row (one setting), its members counted in the order they stand."""

    agent: AgentSettings
    """The first member's agent settings (the row's model and settings label come from it)."""
    user: AgentSettings | None
    run: dict[str, object]
    summary: GroupTally = field(default_factory=GroupTally)
    runs: set[str] = field(default_factory=set)
    rewards: Counter[float] = field(default_factory=Counter)
    successes: int = 0
    tasks_by_run: dict[tuple[str, str, str, str], list[int]] = field(default_factory=dict)
    """(run id, environment, scenario, mode) → [scored trials, successes]: pass^k over the trials of one run."""
    per_domain: dict[str, RunningMean] = field(default_factory=dict)
    per_mode: dict[str, RunningMean] = field(default_factory=dict)
    scored_tasks: set[tuple[str, str, str]] = field(default_factory=set)

    def add(self, trajectory: Trajectory, run_id: str, domain: str) -> None:
        self.summary.add(trajectory)
        self.runs.add(run_id)
        reward = scored_reward(trajectory)
        domain_mean = self.per_domain.setdefault(domain, RunningMean())
        mode_mean = self.per_mode.setdefault(str(trajectory.mode), RunningMean())
        if reward is None or trajectory.reward is None:
            return
        self.rewards[reward] += 1
        self.successes += trajectory.reward.success
        task = self.tasks_by_run.setdefault((run_id, *task_key(trajectory)), [0, 0])
        task[0] += 1
        task[1] += trajectory.reward.success
        domain_mean.add(reward)
        mode_mean.add(reward)
        self.scored_tasks.add(task_key(trajectory))

    def pass_hat_k(self) -> dict[int, float]:
        return pass_hat_k_of((n, c) for n, c in self.tasks_by_run.values())


@dataclass
class ScenarioTally:
    """A scenario (in one mode) of one run's environment: its scored trials and its failing ones."""

    scored: int = 0
    failures: int = 0
    rewards: RunningMean = field(default_factory=RunningMean)
    example: tuple[float, str] | None = None
    """(state reward, episode id) of the failing trial with the lowest reward: the example."""
    failed_checks: list[str] = field(default_factory=list)


@dataclass
class EnvironmentTally:
    scored: int = 0
    failures: int = 0
    rewards: RunningMean = field(default_factory=RunningMean)
    scenarios: dict[tuple[str, str], ScenarioTally] = field(default_factory=dict)


class FailureTally:
    """Where one run's scored episodes failed, per environment and scenario, with each scenario's example."""

    def __init__(self) -> None:
        self.environments: dict[str, EnvironmentTally] = {}
        self.models: set[str] = set()

    def add(self, trajectory: Trajectory) -> None:
        self.models.add(trajectory.agent.model.model)
        reward = scored_reward(trajectory)
        if reward is None or trajectory.reward is None:
            return
        environment = self.environments.setdefault(trajectory.environment_id, EnvironmentTally())
        scenario = environment.scenarios.setdefault((trajectory.scenario_id, trajectory.mode), ScenarioTally())
        environment.scored += 1
        environment.rewards.add(reward)
        scenario.scored += 1
        scenario.rewards.add(reward)
        if trajectory.reward.success:
            return
        environment.failures += 1
        scenario.failures += 1
        candidate = (reward, trajectory.episode_id)
        if scenario.example is None or candidate < scenario.example:
            scenario.example = candidate
            scenario.failed_checks = [r.check_id for r in trajectory.check_results if not r.passed]
