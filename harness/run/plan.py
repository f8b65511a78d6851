"""What a run will do: the library loaded, the scenarios selected and screened, the rules decided, and one
:class:`EpisodeSpec` per episode, each with its content-hash id."""

from __future__ import annotations

import difflib
import hashlib
import logging
from dataclasses import dataclass

import orjson

from harness.library import Library, LibraryError, load_library
from harness.registry import (
    RunSettings,
    agent_kind_mismatch,
    benchmark_for_source,
    profile_names,
    profile_owner,
    rules_profile,
)
from harness.rules.profiles import DEFAULT_RULES, EpisodeRules, UnknownRules
from harness.rules.prompts import rules_agent_system_prompt, rules_user_system_prompt
from harness.sandbox import SandboxPool
from harness.schema import AgentSettings, Mode, Scenario
from harness.validate import invalid_scenarios

from .config import MODEL_FREE_AGENT_KINDS, RunConfig, RunRefused, agent_settings, user_settings, with_sampling

logger = logging.getLogger(__name__)

LIBRARY = "the library"
"""A setting the library's benchmark recommends (``Benchmark.recommend``)."""
RULES = "the rules"
"""A setting the rules require (a conversation for rules that run only conversations)."""


@dataclass(frozen=True)
class EpisodeSpec:
    episode_id: str
    scenario: Scenario
    mode: Mode
    trial: int
    seed: int


def load_run_library(config: RunConfig) -> Library:
    """The library ``--envs`` names (the bundled seed library by default); one line of refusal when it cannot load."""
    try:
        return load_library(config.envs)
    except LibraryError as exc:
        raise RunRefused(str(exc)) from None
    except ValueError as error:  # a bad Hub id or revision, or records that do not validate
        raise RunRefused(f"cannot load --envs {config.envs}: {error}") from None


def unknown_ids(kind: str, asked: list[str], known: list[str]) -> list[str]:
    """One line per asked id that is not known, with the closest known ones as a hint."""
    problems: list[str] = []
    for name in asked:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=3)
        if close:
            hint = "did you mean " + " or ".join(repr(c) for c in close) + "?"
        elif len(known) <= 12:
            hint = "known: " + ", ".join(known)
        else:
            hint = f"{len(known)} known, e.g. {', '.join(known[:3])}"
        problems.append(f"unknown {kind} {name!r} ({hint})")
    return problems


def selection_problems(library: Library, config: RunConfig) -> list[str]:
    """Everything wrong with what ``config`` asks of ``library``, one line each (empty when the run can go)."""
    problems: list[str] = []
    if library.problems and not config.skip_bad_records:
        problems.extend(f"{library.source.source}: {problem}" for problem in library.problems)
        problems.append(
            f"{len(library.problems)} record(s) of {library.source.source} do not load; fix them, or pass "
            f"--skip-bad-records to run without them"
        )
    if config.env:
        problems.extend(unknown_ids("environment", config.env, sorted({s.environment_id for s in library.scenarios})))
    if config.scenario:
        problems.extend(unknown_ids("scenario", config.scenario, [s.id for s in library.scenarios]))
    return problems


def select_scenarios(library: Library, config: RunConfig) -> list[Scenario]:
    chosen = []
    scripted = 0
    for scenario in library.scenarios:
        if config.env and scenario.environment_id not in config.env:
            continue
        if config.scenario and scenario.id not in config.scenario:
            continue
        if scenario.environment_id not in library.environments and config.mcp is None:
            logger.warning("scenario %s skipped: environment %s is missing", scenario.id, scenario.environment_id)
            continue
        if not scenario.checks and not scenario.turns:
            logger.warning("scenario %s skipped: it has no checks and cannot be scored", scenario.id)
            continue
        if scenario.turns and config.mode in (None, "nonconv"):
            scripted += 1
            continue
        chosen.append(scenario)
    if scripted:
        message = f"{scripted} scenarios have scripted user turns and run only with --mode conv"
        if not chosen:
            raise RunRefused(message)
        logger.warning("%s; skipped", message)
    if config.limit is not None:
        chosen = chosen[: config.limit]
    return chosen


