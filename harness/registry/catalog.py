"""The benchmarks installed: every :class:`~harness.registry.records.Benchmark` named in the ``harness.benchmarks``
entry-point group, the project's own and any other package's alike, read once per process.

An entry point that does not load, or declares something another benchmark already declared, is reported in one
line (a warning) and left out: one broken package never stops the commands of the others.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from harness.registry.records import NAME_PATTERN, Benchmark
from harness.rules.profiles import DEFAULT_RULES

logger = logging.getLogger(__name__)

GROUP = "harness.benchmarks"
"""The entry-point group a benchmark registers in: ``NAME = "package.module:BENCHMARK"``."""
PROJECT = "envharness"
"""The distribution whose entry points register the project's own benchmarks."""

ENGINE_PACKAGES = frozenset({"harness", "agents", "synth", "leaderboards"})


@dataclass(frozen=True)
class Catalog:
    """The benchmarks that loaded, in the order they are listed (``Benchmark.rank``), and one line per entry point
    left out."""

    benchmarks: tuple[Benchmark, ...]
    problems: tuple[str, ...]


def jail_module_problem(name: str) -> str | None:
    """Why ``name`` cannot be a jail module (None when it can): the standard library's modules are the jail
    policy's to allow or refuse, and the project's own packages never run in the jail."""
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        return f"{name!r} is not a module name"
    if parts[0] in sys.stdlib_module_names or parts[0] in ENGINE_PACKAGES:
        return f"{name!r} is not a third-party module"
    return None


def _load(entry: EntryPoint) -> Benchmark:
    value = entry.load()
    benchmark = value() if callable(value) and not isinstance(value, Benchmark) else value
    if not isinstance(benchmark, Benchmark):
        raise TypeError(f"{entry.value} is a {type(benchmark).__name__}, not a harness.registry.Benchmark")
    if benchmark.name != entry.name:
        raise ValueError(f"{entry.value} is the benchmark {benchmark.name!r}, registered as {entry.name!r}")
    return benchmark


def _clashes(benchmark: Benchmark, taken: dict[str, str]) -> list[str]:
    """What ``benchmark`` declares that an earlier one (or the engine) already did."""
    found = []
    names = [("benchmark", benchmark.name)]
    names += [("rules profile", profile.name) for profile in benchmark.profiles]
    names += [("agent kind", kind.name) for kind in benchmark.agent_kinds]
    names += [("judge kind", kind.name) for kind in benchmark.judge_kinds]
    for what, name in names:
        if what != "benchmark" and NAME_PATTERN.fullmatch(name) is None:
            found.append(f"its {what} {name!r} is not a lowercase name of letters, digits and '-'")
        elif f"{what}:{name}" in taken:
            found.append(f"its {what} {name!r} is already {taken[f'{what}:{name}']}'s")
    found.extend(problem for module in benchmark.jail_modules if (problem := jail_module_problem(module)))
    if benchmark.jail_environment is not None:
        modules = benchmark.jail_environment.modules
        found.extend(problem for module in sorted(modules) if (problem := jail_module_problem(module)))
    return found


def read_catalog(found: Iterable[EntryPoint]) -> Catalog:
    """The benchmarks of ``found`` that load and clash with none before them."""
    benchmarks: list[Benchmark] = []
    problems: list[str] = []
    taken: dict[str, str] = {f"rules profile:{DEFAULT_RULES}": "the engine"}
    for entry in found:
        where = f"benchmark {entry.name!r} ({entry.value})"
        try:
            benchmark = _load(entry)
        except Exception as exc:  # someone else's package: whatever it raises is its own failure, reported
            problems.append(f"{where} does not load: {type(exc).__name__}: {' '.join(str(exc).split())}")
            continue
        clashes = _clashes(benchmark, taken)
        if clashes:
            problems.append(f"{where} is left out: {'; '.join(clashes)}")
            continue
        benchmarks.append(benchmark)
        taken[f"benchmark:{benchmark.name}"] = benchmark.name
        taken.update({f"rules profile:{p.name}": benchmark.name for p in benchmark.profiles})
        taken.update({f"agent kind:{k.name}": benchmark.name for k in benchmark.agent_kinds})
        taken.update({f"judge kind:{k.name}": benchmark.name for k in benchmark.judge_kinds})
    return Catalog(tuple(sorted(benchmarks, key=lambda b: (b.rank, b.name))), tuple(problems))


def project_missing(found: Iterable[EntryPoint]) -> str | None:
    """Why the project's own benchmarks are not among ``found`` (None when they are): its package metadata, which
    holds their entry points, is not on the path."""
    if any(entry.dist is not None and entry.dist.name == PROJECT for entry in found):
        return None
    return (
        f"the project's own benchmarks are not registered: {PROJECT}'s package metadata is not on the path "
        "(install the project, e.g. pip install -e .)"
    )


@functools.cache
def catalog() -> Catalog:
    """The installed benchmarks (read once per process); each entry point left out is logged as a warning, and
    so is a project whose own entry points are missing."""
    found = list(entry_points(group=GROUP))
    read = read_catalog(found)
    missing = project_missing(found)
    for problem in [*read.problems, *([missing] if missing else [])]:
        logger.warning("%s", problem)
    return read
