"""The summary and the causes of failed episodes as the harness computed them while it held every record of a run
in a list (before its running tallies), kept here as the oracle the tallies must equal byte for byte."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from harness.records.versions import VersionsSummary, content_hash
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


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def pass_hat_k_curve(trajectories: Iterable[Trajectory]) -> dict[int, float]:
    outcomes: dict[tuple[str, str, str], list[bool]] = {}
    for trajectory in trajectories:
        if trajectory.reward is None or trajectory.infra_error:
            continue
        outcomes.setdefault(task_key(trajectory), []).append(trajectory.reward.success)
    if not outcomes:
        return {}
    max_k = min(len(results) for results in outcomes.values())
    curve: dict[int, float] = {}
    for k in range(1, max_k + 1):
        per_task = [pass_hat_k(len(results), sum(results), k) for results in outcomes.values()]
        curve[k] = math.fsum(per_task) / len(per_task)
    return curve


def summarize_group(trajectories: Sequence[Trajectory], key: dict[str, str] | None = None) -> GroupSummary:
    infra = [t for t in trajectories if t.infra_error]
    ran = [t for t in trajectories if not t.infra_error]
    scored = [t for t in ran if t.reward is not None]
    rewards = [t.reward for t in scored if t.reward is not None]
    deltas = [r.delta_reward for r in rewards if r.delta_reward is not None]
    terminations = Counter(t.termination.value for t in trajectories)
    failed = [t for t in trajectories if t.infra_error or t.environment_error]
    by_user = [t for t in failed if t.failure is not None and t.failure.at_fault is FailureParty.USER_SIMULATOR]
    return GroupSummary(
        key=dict(key or {}),
        episodes=len(trajectories),
        scored=len(scored),
        infra_errors=len(infra),
        unscored=len(ran) - len(scored),
        environment_errors=sum(1 for t in trajectories if t.environment_error),
        user_simulator_failures=len(by_user),
        user_simulator_failure_share=len(by_user) / len(failed) if failed else None,
        tasks=len({task_key(t) for t in scored}),
        mean_state_reward=_mean([r.state_reward for r in rewards]),
        mean_delta_reward=_mean(deltas),
        delta_defined=len(deltas),
        success_rate=_mean([1.0 if r.success else 0.0 for r in rewards]),
        pass_hat_k=pass_hat_k_curve(scored),
        mean_steps=_mean([float(assistant_turns(t)) for t in ran]),
        mean_tool_calls=_mean([float(t.num_tool_calls) for t in ran]),
        mean_tokens=_mean([float(episode_tokens(t)) for t in ran]),
        total_tokens=sum(episode_tokens(t) for t in trajectories),
        total_cost_usd=math.fsum(episode_cost(t) for t in trajectories),
        mean_cost_usd=_mean([episode_cost(t) for t in ran]),
        unpriced_requests=sum(u.unpriced_requests for t in trajectories for u in t.usage.values()),
        terminations={
            reason.value: terminations[reason.value] for reason in TerminationReason if terminations[reason.value]
        },
    )


def summarize(trajectories: Iterable[Trajectory], group_by: Sequence[str] = DEFAULT_GROUP_BY) -> list[GroupSummary]:
    unique = deduplicate(trajectories)
    groups: dict[tuple[str, ...], list[Trajectory]] = {}
    for trajectory in unique:
        groups.setdefault(tuple(group_value(trajectory, key) for key in group_by), []).append(trajectory)
    return [
        summarize_group(members, dict(zip(group_by, values, strict=True))) for values, members in sorted(groups.items())
    ]


def versions_of(trajectories: Iterable[Trajectory]) -> VersionsSummary:
    episodes = list(trajectories)
    versioned = [t.versions for t in episodes if t.versions is not None]
    pairs = sorted({(t.environment_id, t.scenario_id, t.versions.checks) for t in episodes if t.versions is not None})
    return VersionsSummary(
        environments=sorted({v.environment for v in versioned if v.environment is not None}),
        checks=content_hash(pairs) if pairs else None,
        rules=sorted({v.rules for v in versioned}),
        packages=sorted({v.package for v in versioned}),
        unversioned_episodes=len(episodes) - len(versioned),
    )


def summarize_run(
    trajectories: Iterable[Trajectory], run_id: str | None = None, group_by: Sequence[str] = DEFAULT_GROUP_BY
) -> RunSummary:
    unique = deduplicate(trajectories)
    return RunSummary(
        run_id=run_id,
        group_by=list(group_by),
        overall=summarize_group(unique),
        groups=summarize(unique, group_by),
        versions=versions_of(unique),
    )


def infra_error_causes(results: list[Trajectory]) -> list[tuple[str, int]]:
    counts: Counter[str] = Counter()
    for trajectory in results:
        if trajectory.termination is TerminationReason.INFRA_ERROR:
            detail = (trajectory.termination_detail or "").strip().splitlines()
            cause = detail[0][:400] if detail else "no detail recorded"
            failure = trajectory.failure
            if failure is not None and failure.retryable is False:
                kind = failure.kind.value if failure.kind is not None else "unretryable"
                cause = f"{cause} (not retryable: {kind})"
            counts[cause] += 1
    return counts.most_common()


def environment_error_causes(results: list[Trajectory]) -> list[tuple[str, str, int]]:
    counts: Counter[tuple[str, str]] = Counter()
    for trajectory in results:
        if trajectory.termination is TerminationReason.ENVIRONMENT_ERROR:
            detail = (trajectory.termination_detail or "").strip().splitlines()
            counts[(trajectory.environment_id, detail[0][:400] if detail else "no detail recorded")] += 1
    return [(environment, cause, count) for (environment, cause), count in counts.most_common()]
