"""The run: ``run`` and ``RunConfig`` are the documented API (every ``harness run`` flag is a keyword of
``RunConfig``). Its layers: ``config`` (what ``harness run`` takes), ``plan`` (selection, rules, screening,
episode ids), ``folder`` (manifest and resume), ``episodes`` (one episode), ``backend`` (the protocol of where
episodes run), ``local`` (the local backend), ``progress`` (what the caller is told) and ``driver`` (``run``:
load → check → plan → folder → backend → summarize; on a Ray cluster when ``RunConfig.ray`` is set)."""

from harness.run.backend import EpisodeBackend, EpisodeJob
from harness.run.config import (
    MODEL_FREE_AGENT_KINDS,
    RESULT_SETTINGS,
    ModelUnavailable,
    RunConfig,
    RunRefused,
    agent_settings,
    models_in_use,
    role_models,
    sent_sampling,
    user_settings,
    with_sampling,
)
from harness.run.driver import cluster_backend, episodes_in_flight, run
from harness.run.episodes import AgentFactory, EpisodeContext, UserFactory, run_one_episode
from harness.run.folder import build_manifest, check_resumable, default_run_dir
from harness.run.local import LocalBackend
from harness.run.plan import (
    EpisodeSpec,
    drop_invalid,
    episode_id,
    plan_episodes,
    recommended_settings,
    resolve_rules,
    resolve_settings,
    rules_mismatch,
    select_scenarios,
    selection_problems,
)
from harness.run.progress import (
    ProgressCallback,
    RunOutcome,
    RunPlan,
    RunProgress,
    RunTally,
    StartCallback,
    environment_error_causes,
    infra_error_causes,
)

__all__ = [
    "MODEL_FREE_AGENT_KINDS",
    "RESULT_SETTINGS",
    "AgentFactory",
    "EpisodeBackend",
    "EpisodeContext",
    "EpisodeJob",
    "EpisodeSpec",
    "LocalBackend",
    "ModelUnavailable",
    "ProgressCallback",
    "RunConfig",
    "RunOutcome",
    "RunPlan",
    "RunProgress",
    "RunRefused",
    "RunTally",
    "StartCallback",
    "UserFactory",
    "agent_settings",
    "build_manifest",
    "check_resumable",
    "cluster_backend",
    "default_run_dir",
    "drop_invalid",
    "environment_error_causes",
    "episode_id",
    "episodes_in_flight",
    "infra_error_causes",
    "models_in_use",
    "plan_episodes",
    "recommended_settings",
    "resolve_rules",
    "resolve_settings",
    "role_models",
    "rules_mismatch",
    "run",
    "run_one_episode",
    "select_scenarios",
    "selection_problems",
    "sent_sampling",
    "user_settings",
    "with_sampling",
]
