"""The run as named layers: ``config`` (what ``harness run`` takes), ``plan`` (selection, rules, screening,
episode ids), ``folder`` (manifest and resume), ``episodes`` (one episode), ``backend`` (the protocol of where
episodes run), ``local`` (the local backend), ``progress`` (what the caller is told) and ``driver`` (``run``:
load → check → plan → folder → backend → summarize)."""

from harness.run.backend import EpisodeBackend, EpisodeJob
from harness.run.config import ModelUnavailable, RunConfig, RunRefused
from harness.run.driver import run
from harness.run.episodes import AgentFactory, EpisodeContext, UserFactory, run_one_episode
from harness.run.local import LocalBackend
from harness.run.plan import EpisodeSpec
from harness.run.progress import RunOutcome, RunPlan, RunProgress, RunTally

__all__ = [
    "AgentFactory",
    "EpisodeBackend",
    "EpisodeContext",
    "EpisodeJob",
    "EpisodeSpec",
    "LocalBackend",
    "ModelUnavailable",
    "RunConfig",
    "RunOutcome",
    "RunPlan",
    "RunProgress",
    "RunRefused",
    "RunTally",
    "UserFactory",
    "run",
    "run_one_episode",
]
