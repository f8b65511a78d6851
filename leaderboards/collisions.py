"""Two runs that hold the same episode id must hold the same episode.

An episode id is a hash of what produced the episode (scenario, environment, mode, trial, the agent's and the
user's settings, the step limit, the transport, the rules; ``harness.run.plan.episode_id``), so the same id in two
runs is the same episode run again, and a leaderboard keeps the later run's. Run folders can come from
submitters, though: two runs whose ids collide under different models or settings are refused, naming both run
folders and the first setting that differs, rather than one silently replacing the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.errors import BadInput
from harness.schema import AgentSettings, RunManifest, Trajectory


class EpisodeCollisionError(BadInput):
    """Two runs hold one episode id under different models or settings."""


def _flat(prefix: str, value: Any, into: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            _flat(f"{prefix}.{key}" if prefix else str(key), value[key], into)
    else:
        into[prefix] = value


def _settings(settings: AgentSettings | None) -> Any:
    return settings.model_dump(mode="json") if settings is not None else None


def episode_identity(trajectory: Trajectory, run_settings: dict[str, object]) -> dict[str, Any]:
    """What an episode id stands for, as ``setting name → value``, the most telling first (the model)."""
    identity: dict[str, Any] = {
        "model": trajectory.agent.model.model,
        "scenario": trajectory.scenario_id,
        "environment": trajectory.environment_id,
        "mode": trajectory.mode,
        "trial": trajectory.trial,
    }
    _flat("agent", _settings(trajectory.agent), identity)
    _flat("user", _settings(trajectory.user), identity)
    for key in ("transport", "max_steps", "rules"):
        identity[key] = run_settings.get(key)
    return identity


def first_difference(one: dict[str, Any], other: dict[str, Any]) -> str | None:
    for key in [*one, *(k for k in other if k not in one)]:
        if one.get(key) != other.get(key):
            return key
    return None


def check_episode_collisions(
    runs: Sequence[tuple[Path, RunManifest, Sequence[Trajectory]]],
    run_settings: Callable[[RunManifest], dict[str, object]],
    dataset_key: Callable[[RunManifest], object],
) -> None:
    """Raise :class:`EpisodeCollisionError` when an episode id of one run is in another under a different model or
    setting (an id repeated under the same ones is a re-run: the later run's counts)."""
    seen: dict[str, tuple[int, Trajectory]] = {}
    for index, (_, _, trajectories) in enumerate(runs):
        for trajectory in trajectories:
            earlier = seen.setdefault(trajectory.episode_id, (index, trajectory))
            if earlier[0] == index:
                continue
            first_dir, first_manifest, _ = runs[earlier[0]]
            run_dir, manifest, _ = runs[index]
            before = episode_identity(earlier[1], run_settings(first_manifest))
            after = episode_identity(trajectory, run_settings(manifest))
            # The checks' version is compared between runs of one environment set only, and only when both runs
            # recorded one: a run and its re-scoring on an edited set share their ids by design.
            if dataset_key(first_manifest) == dataset_key(manifest) and None not in (
                first_manifest.checks_version,
                manifest.checks_version,
            ):
                before["checks"], after["checks"] = first_manifest.checks_version, manifest.checks_version
            setting = first_difference(before, after)
            if setting is not None:
                raise EpisodeCollisionError(
                    f"episode {_shown(trajectory.episode_id)} is in {first_dir} and in {run_dir} under different "
                    f"settings ({setting}: {_shown(before.get(setting))} in {first_dir}, "
                    f"{_shown(after.get(setting))} in {run_dir}); one episode id must be one episode, so these runs "
                    "cannot share a leaderboard"
                )


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