def recommended_settings(library: Library, config: RunConfig) -> RunSettings:
    """The run settings the selected environments' benchmark recommends (``Benchmark.recommend``), read from the
    records' ``provenance.source``, so a library imported before recommendations existed gets them too. None when
    the environments come from no benchmark, or from several (the run then says so and uses the defaults)."""
    chosen = {
        scenario.environment_id
        for scenario in library.scenarios
        if (not config.env or scenario.environment_id in config.env)
        and (not config.scenario or scenario.id in config.scenario)
    }
    environments = [library.environments[e] for e in sorted(chosen) if e in library.environments]
    sources = {environment.provenance.source for environment in environments}
    owners = {source: owner for source in sources if (owner := benchmark_for_source(source)) is not None}
    if len(sources) != 1 or not owners:
        if owners:
            logger.warning(
                "the selected environments come from %s; running with the default settings",
                " and ".join(sorted(sources)),
            )
        return RunSettings()
    (owner,) = owners.values()
    return owner.recommend(environments)


def resolve_settings(config: RunConfig, library: Library) -> tuple[RunConfig, dict[str, str]]:
    """``config`` with its rules, mode, user model and step limit decided, and where each one not given came from.

    What the user gives wins. The rules not given are the library's recommendation, else ``harness``. The
    recommendation's other settings apply when the rules are the recommending benchmark's; a mode not given is
    then the recommendation's, else a conversation for rules that run only conversations, else ``nonconv``."""
    recommended = recommended_settings(library, config)
    update: dict[str, object] = {}
    origins: dict[str, str] = {}
    if config.rules is None:
        update["rules"] = recommended.rules or DEFAULT_RULES
        if recommended.rules is not None:
            origins["rules"] = LIBRARY
    rules = str(update.get("rules", config.rules))
    target = recommended.rules or DEFAULT_RULES
    try:
        profile, recommended_profile = rules_profile(rules), rules_profile(target)
    except UnknownRules as error:
        raise RunRefused(f"--rules {rules!r}: use one of {', '.join(profile_names())}") from error
    owner = profile_owner(profile)
    applies = rules == target or (owner is not None and owner is profile_owner(recommended_profile))
    if config.mode is None:
        if applies and recommended.mode is not None:
            update["mode"], origins["mode"] = recommended.mode, LIBRARY
        elif profile.conversation_only:
            update["mode"], origins["mode"] = "conv", RULES
        else:
            update["mode"] = "nonconv"
    if applies and config.user_model is None and recommended.user_model is not None:
        update["user_model"], origins["user_model"] = recommended.user_model, LIBRARY
    if applies and config.max_steps is None and recommended.max_steps is not None:
        update["max_steps"], origins["max_steps"] = recommended.max_steps, LIBRARY
    return with_sampling(config.model_copy(update=update)), origins


def resolve_rules(config: RunConfig, library: Library, scenarios: list[Scenario]) -> RunConfig:
    """``config`` with its settings decided (:func:`resolve_settings`); refuses, in one line, rules that cannot
    run this selection."""
    config, _ = resolve_settings(config, library)
    problem = rules_mismatch(config, library, scenarios)
    if problem is not None:
        raise RunRefused(problem)
    return config


def rules_mismatch(config: RunConfig, library: Library, scenarios: list[Scenario]) -> str | None:
    """Why the config's rules cannot run these scenarios (None when it can)."""
    profile = rules_profile(config.rules)
    if profile.conversation_only and config.mode != "conv":
        return f"--rules {profile.name} runs conversations only: use --mode conv (not {config.mode})"
    agent_problem = agent_kind_mismatch(profile, config.agent_kind, config.agent_kind in MODEL_FREE_AGENT_KINDS)
    if agent_problem is not None:
        return agent_problem
    if profile.required_source is None:
        return prompt_problems(profile, config.mode, library, scenarios)
    foreign = sorted(
        {
            s.environment_id
            for s in scenarios
            if (environment := library.environments.get(s.environment_id)) is None
            or environment.provenance.source != profile.required_source
        }
    )
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        return (
            f"--rules {profile.name} runs only environments imported with `harness import {profile.required_source}`; "
            f"{shown} {'is' if len(foreign) == 1 else 'are'} not"
        )
    return prompt_problems(profile, config.mode, library, scenarios)


def prompts_missing(profile: EpisodeRules, library: Library, scenarios: list[Scenario]) -> str | None:
    """The first scenario whose records cannot give the profile's prompts, as one line."""
    if profile.prompts.missing is None:
        return None
    for scenario in scenarios:
        environment = library.environments.get(scenario.environment_id)
        problem = None if environment is None else profile.prompts.missing(environment, scenario)
        if problem is not None:
            return f"--rules {profile.name}: {scenario.id}: {problem}"
    return None


def prompt_problems(profile: EpisodeRules, mode: str | None, library: Library, scenarios: list[Scenario]) -> str | None:
    """Why the rules' prompts cannot be given for some scenario (its records lack what they are built from)."""
    return prompts_missing(profile, library, scenarios) or prompt_problem(profile, mode, library, scenarios)


