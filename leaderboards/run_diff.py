"""Two runs of the same episodes compared (``harness show --diff OLD NEW``): which verdicts changed and how the
summary moved. Episodes are paired by id, so a run and its re-scoring (``harness rescore``) line up exactly."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from harness.results.metrics import GroupSummary, open_run
from harness.results.store import StoredResults
from harness.results.tally import SummaryTally
from harness.schema import Trajectory

from .terminal import plain


class ChangedVerdict(BaseModel):
    episode_id: str
    scenario_id: str
    mode: str
    trial: int
    success_before: bool | None
    success_after: bool | None
    reward_before: float | None
    reward_after: float | None
    checks_changed: list[str] = Field(default_factory=list, description="Check ids whose result changed.")


class RunDiff(BaseModel):
    old_run: str
    new_run: str
    paired: int
    only_old: list[str] = Field(default_factory=list)
    only_new: list[str] = Field(default_factory=list)
    changed: list[ChangedVerdict] = Field(default_factory=list)
    old_summary: GroupSummary
    new_summary: GroupSummary


def _reward(trajectory: Trajectory) -> float | None:
    reward = trajectory.reward
    if reward is None:
        return None
    return reward.composite if reward.composite is not None else reward.state_reward


def _success(trajectory: Trajectory) -> bool | None:
    return trajectory.reward.success if trajectory.reward is not None else None


def changed_checks(old: Trajectory, new: Trajectory) -> list[str]:
    """Check ids that are new, gone, or whose passed/value/error differ."""
    before = {r.check_id: (r.passed, r.value, r.error) for r in old.check_results}
    after = {r.check_id: (r.passed, r.value, r.error) for r in new.check_results}
    return sorted(check for check in before.keys() | after.keys() if before.get(check) != after.get(check))


def diff_runs(old_dir: Path, new_dir: Path) -> RunDiff:
    """Raises FileNotFoundError or ValueError for a folder that is not a run. Each run is read once for its summary
    and its ids, then the episodes of both are read in pairs."""
    old_summary, new_summary = SummaryTally(()), SummaryTally(())
    old_run = open_run(old_dir, old_summary)
    new_run = open_run(new_dir, new_summary)
    old, new = old_run.results, new_run.results
    paired = sorted(episode for episode in old.ids() if new.position(episode) is not None)
    changed = []
    with old.reader() as read_old, new.reader() as read_new:
        for episode_id in paired:
            before, after = read_old(_position(old, episode_id)), read_new(_position(new, episode_id))
            if before is None or after is None:
                continue
            checks = changed_checks(before, after)
            if checks or _success(before) != _success(after) or _reward(before) != _reward(after):
                changed.append(
                    ChangedVerdict(
                        episode_id=episode_id,
                        scenario_id=after.scenario_id,
                        mode=after.mode,
                        trial=after.trial,
                        success_before=_success(before),
                        success_after=_success(after),
                        reward_before=_reward(before),
                        reward_after=_reward(after),
                        checks_changed=checks,
                    )
                )
    return RunDiff(
        old_run=old_run.manifest.run_id,
        new_run=new_run.manifest.run_id,
        paired=len(paired),
        only_old=sorted(episode for episode in old.ids() if new.position(episode) is None),
        only_new=sorted(episode for episode in new.ids() if old.position(episode) is None),
        changed=changed,
        old_summary=old_summary.overall.summary(),
        new_summary=new_summary.overall.summary(),
    )


def _position(results: StoredResults, episode_id: str) -> int:
    position = results.position(episode_id)
    assert position is not None  # paired ids are in both runs
    return position


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _verdict(success: bool | None, reward: float | None) -> str:
    outcome = "—" if success is None else ("pass" if success else "fail")
    return f"{outcome} {_number(reward)}"


SUMMARY_FIELDS: Sequence[tuple[str, str]] = (
    ("episodes", "episodes"),
    ("scored", "scored"),
    ("success_rate", "success rate"),
    ("mean_state_reward", "mean state reward"),
    ("infra_errors", "infra errors"),
    ("environment_errors", "env failures"),
)


def diff_view(diff: RunDiff) -> list[RenderableType]:
    """The changed episodes and the summary before and after, for the terminal."""
    views: list[RenderableType] = []
    summary = Table(title=plain(f"{diff.old_run} → {diff.new_run}"), title_justify="left")
    summary.add_column("")
    summary.add_column(plain(diff.old_run), justify="right")
    summary.add_column(plain(diff.new_run), justify="right")
    for field, label in SUMMARY_FIELDS:
        before, after = getattr(diff.old_summary, field), getattr(diff.new_summary, field)
        summary.add_row(label, _number(before), _number(after))
    for k in sorted(diff.old_summary.pass_hat_k.keys() | diff.new_summary.pass_hat_k.keys()):
        summary.add_row(
            f"pass^{k}", _number(diff.old_summary.pass_hat_k.get(k)), _number(diff.new_summary.pass_hat_k.get(k))
        )
    views.append(summary)
    head = f"{len(diff.changed)} of {diff.paired} paired episodes changed verdict"
    if diff.only_old or diff.only_new:
        head += f"; {len(diff.only_old)} only in {diff.old_run}, {len(diff.only_new)} only in {diff.new_run}"
    views.append(Text(head))
    if diff.changed:
        table = Table(show_edge=False)
        for column in ("episode", "scenario", "mode", "trial", "before", "after", "checks changed"):
            table.add_column(column)
        for item in diff.changed:
            table.add_row(
                plain(item.episode_id[:12]),
                plain(item.scenario_id),
                item.mode,
                str(item.trial),
                _verdict(item.success_before, item.reward_before),
                _verdict(item.success_after, item.reward_after),
                plain(", ".join(item.checks_changed) or "—"),
            )
        views.append(table)
    return views
