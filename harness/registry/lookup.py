"""Questions the engine asks of the installed benchmarks: a profile by name, the benchmark of a source, the jail
modules, the agent kinds. Each answer is read from the records of :func:`~harness.registry.catalog.catalog`."""

from __future__ import annotations

from harness.registry.catalog import catalog
from harness.registry.records import AgentKind, Benchmark, JudgeKind, RewardComponent
from harness.rules.profiles import DEFAULT_RULES, HARNESS_RULES, EpisodeRules, UnknownRules
from harness.schema.jail import JailEnvironment


class UnknownBenchmark(ValueError):
    """A name that no installed benchmark has."""


def benchmarks() -> tuple[Benchmark, ...]:
    """Every installed benchmark, in the order they are listed (``Benchmark.rank``, then name)."""
    return catalog().benchmarks


def benchmark(name: str) -> Benchmark:
    """The installed benchmark called ``name``."""
    for found in benchmarks():
        if found.name == name:
            return found
    known = ", ".join(b.name for b in benchmarks()) or "none"
    raise UnknownBenchmark(f"no benchmark {name!r} is installed (installed: {known})")


def benchmark_for_source(source: str | None) -> Benchmark | None:
    """The benchmark whose importer writes ``source`` as a record's ``provenance.source`` (None: not one)."""
    return next((b for b in benchmarks() if b.name == source), None)


def profiles() -> dict[str, EpisodeRules]:
    """Every rules profile by name: the engine's own first, then each benchmark's."""
    found = {DEFAULT_RULES: HARNESS_RULES}
    for owner in benchmarks():
        found.update({profile.name: profile for profile in owner.profiles})
    return found


def profile_names() -> tuple[str, ...]:
    return tuple(profiles())


def rules_profile(name: str | EpisodeRules | None = None) -> EpisodeRules:
    """The profile called ``name`` (None: the default, ``harness``); a profile given is returned as it is."""
    if isinstance(name, EpisodeRules):
        return name
    found = profiles().get(name or DEFAULT_RULES)
    if found is None:
        raise UnknownRules(f"unknown episode rules {name!r}; choose one of: {', '.join(profile_names())}")
    return found


def profile_owner(rules: EpisodeRules) -> Benchmark | None:
    """The benchmark that declares ``rules`` (None: the engine's own profile)."""
    return next((b for b in benchmarks() if rules.name in {p.name for p in b.profiles}), None)


def agent_kinds() -> tuple[AgentKind, ...]:
    """The agents the installed benchmarks bring."""
    return tuple(kind for owner in benchmarks() for kind in owner.agent_kinds)


def judge_kind(name: str) -> JudgeKind | None:
    """The judge kind an installed benchmark declares under ``name`` (None: none does)."""
    return next((kind for owner in benchmarks() for kind in owner.judge_kinds if kind.name == name), None)


def agent_kind_mismatch(rules: EpisodeRules, agent_kind: str, model_free: bool) -> str | None:
    """Why ``agent_kind`` cannot run under ``rules`` (None when it can): a kind a profile claims runs only under
    that profile, and a profile that claims kinds runs no other model-backed kind."""
    if rules.agent_kinds is not None:
        if model_free or agent_kind in rules.agent_kinds:
            return None
        return (
            f"--rules {rules.name} runs the agent {' or '.join(rules.agent_kinds)}: use --agent {rules.agent_kinds[0]}"
        )
    owners = [p.name for p in profiles().values() if agent_kind in (p.agent_kinds or ())]
    if owners:
        return f"--agent {agent_kind} runs only under --rules {' or '.join(owners)}"
    return None


def jail_modules() -> frozenset[str]:
    """The third-party modules environments' code may import in the jail: those the benchmarks declare."""
    declared = {module for owner in benchmarks() for module in owner.jail_modules}
    # An environment's top-level names only: its submodules are imported ahead by its own pools alone.
    declared.update(
        module.split(".")[0]
        for owner in benchmarks()
        if owner.jail_environment is not None
        for module in owner.jail_environment.modules
    )
    return frozenset(declared)


def jail_environments() -> dict[str, JailEnvironment]:
    """The jail environments the installed benchmarks declare, by the benchmark's name (its libraries'
    ``provenance.source``)."""
    return {owner.name: owner.jail_environment for owner in benchmarks() if owner.jail_environment is not None}


def released_sources() -> frozenset[str]:
    """The sources whose scenarios are a released benchmark's tasks, kept as released (see
    ``Benchmark.tasks_as_released``)."""
    return frozenset(b.name for b in benchmarks() if b.tasks_as_released)


def reward_components() -> dict[str, RewardComponent]:
    """The rewards the benchmarks define, by name."""
    return {name: component for owner in benchmarks() for name, component in owner.reward_components.items()}


def card_citations() -> list[tuple[str, str]]:
    """The works every dataset card cites, as the benchmarks declare them: (title, BibTeX entry)."""
    return [(b.title, b.card_citation) for b in benchmarks() if b.card_citation]
