"""A run as one JSON document for sites that take leaderboard submissions (``harness export leaderboard-json``).

Per environment and mode: episodes, scored, success rate, pass^1..k, mean reward, cost, and the versions the
numbers came from (environment code, checks, rules, package; see :mod:`harness.records.versions`). Every number is the
one ``harness show`` prints for the same group (the same :mod:`harness.results.metrics` functions compute it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from harness import __version__
from harness.files.outputs import write_output_file
from harness.records.versions import VersionsSummary
from harness.results.metrics import open_run
from harness.results.tally import SummaryTally, summary_tally
from harness.schema import RunManifest, Trajectory

SUBMISSION_FORMAT = "envharness-leaderboard/1"


class SubmissionEntry(BaseModel):
    environment_id: str
    mode: str
    episodes: int
    scored: int
    infra_errors: int
    environment_errors: int
    success_rate: float | None
    mean_reward: float | None = Field(description="Mean state reward (share of checks passed) of scored episodes.")
    pass_hat_k: dict[int, float]
    total_cost_usd: float
    versions: VersionsSummary


class Submission(BaseModel):
    format: str = SUBMISSION_FORMAT
    exported_by: str = Field(default_factory=lambda: f"envharness {__version__}")
    run_id: str
    model: str
    agent: dict[str, Any]
    user_model: str | None
    dataset: dict[str, Any]
    rules: str
    checks_version: str | None
    entries: list[SubmissionEntry]


def build_submission(manifest: RunManifest, trajectories: Iterable[Trajectory]) -> Submission:
    """The submission of a run's records (each episode once, the last of its records)."""
    return submission_of(manifest, summary_tally(trajectories, ("environment_id", "mode")))


def submission_of(manifest: RunManifest, tally: SummaryTally) -> Submission:
    """The submission of a run whose records ``tally`` (by environment and mode) counted."""
    entries = []
    for values, group in sorted(tally.groups.items()):
        summary = group.summary()
        entries.append(
            SubmissionEntry(
                environment_id=values[0],
                mode=values[1],
                episodes=summary.episodes,
                scored=summary.scored,
                infra_errors=summary.infra_errors,
                environment_errors=summary.environment_errors,
                success_rate=summary.success_rate,
                mean_reward=summary.mean_state_reward,
                pass_hat_k=summary.pass_hat_k,
                total_cost_usd=summary.total_cost_usd,
                versions=group.versions.summary(),
            )
        )
    config = manifest.config
    user_model = config.get("user_model")
    return Submission(
        run_id=manifest.run_id,
        model=str(config.get("model")),
        agent={key: config.get(key) for key in ("agent_kind", "temperature", "max_steps") if key in config},
        user_model=str(user_model) if user_model is not None else None,
        dataset=manifest.dataset.model_dump(mode="json"),
        rules=str(config.get("rules") or "harness"),
        checks_version=manifest.checks_version,
        entries=sorted(entries, key=lambda e: (e.environment_id, e.mode)),
    )


def export_submission(run_dir: Path, out: Path) -> Submission:
    """Write ``run_dir``'s submission to the file ``out``; raises FileNotFoundError/ValueError for a bad folder. The
    records are counted as they are read, once."""
    tally = SummaryTally(("environment_id", "mode"))
    run = open_run(run_dir, tally)
    submission = submission_of(run.manifest, tally)
    write_output_file(out, (submission.model_dump_json(indent=2) + "\n").encode("utf-8"))
    return submission
