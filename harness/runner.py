"""The documented run API (``harness.runner.RunConfig``, ``harness.runner.run``), kept where it always was;
the run itself lives in the layers of :mod:`harness.run`. This module sits above both the run and the cluster
package, so it is where ``RunConfig.ray`` becomes a backend (the run's layers never import the cluster code)."""

from typing import Any

from harness.run import driver
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
from harness.run.driver import episodes_in_flight
from harness.run.episodes import AgentFactory, UserFactory
from harness.run.folder import build_manifest, check_resumable, default_run_dir
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
    StartCallback,
    environment_error_causes,
    infra_error_causes,
)


async def run(config: RunConfig, *, backend: EpisodeBackend | None = None, **options: Any) -> RunOutcome:
    """:func:`harness.run.driver.run` (same keyword options), on a Ray cluster when ``config.ray`` is set and no
    other ``backend`` is given (``harness.distributed`` is imported only then: a local run never loads Ray)."""
    if backend is None and config.ray is not None:
        from harness.distributed import RayBackend

        backend = RayBackend(config.ray)
    return await driver.run(config, backend=backend, **options)


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
    "recommended_settings",
    "resolve_rules",
    "resolve_settings",
    "rules_mismatch",
    "run",
    "select_scenarios",
    "selection_problems",
    "user_settings",
]
