"""What a run tells its caller: the plan before the first episode (:class:`RunPlan`), counts as episodes end
(:class:`RunProgress`), and what it did (:class:`RunOutcome`, with the causes of failed episodes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from harness.llm import LLMClient
from harness.results.metrics import RunSummary
from harness.results.tally import SummaryTally
from harness.schema import RunManifest, TerminationReason, Trajectory


@dataclass
class RunProgress:
    total: int
    done: int = 0
    in_flight: int = 0
    infra_errors: int = 0
    environment_errors: int = 0
    scored: int = 0
    reward_sum: float = 0.0
    successes: int = 0
    requests: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    started: float = field(default_factory=time.monotonic)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.scored if self.scored else None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        if not self.done:
            return None
        return self.elapsed / self.done * (self.total - self.done)

    def count(self, trajectory: Trajectory) -> None:
        """Count one finished episode."""
        self.done += 1
        if trajectory.termination is TerminationReason.ENVIRONMENT_ERROR:
            self.environment_errors += 1
        if trajectory.termination is TerminationReason.INFRA_ERROR:
            self.infra_errors += 1
        elif trajectory.reward is not None:
            self.scored += 1
            self.reward_sum += trajectory.reward.state_reward
            self.successes += trajectory.reward.success

    def refresh_usage(self, client: LLMClient) -> None:
        """Take the request, token and cost totals from the model client."""
        usage = client.usage_by_role()
        self.requests = sum(u.requests - u.cached_requests for u in usage.values())
        self.tokens = sum(u.total_tokens for u in usage.values())
        self.cost_usd = sum(u.cost_usd for u in usage.values())


@dataclass(frozen=True)
class RunPlan:
    """What a run is about to do, known before the first episode (for a header)."""

    run_dir: Path
    environments: list[str]
    scenarios: int
    modes: list[str]
    trials: int
    max_steps: int | None
    episodes: int
    to_run: int
    recorded: int
    models: dict[str, str]
    in_flight: int
    rules: str = "harness"
    settings_from: dict[str, str] = field(default_factory=dict)
    """Where each setting the user did not give came from (``rules``, ``mode``, ...: "the library", "the rules")."""


@dataclass(frozen=True)
class CostLimitStop:
    """``--cost-limit`` kept episodes from starting."""

    limit_usd: float
    spent_usd: float
    not_started: int


@dataclass
class RunOutcome:
    """What a run did. ``summary`` covers every episode recorded in the folder; ``ran`` are those of this
    invocation, ``skipped`` the planned ones already recorded. ``stopped_by`` is the signal that stopped it."""

    run_dir: Path
    manifest: RunManifest
    summary: RunSummary
    ran: int
    skipped: int
    planned: int = 0
    stopped_by: int | None = None
    infra_causes: list[tuple[str, int]] = field(default_factory=list)
    environment_causes: list[tuple[str, str, int]] = field(default_factory=list)
    """(environment id, first line of the detail, count) of the environment failures, most frequent first."""
    cost_limit: CostLimitStop | None = None
    """Set when ``--cost-limit`` kept episodes from starting."""
    unretryable_errors: int = 0
    """Infrastructure errors recorded as ones a retry cannot help (see ``Failure.retryable``)."""

    @property
    def missing(self) -> int:
        """Planned episodes with no result (a run stopped by a signal)."""
        return max(self.planned - self.summary.overall.episodes, 0)


ProgressCallback = Callable[[RunProgress], None]
StartCallback = Callable[[RunPlan], None]


async def report_usage(progress: RunProgress, client: LLMClient, on_progress: ProgressCallback | None) -> None:
    """Refresh request, token and cost totals a few times a second, and tell the caller."""
    while True:
        await asyncio.sleep(0.5)
        progress.refresh_usage(client)
        if on_progress is not None:
            on_progress(progress)


def infra_cause(trajectory: Trajectory) -> str:
    """What ended an infrastructure error, as its cause is listed: the first line of its detail, and, when a retry
    cannot help, that it is not retryable (``--retry-errors`` leaves those unless ``--retry-unretryable``)."""
    detail = (trajectory.termination_detail or "").strip().splitlines()
    cause = detail[0][:400] if detail else "no detail recorded"
    failure = trajectory.failure
    if failure is not None and failure.retryable is False:
        kind = failure.kind.value if failure.kind is not None else "unretryable"
        cause = f"{cause} (not retryable: {kind})"
    return cause


def environment_cause(trajectory: Trajectory) -> tuple[str, str]:
    """(environment id, first line of the detail) of an environment failure."""
    detail = (trajectory.termination_detail or "").strip().splitlines()
    return trajectory.environment_id, detail[0][:400] if detail else "no detail recorded"


class RunTally:
    """What a run's summary and outcome say, counted as each record is read or written and never held (a
    :class:`harness.results.store.RecordListener`): the summary, the causes of failed episodes and the spend recorded.

    Causes are listed most frequent first and, between equal counts, in the order of their first episode; so
    each cause keeps the positions of its episodes (failed episodes only)."""

    def __init__(self) -> None:
        self.summary = SummaryTally()
        self.unretryable_errors = 0
        """Infrastructure errors recorded as ones a retry cannot help (see ``Failure.retryable``)."""
        self._infra: dict[str, set[int]] = {}
        self._environment: dict[tuple[str, str], set[int]] = {}

    def add(self, trajectory: Trajectory, position: int) -> None:
        self._count(trajectory, position, 1)

    def remove(self, trajectory: Trajectory, position: int) -> None:
        self._count(trajectory, position, -1)

    def _count(self, trajectory: Trajectory, position: int, times: int) -> None:
        self.summary.count(trajectory, times)
        if trajectory.termination is TerminationReason.INFRA_ERROR:
            _place(self._infra, infra_cause(trajectory), position, times)
            failure = trajectory.failure
            if failure is not None and failure.retryable is False:
                self.unretryable_errors += times
        elif trajectory.termination is TerminationReason.ENVIRONMENT_ERROR:
            _place(self._environment, environment_cause(trajectory), position, times)

    @property
    def recorded_usd(self) -> float:
        """What the recorded episodes cost (``math.fsum`` of their costs)."""
        return self.summary.overall.cost.value

    def infra_causes(self) -> list[tuple[str, int]]:
        """Each cause of the infrastructure errors once with its count, most frequent first."""
        return [(cause, len(positions)) for cause, positions in _most_common(self._infra)]

    def environment_causes(self) -> list[tuple[str, str, int]]:
        """(environment id, cause, count) of the environment failures, most frequent first."""
        return [
            (environment, cause, len(positions)) for (environment, cause), positions in _most_common(self._environment)
        ]


_Cause = TypeVar("_Cause", str, tuple[str, str])


def _place(causes: dict[_Cause, set[int]], cause: _Cause, position: int, times: int) -> None:
    positions = causes.setdefault(cause, set())
    if times > 0:
        positions.add(position)
    else:
        positions.discard(position)
        if not positions:
            del causes[cause]


def _most_common(causes: dict[_Cause, set[int]]) -> list[tuple[_Cause, set[int]]]:
    return sorted(causes.items(), key=lambda item: (-len(item[1]), min(item[1])))


def run_tally(results: Iterable[Trajectory]) -> RunTally:
    """The tally of ``results`` (each episode once, in order)."""
    tally = RunTally()
    for position, trajectory in enumerate(results):
        tally.add(trajectory, position)
    return tally


def infra_error_causes(results: Iterable[Trajectory]) -> list[tuple[str, int]]:
    """What ended episodes in infrastructure errors, each cause once with its count, most frequent first; a cause
    a retry cannot help says so (``--retry-errors`` leaves those unless ``--retry-unretryable``)."""
    return run_tally(results).infra_causes()


def environment_error_causes(results: Iterable[Trajectory]) -> list[tuple[str, str, int]]:
    """Which environments failed their episodes and how, each (environment, cause) once with its count."""
    return run_tally(results).environment_causes()
