"""The settings a run takes from its library: what the selected environments' benchmark recommends (found from the
records' ``provenance.source``), for every setting the user did not give; what the user gives wins, rules of
another benchmark drop the recommendation, and environments of several benchmarks run with the defaults."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from harness.library import Library
from harness.registry import Benchmark, RunSettings
from harness.run import plan
from harness.run.config import RunConfig, RunRefused
from harness.run.plan import resolve_settings
from harness.schema import DatasetRef, Environment, Provenance, Scenario

CODE = "class Desk:\n    def __init__(self, init_config):\n        self.n = 0\n"


def library(*sources: str) -> Library:
    environments = {
        f"env-{index}": Environment(
            id=f"env-{index}", name="Desk", class_name="Desk", code=CODE, provenance=Provenance(source=source)
        )
        for index, source in enumerate(sources)
    }
    scenarios = [Scenario(id=f"s-{e}", environment_id=e, initial_state={}, task="t") for e in environments]
    return Library(environments, scenarios, DatasetRef(source="test"))


def recommend(environments: Sequence[Environment]) -> RunSettings:
    return RunSettings(rules="harness", mode="conv", user_model="oracle-user", max_steps=7)


DESK = Benchmark(name="desk", title="Desk", recommend=recommend)


@pytest.fixture(autouse=True)
def desk_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark ``desk`` beside the installed ones (the registry's lookups of every other name are real)."""
    real = plan.benchmark_for_source
    monkeypatch.setattr(plan, "benchmark_for_source", lambda source: DESK if source == "desk" else real(source))


def test_every_setting_not_given_comes_from_the_library() -> None:
    config, origins = resolve_settings(RunConfig(), library("desk"))
    assert (config.rules, config.mode, config.user_model, config.max_steps) == ("harness", "conv", "oracle-user", 7)
    assert origins == dict.fromkeys(("rules", "mode", "user_model", "max_steps"), "the library")


def test_what_the_user_gives_wins() -> None:
    given = RunConfig(mode="nonconv", user_model="mine", max_steps=3)
    config, origins = resolve_settings(given, library("desk"))
    assert (config.rules, config.mode, config.user_model, config.max_steps) == ("harness", "nonconv", "mine", 3)
    assert origins == {"rules": "the library"}


def test_rules_of_another_benchmark_drop_the_recommendation() -> None:
    config, origins = resolve_settings(RunConfig(rules="tau2"), library("desk"))
    # tau2 runs only conversations: the mode is the rules', the rest the run's defaults.
    assert (config.rules, config.mode, config.user_model, config.max_steps) == ("tau2", "conv", None, None)
    assert origins == {"mode": "the rules"}


def test_a_shipped_benchmark_recommends_its_rules_for_a_library_imported_before_recommendations() -> None:
    config, origins = resolve_settings(RunConfig(), library("tau2"))
    assert (config.rules, config.mode) == ("tau2", "conv")
    assert origins == {"rules": "the library", "mode": "the library"}
    config, origins = resolve_settings(RunConfig(), library("handwritten"))
    assert (config.rules, config.mode, origins) == ("harness", "nonconv", {})


def test_environments_of_several_benchmarks_run_with_the_defaults(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config, origins = resolve_settings(RunConfig(), library("desk", "tau2"))
    assert (config.rules, config.mode, origins) == ("harness", "nonconv", {})
    assert "the selected environments come from desk and tau2; running with the default settings" in caplog.text
    # One of them chosen: its recommendation again.
    config, _ = resolve_settings(RunConfig(env=["env-1"]), library("desk", "tau2"))
    assert (config.rules, config.mode) == ("tau2", "conv")


def test_unknown_rules_are_one_line() -> None:
    with pytest.raises(RunRefused, match="--rules 'nosuch': use one of harness, envscaler"):
        resolve_settings(RunConfig(rules="nosuch"), library("desk"))
