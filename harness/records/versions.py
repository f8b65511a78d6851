"""Content hashes of what grades an episode, recorded on every trajectory (``Trajectory.versions``).

A benchmark's graders change after numbers are published; these hashes say exactly which environment code,
scenario and checks produced a verdict, so a leaderboard never merges verdicts of different checks and
``harness rescore`` can refuse an episode whose environment changed under it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from typing import TypeVar

import orjson
from pydantic import BaseModel, Field

from harness import __version__
from harness.records.scenario_json import scenario_json
from harness.schema import Environment, RecordVersions, Scenario, Trajectory

HASH_DIGITS = 16

_Key = TypeVar("_Key", str, tuple[str, str, str])

# What a scenario hash leaves out: the checks (hashed on their own), and what never reaches an episode.
SCENARIO_EXCLUDED = frozenset({"checks", "judged_checks", "provenance", "tags", "difficulty", "schema_version"})


def content_hash(value: object) -> str:
    """Sixteen hex digits of a SHA-256 over ``value``'s canonical JSON (sorted keys)."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()[:HASH_DIGITS]


def environment_hash(environment: Environment) -> str:
    """What decides how the environment's tools behave: its class, code, tool schemas and call dispatcher."""
    return content_hash(
        {
            "class_name": environment.class_name,
            "code": environment.code,
            "tools": [tool.model_dump(mode="json") for tool in environment.tools],
            "call_dispatcher": environment.call_dispatcher,
        }
    )


def scenario_hash(scenario: Scenario) -> str:
    """The scenario as an episode meets it: its id, environment, initial state, task, user, reference actions and
    scripted turns (everything but its checks and its provenance)."""
    return hashlib.sha256(scenario_json(scenario, SCENARIO_EXCLUDED, sort_keys=True)).hexdigest()[:HASH_DIGITS]


def checks_hash(scenario: Scenario) -> str:
    """What decides a verdict: each check's id, source and gate, in order, then each LLM-judged check whole (a
    scenario without judged checks hashes as before they existed)."""
    checks: list[object] = [[check.id, check.source, check.gate] for check in scenario.checks]
    checks += [judged.model_dump(mode="json") for judged in scenario.judged_checks]
    return content_hash(checks)


def library_checks_hash(scenarios: Iterable[Scenario]) -> str:
    """One hash over every scenario's checks (by environment and scenario id): runs of one library version share it
    whatever scenarios they selected."""
    pairs = sorted((s.environment_id, s.id, checks_hash(s)) for s in scenarios)
    return content_hash(pairs)


def record_versions(environment: Environment | None, scenario: Scenario, rules: str) -> RecordVersions:
    return RecordVersions(
        environment=environment_hash(environment) if environment is not None else None,
        scenario=scenario_hash(scenario),
        checks=checks_hash(scenario),
        rules=rules,
        package=__version__,
    )


class VersionsSummary(BaseModel):
    """Which versions a group of episodes' numbers came from."""

    environments: list[str] = Field(default_factory=list, description="Environment code versions (by hash).")
    checks: str | None = Field(
        default=None, description="One hash over the (scenario, checks version) pairs of the episodes."
    )
    rules: list[str] = Field(default_factory=list)
    packages: list[str] = Field(default_factory=list)
    unversioned_episodes: int = Field(default=0, description="Episodes recorded before versions existed.")


class VersionsTally:
    """The versions of a group of episodes, counted as they come and go (a record replaced by a later line is taken
    out): :meth:`summary` is :func:`versions_of` of the episodes it holds."""

    def __init__(self) -> None:
        self.episodes = 0
        self.environments: Counter[str] = Counter()
        self.rules: Counter[str] = Counter()
        self.packages: Counter[str] = Counter()
        self.pairs: Counter[tuple[str, str, str]] = Counter()
        """(environment, scenario, checks version) of the versioned episodes."""

    def count(self, trajectory: Trajectory, times: int = 1) -> None:
        """Count ``trajectory`` (``times=-1`` takes it out)."""
        self.episodes += times
        versions = trajectory.versions
        if versions is None:
            return
        if versions.environment is not None:
            _count(self.environments, versions.environment, times)
        _count(self.rules, versions.rules, times)
        _count(self.packages, versions.package, times)
        _count(self.pairs, (trajectory.environment_id, trajectory.scenario_id, versions.checks), times)

    def merge(self, other: VersionsTally) -> None:
        self.episodes += other.episodes
        for mine, theirs in (
            (self.environments, other.environments),
            (self.rules, other.rules),
            (self.packages, other.packages),
        ):
            mine.update(theirs)
        self.pairs.update(other.pairs)

    def summary(self) -> VersionsSummary:
        pairs = sorted(self.pairs)
        return VersionsSummary(
            environments=sorted(self.environments),
            checks=content_hash(pairs) if pairs else None,
            rules=sorted(self.rules),
            packages=sorted(self.packages),
            unversioned_episodes=self.episodes - self.rules.total(),
        )


def _count(counter: Counter[_Key], key: _Key, times: int) -> None:
    counter[key] += times
    if counter[key] <= 0:
        del counter[key]


def versions_of(trajectories: Iterable[Trajectory]) -> VersionsSummary:
    tally = VersionsTally()
    for trajectory in trajectories:
        tally.count(trajectory)
    return tally.summary()
