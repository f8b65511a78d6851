"""A benchmark is one package: the five the project ships are found through the ``harness.benchmarks`` entry
points like any other, no engine module outside ``harness/benchmarks/`` names one, and an entry point that does
not load, or declares what another already did, is left out with one line."""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest

from harness.registry import (
    GROUP,
    Benchmark,
    UnknownBenchmark,
    benchmark,
    benchmark_for_source,
    benchmarks,
    jail_module_problem,
    profile_names,
    project_missing,
    read_catalog,
    rules_profile,
)
from harness.rules.profiles import HARNESS_RULES, UnknownRules

REPO = Path(__file__).resolve().parents[2]
ENGINE_FOLDERS = ("harness", "agents", "synth", "leaderboards")
BENCHMARK_NAMES = re.compile(r"tau2|taubench|tau_bench|tau-bench|acebench|bfcl|envscaler|vitabench", re.IGNORECASE)
SHIPPED = {"envscaler", "tau2", "taubench", "acebench", "bfcl"}


def test_no_engine_module_outside_the_benchmark_packages_names_a_benchmark() -> None:
    found = []
    packages = REPO / "harness" / "benchmarks"
    for folder in ENGINE_FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            if not path.is_file() or path.is_relative_to(packages) or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(REPO)
            if BENCHMARK_NAMES.search(str(relative)):
                found.append(f"{relative} (its path)")
            text = path.read_bytes().decode("utf-8", errors="replace")
            found.extend(
                f"{relative}:{number}: {line.strip()}"
                for number, line in enumerate(text.splitlines(), 1)
                if BENCHMARK_NAMES.search(line)
            )
    assert found == []


def test_the_shipped_benchmarks_register_through_the_entry_points() -> None:
    registered = {entry.name: entry.value for entry in entry_points(group=GROUP)}
    assert {name: registered.get(name) for name in SHIPPED} == {
        name: f"harness.benchmarks.{name}.benchmark:BENCHMARK" for name in SHIPPED
    }
    assert {found.name for found in benchmarks()} >= SHIPPED
    for name in SHIPPED:
        assert benchmark_for_source(name) is benchmark(name)
        assert isinstance(benchmark(name), Benchmark)
    assert benchmark_for_source("handwritten") is None
    with pytest.raises(UnknownBenchmark, match="no benchmark 'nosuch' is installed"):
        benchmark("nosuch")


def test_every_profile_is_found_by_name_and_the_engine_keeps_only_its_own() -> None:
    names = profile_names()
    assert names[0] == "harness" and rules_profile(None) is HARNESS_RULES
    assert set(names) >= {"envscaler", "tau2", "taubench", "taubench-react", "acebench", "acebench-text"}
    for name in names:
        assert rules_profile(name).name == name
        assert rules_profile(rules_profile(name)) is rules_profile(name)
    with pytest.raises(UnknownRules, match="choose one of: harness, "):
        rules_profile("nosuch")


def entry(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=GROUP)


def test_a_broken_or_clashing_entry_point_is_one_line_and_the_others_load() -> None:
    catalog = read_catalog(
        [
            entry("envscaler", "harness.benchmarks.envscaler.benchmark:BENCHMARK"),
            entry("missing", "no_such_package.benchmark:BENCHMARK"),
            entry("wrongname", "harness.benchmarks.tau2.benchmark:BENCHMARK"),
            entry("notone", "harness.rules.profiles:HARNESS_RULES"),
            entry("envscaler", "harness.benchmarks.envscaler.benchmark:BENCHMARK"),
            entry("tau2", "harness.benchmarks.tau2.benchmark:BENCHMARK"),
        ]
    )
    assert [found.name for found in catalog.benchmarks] == ["envscaler", "tau2"]
    assert len(catalog.problems) == 4
    missing, wrong, notone, twice = catalog.problems
    assert missing.startswith("benchmark 'missing' (no_such_package.benchmark:BENCHMARK) does not load: ")
    assert "ModuleNotFoundError" in missing
    assert "is the benchmark 'tau2', registered as 'wrongname'" in wrong
    assert "is a EpisodeRules, not a harness.registry.Benchmark" in notone
    assert twice.endswith(
        "is left out: its benchmark 'envscaler' is already envscaler's; its rules profile 'envscaler' is already envscaler's"
    )
    assert all("\n" not in problem for problem in catalog.problems)


def test_a_project_whose_own_entry_points_are_missing_is_told_how_to_register_them() -> None:
    assert project_missing(entry_points(group=GROUP)) is None
    stray = [entry("envscaler", "harness.benchmarks.envscaler.benchmark:BENCHMARK")]  # from no distribution
    assert project_missing(stray) == (
        "the project's own benchmarks are not registered: envharness's package metadata is not on the path "
        "(install the project, e.g. pip install -e .)"
    )


def test_jail_modules_are_third_party_names_only() -> None:
    assert jail_module_problem("mpmath") is None and jail_module_problem("pydantic.main") is None
    assert jail_module_problem("os") == "'os' is not a third-party module"
    assert jail_module_problem("subprocess") == "'subprocess' is not a third-party module"
    assert jail_module_problem("harness.rules.profiles") == "'harness.rules.profiles' is not a third-party module"
    assert jail_module_problem("bad name") == "'bad name' is not a module name"