def prompt_problem(profile: EpisodeRules, mode: str | None, library: Library, scenarios: list[Scenario]) -> str | None:
    """Why the rules' own prompts cannot be built for some scenario (a profile whose prompts are read from the
    benchmark's source refuses a scenario imported before they were stored), None when they all can."""
    if profile.prompts.agent is None and profile.prompts.user is None:
        return None
    agent_mode: Mode = "conv" if mode == "conv" else "nonconv"
    for scenario in scenarios:
        environment = library.environments.get(scenario.environment_id)
        try:
            if environment is not None and profile.prompts.agent is not None:
                rules_agent_system_prompt(environment, agent_mode, profile, scenario=scenario)
            if mode in ("conv", "both") and profile.prompts.user is not None:
                rules_user_system_prompt(scenario, profile)
        except ValueError as exc:
            return str(exc)
    return None


async def drop_invalid(
    pool: SandboxPool, library: Library, scenarios: list[Scenario], config: RunConfig
) -> tuple[list[Scenario], dict[str, str]]:
    """The scenarios to run and the invalid ones left out (id → problems), by the cheap validation.

    With ``include_invalid`` nothing is left out (the invalid ones are still named). Refuses the run when
    nothing valid is left.
    """
    invalid = await invalid_scenarios(pool, library, scenarios)
    for scenario_id, problem in invalid.items():
        action = "running it anyway (--include-invalid)" if config.include_invalid else "left out"
        logger.warning("scenario %s is invalid, %s: %s", scenario_id, action, problem)
    if config.include_invalid or not invalid:
        return scenarios, invalid
    kept = [s for s in scenarios if s.id not in invalid]
    if not kept:
        names = ", ".join(sorted(invalid))
        raise RunRefused(f"every selected scenario is invalid ({names}); fix them or pass --include-invalid")
    return kept, invalid


def episode_id(
    scenario: Scenario, mode: str, agent: AgentSettings, user: AgentSettings | None, trial: int, config: RunConfig
) -> str:
    """A content hash of what produces the episode: the same inputs always get the same id."""
    key = {
        "scenario": scenario.id,
        "environment": scenario.environment_id,
        "mode": mode,
        "agent": agent.model_dump(mode="json"),
        "user": user.model_dump(mode="json") if user is not None else None,
        "max_steps": config.max_steps,
        "trial": trial,
        "mcp": config.public_mcp,
    }
    if config.rules not in (None, DEFAULT_RULES):
        # Only a non-default profile enters the key, so ids of runs made before profiles existed stay the same.
        key["rules"] = config.rules
    return hashlib.sha256(orjson.dumps(key, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20]


def plan_episodes(scenarios: list[Scenario], config: RunConfig) -> list[EpisodeSpec]:
    modes: list[Mode] = ["nonconv", "conv"] if config.mode == "both" else [config.mode or "nonconv"]
    agent = agent_settings(config)
    user = user_settings(config)
    specs = []
    for scenario in scenarios:
        for mode in modes:
            if scenario.turns and mode == "nonconv":
                continue  # scripted turns are a conversation
            for trial in range(config.trials):
                identifier = episode_id(scenario, mode, agent, user if mode == "conv" else None, trial, config)
                seed = int(identifier[:8], 16) ^ config.seed
                specs.append(EpisodeSpec(identifier, scenario, mode, trial, seed))
    return specs


def nothing_to_run(library: Library, config: RunConfig) -> RunRefused:
    """The refusal of a selection that leaves no episode, naming the filters that emptied it."""
    return RunRefused(
        f"no episodes to run: no scenario of {library.source.source} with checks matches "
        + (" ".join(f"--env {e}" for e in config.env) + " " if config.env else "")
        + (" ".join(f"--scenario {s}" for s in config.scenario) + " " if config.scenario else "")
        + (f"--limit {config.limit}" if config.limit is not None else "")
        + " (harness validate shows what the library holds)"
    )


async def check_served_environments(config: RunConfig, scenarios: list[Scenario]) -> None:
    """With ``--mcp``, the server must serve the selected scenarios' environments."""
    if config.mcp is None:
        return
    from harness.mcp import EnvironmentMismatch, McpConnectionError, check_served_environment

    try:
        await check_served_environment(config.mcp, {s.environment_id for s in scenarios})
    except EnvironmentMismatch as error:
        raise RunRefused(str(error)) from error
    except McpConnectionError as error:
        raise RunRefused(f"cannot use --mcp {config.public_mcp}: {error}") from error
