"""TRL's ``environment_factory``: objects whose public methods are an environment's tools, each forwarded to the jail.

``GRPOTrainer`` makes one object per concurrent rollout, calls ``reset(**row)`` with the dataset row, exposes every
other public method as a tool (its schema read from the signature and docstring, which say exactly what our tool
spec says) and adds ``get_reward()`` as a reward column. None of the environment's code runs in the trainer's
process: the session lives in a confined child of the sandbox pool, reached through a background event loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.episode_factory import EpisodeRecipe
from harness.library import Library, load_library
from harness.registry import rules_profile
from harness.rules.profiles import DEFAULT_RULES, RulesName
from harness.sandbox import SandboxLimits
from harness.schema import Environment, Mode, ToolSpec
from harness.scoring.reward import CompositeWeights
from harness.toolspec import derive_tools
from harness.train.jail_thread import JailThread
from harness.train.jailed_episode import NOT_STARTED, EpisodeSettings, JailedEpisode, RolloutOutcome
from harness.train.rows import void_text


class JailedToolEnvironment:
    """Base of the generated per-environment classes. Only ``reset`` and ``get_reward`` are public functions
    here: TRL would take any other public function for a tool."""

    jail: JailThread
    settings: EpisodeSettings

    def __init__(self) -> None:
        self._episode = JailedEpisode(self.settings, self.jail.pool)

    @property
    def outcome(self) -> RolloutOutcome | None:
        """How the current rollout ended (None while it runs)."""
        return self._episode.outcome

    def reset(self, **row: Any) -> str | None:
        """Open a jailed session for the row's ``scenario_id`` (with its ``seed``, 0 when absent); the task text (in
        conversational mode, the simulated user's first message). A row that cannot start a rollout (no or an
        unknown scenario, a seed that is not a 64-bit integer, ...; ``harness.train.rows``), or an environment that
        fails to load, ends the rollout at once: the text then says the rollout is void and why
        (``rows.void_text``), ``outcome`` holds the reason, tools run nothing and ``get_reward`` is 0."""
        messages = self.jail.run(self._episode.open_row(row))
        if not messages:
            outcome = self._episode.outcome
            reason, detail = (outcome.reason, outcome.detail) if outcome is not None else (NOT_STARTED, None)
            return void_text(reason, detail)
        if messages[-1].get("role") != "user":
            return None
        content = messages[-1].get("content")
        return content if isinstance(content, str) else None

    def get_reward(self) -> float:
        """The rules' reward of the rollout; 0.0 when it ended without one (a void rollout, a failure)."""
        outcome = finish_rollout(self)
        if outcome.reward is None:
            return 0.0
        value = outcome.reward.composite
        return float(value if value is not None else outcome.reward.state_reward)

    def _forward(self, name: str, arguments: dict[str, Any]) -> str:
        return self.jail.run(self._episode.call(name, arguments))


def finish_rollout(environment: JailedToolEnvironment, final_text: str = "") -> RolloutOutcome:
    """End ``environment``'s rollout with the agent's last reply and score it (once; later calls read it)."""
    return environment.jail.run(environment._episode.end(final_text))


def _class_name(environment_id: str) -> str:
    words = re.split(r"[^0-9A-Za-z]+", environment_id)
    name = "".join(word[:1].upper() + word[1:] for word in words if word) or "Tool"
    return name if name[0].isalpha() else f"Env{name}"


def environment_tools(environment: Environment) -> list[ToolSpec]:
    return list(environment.tools) or derive_tools(environment.code, environment.class_name)


def environment_class(environment: Environment, jail: JailThread, settings: EpisodeSettings) -> type:
    """A :class:`JailedToolEnvironment` subclass with one method per tool of ``environment``."""
    from harness.train.tool_methods import tool_method

    def forward(self: JailedToolEnvironment, name: str, arguments: dict[str, Any]) -> str:
        return self._forward(name, arguments)

    methods = {spec.function.name: tool_method(spec, forward) for spec in environment_tools(environment)}
    namespace: dict[str, Any] = {"jail": jail, "settings": settings, "__module__": __name__, **methods}
    return type(f"{_class_name(environment.id)}Environment", (JailedToolEnvironment,), namespace)


def as_library(envs: Library | str | Path | None) -> Library:
    return envs if isinstance(envs, Library) else load_library(envs)


def environment_factory(
    envs: Library | str | Path | None = None,
    *,
    rules: RulesName = DEFAULT_RULES,
    mode: Mode = "nonconv",
    include_invalid: bool = False,
    environments: list[str] | None = None,
    user: Any = None,
    max_steps: int | None = None,
    weights: CompositeWeights | None = None,
    allow_weak_sandbox: bool = False,
    workers: int | None = None,
    limits: SandboxLimits | None = None,
    jail: JailThread | None = None,
) -> Callable[[], JailedToolEnvironment] | dict[str, Callable[[], JailedToolEnvironment]]:
    """What ``GRPOTrainer(environment_factory=...)`` takes, for the environments of ``envs`` (a library, a folder
    or a Hub dataset id; the seed library by default).

    One environment gives a zero-argument factory; several give ``{environment id: factory}``, which TRL picks
    from by each row's ``environment`` column (:func:`harness.train.trl_dataset.prompt_dataset` writes it).
    Conversational mode (``user``: a user policy or a function from the scenario to one) needs a rollout that
    answers the user, :func:`harness.train.trl_rollout.rollout_func`: TRL's own tool loop ends at the agent's
    first reply. All instances share one sandbox pool on one background loop (``jail``, made here unless given).
    """
    library = as_library(envs)
    if mode == "conv" and user is None:
        raise ValueError("conversational mode needs a simulated user policy (user=...)")
    chosen = environments if environments is not None else sorted(library.environments)
    missing = [name for name in chosen if name not in library.environments]
    if missing:
        raise ValueError(f"environments not in the library: {', '.join(missing)}")
    if not chosen:
        raise ValueError("the library holds no environments")
    jail = jail or JailThread(
        library.jail(
            [scenario for scenario in library.scenarios if scenario.environment_id in chosen],
            allow_weak_sandbox=allow_weak_sandbox,
            workers=workers,
            limits=limits,
        )
    )
    factories: dict[str, Callable[[], JailedToolEnvironment]] = {}
    for environment_id in chosen:
        settings = EpisodeSettings(
            library=library,
            environment_id=environment_id,
            recipe=EpisodeRecipe(
                mode=mode,
                max_steps=max_steps,
                reward_weights=weights or CompositeWeights(),
                rules=rules_profile(rules),
                screen=not include_invalid,
                allow_weak_sandbox=allow_weak_sandbox,
            ),
            user=user,
        )
        factories[environment_id] = environment_class(library.environments[environment_id], jail, settings)
    if len(factories) == 1:
        return next(iter(factories.values()))
    return factories
