"""The documented run API (``harness.runner.RunConfig``, ``harness.runner.run``), kept where it always was;
the run itself lives in the layers of :mod:`harness.run`."""

from harness.run.backend import EpisodeBackend, EpisodeJob
from harness.run.config import (
    MODEL_FREE_AGENT_KINDS,
    RESULT_SETTINGS,
    ModelUnavailable,
    RunConfig,
    RunRefused,
    agent_settings,
    models_in_use,
    user_settings,
)
from harness.run.driver import episodes_in_flight, run
from harness.run.episodes import AgentFactory, UserFactory
from harness.run.folder import build_manifest, check_resumable, default_run_dir
from harness.run.plan import (
    EpisodeSpec,
    drop_invalid,
    episode_id,
    plan_episodes,
    resolve_rules,
    select_scenarios,
    selection_problems,
    suggested_rules,
)
from harness.run.progress import (
    ProgressCallback,
    RunOutcome,
    RunPlan,
    RunProgress,
    StartCallback,
    environment_error_causes,
    infra_error_causes,
)

__all__ = [
    "MODEL_FREE_AGENT_KINDS",
    "RESULT_SETTINGS",
    "AgentFactory",
    "EpisodeBackend",
    "EpisodeJob",
    "EpisodeSpec",
    "ModelUnavailable",
    "ProgressCallback",
    "RunConfig",
    "RunOutcome",
    "RunPlan",
    "RunProgress",
    "RunRefused",
    "StartCallback",
    "UserFactory",
    "agent_settings",
    "build_manifest",
    "check_resumable",
    "default_run_dir",
    "drop_invalid",
    "environment_error_causes",
    "episode_id",
    "episodes_in_flight",
    "infra_error_causes",
    "models_in_use",
    "plan_episodes",
    "resolve_rules",
    "run",
    "select_scenarios",
    "selection_problems",
    "suggested_rules",
    "user_settings",
]
