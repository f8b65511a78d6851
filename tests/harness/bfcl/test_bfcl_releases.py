"""BFCL v3 (bfcl-eval 2025.6.16, the release the papers report) beside v4 (2026.3.23): `harness import bfcl` takes
either and records which; each release's scenarios run that release's classes and are scored by its checker; the
ground truth scores as `bfcl evaluate` of v3 scores our export of it; exports and leaderboard rows say the
release; a library holding both keeps their code apart."""

from __future__ import annotations

import os
import subprocess
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.run_adapters import user_factory
from harness.benchmarks.bfcl.checker import MULTI_TURN_CHECKERS
from harness.library import Library, load_library, write_new_library
from harness.results.metrics import read_results
from harness.run import RunConfig, run
from harness.schema import AgentSettings, Scenario, TerminationReason, Trajectory
from leaderboards import build_leaderboard
from tests.harness.bfcl.test_bfcl_scoring import Plan, PlannedAgent, ground_truth, play, verdicts
from tests.support.bfcl_fixtures import BFCL_V3_VERSION, BFCL_VERSION
from tests.support.bfcl_venv import bfcl_venv
from tests.support.cli_process import harness_cli
from tests.support.hostile_sources import assert_refused, linked_copy, unpack

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
EVALUATED_AS = "gpt-4o-2024-11-20-FC"
"""A function-calling model of v3's model table: its handler decodes ``[{name: arguments_json}]`` responses."""
UNPASSABLE = "v3_multi_turn_base_154"
"""v3's entry with 5 questions and 6 ground-truth turns: BFCL fails it whatever the model does."""


def source_rows(wheel: Path, relative: str) -> list[dict[str, Any]]:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"bfcl_eval/{relative}").decode()
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


def category_of(scenario: Scenario) -> str:
    return str(scenario.provenance.details["category"])


@pytest.fixture(scope="module")
def v3(bfcl_v3_import: tuple[Path, str]) -> Library:
    return load_library(bfcl_v3_import[0])


@pytest.fixture(scope="module")
def v4(bfcl_library: Path) -> Library:
    return load_library(bfcl_library)


def test_v3_imports_every_multi_turn_category_and_records_its_release(
    v3: Library, bfcl_v3_import: tuple[Path, str], bfcl_v3_wheel: Path
) -> None:
    assert not v3.problems
    counts = Counter(category_of(s) for s in v3.scenarios)
    for category in CATEGORIES:
        rows = source_rows(bfcl_v3_wheel, f"data/BFCL_v3_{category}.json")
        assert counts[category] == len(rows) == 200
        ids = {s.provenance.upstream_id for s in v3.scenarios if category_of(s) == category}
        assert ids == {row["id"] for row in rows}
    assert len(v3.environments) == 20
    for record in [*v3.scenarios, *v3.environments.values()]:
        details = record.provenance.details
        assert details["bfcl_release"] == "v3" and details["bfcl_version"] == BFCL_V3_VERSION
        assert details["checker_sha256"] in MULTI_TURN_CHECKERS
    assert all(s.id == f"v3_{s.provenance.upstream_id}" and "bfcl-v3" in s.tags for s in v3.scenarios)
    assert all(e.id.startswith("bfcl-v3-") and e.domain == "bfcl-v3" for e in v3.environments.values())
    output = bfcl_v3_import[1]
    assert "BFCL v3 (bfcl-eval 2025.6.16)" in output
    # The one entry BFCL can never pass is imported as it is, and the import says so.
    assert f"{UNPASSABLE}: 5 questions but 6 ground-truth turns" in output
    unpassable = next(s for s in v3.scenarios if s.id == UNPASSABLE)
    assert len(unpassable.turns) == 5 and unpassable.provenance.details["ground_truth_turns"] == 6


def test_v4_records_its_release_and_keeps_its_ids(v4: Library) -> None:
    assert {s.provenance.details["bfcl_release"] for s in v4.scenarios} == {"v4"}
    assert {s.provenance.details["bfcl_version"] for s in v4.scenarios} == {BFCL_VERSION}
    assert {e.domain for e in v4.environments.values()} == {"bfcl-v4"}
    assert "multi_turn_base_0" in {s.id for s in v4.scenarios} and "bfcl-gorillafilesystem" in v4.environments
    # The two releases' checkers are one file; their classes are not.
    checkers = {s.provenance.details["checker_sha256"] for s in v4.scenarios}
    assert len(checkers) == 1 and MULTI_TURN_CHECKERS[checkers.pop()] == (BFCL_V3_VERSION, BFCL_VERSION)


def market_closing(turn: int, truth: list[tuple[str, dict[str, Any]]]) -> list[list[tuple[str, dict[str, Any]]]]:
    """multi_turn_base_106 (TradingBot + TicketAPI, market "Open"): turn 0's ground truth, then TradingBot's
    ``update_market_status`` (v3 only: v4 removed it) at 8 PM, and TicketAPI's ``ticket_get_login_status``."""
    if turn != 0:
        return ground_truth(turn, truth)
    return [truth, [("update_market_status", {"current_time_str": "08:00 PM"}), ("ticket_get_login_status", {})]]


def results_of(trajectory: Trajectory) -> dict[str, Any]:
    return {s.call.name: s.observation.content for s in trajectory.steps if s.call is not None}


async def test_each_release_runs_its_own_classes_and_is_scored_by_them(v3: Library, v4: Library) -> None:
    older = await play(v3, "v3_multi_turn_base_106", market_closing)
    newer = await play(v4, "multi_turn_base_106", market_closing)
    # v3's TicketAPI answers {"username": ...}, v4's {"login_status": ...}.
    assert results_of(older)["ticket_get_login_status"] == {"username": True}
    assert results_of(newer)["ticket_get_login_status"] == {"login_status": True}
    # v3's TradingBot closes the market at 8 PM (its strptime with %I and %p runs in the jail); v4's has no such
    # method, so the call fails there and changes nothing.
    assert results_of(older)["update_market_status"] == {"status": "Closed"}
    assert (
        results_of(newer)["update_market_status"]
        == "Error during execution: name 'update_market_status' is not defined"
    )
    # Each is judged on its own release's classes: the closed market differs from v3's ground truth, and v4's
    # state is the ground truth's.
    assert verdicts(older)["turn_0"] is False
    assert "TradingBot.market_status" in (older.check_results[0].value or "")
    assert verdicts(newer)["turn_0"] is True and newer.reward is not None and newer.reward.success


async def test_the_unpassable_v3_entry_fails_even_on_its_ground_truth(v3: Library) -> None:
    trajectory = await play(v3, UNPASSABLE, ground_truth)
    assert trajectory.termination is TerminationReason.USER_STOP
    assert verdicts(trajectory) == {f"turn_{i}": i < 5 for i in range(6)}
    assert trajectory.reward is not None and not trajectory.reward.success


async def test_a_library_with_both_releases_keeps_their_code_apart(v3: Library, v4: Library, tmp_path: Path) -> None:
    both = tmp_path / "both"
    write_new_library([*v3.environments.values(), *v4.environments.values()], [*v3.scenarios, *v4.scenarios], both)
    library = load_library(both)
    assert not library.problems and len(library.scenarios) == 1600 and len(library.environments) == 40
    for scenario in library.scenarios:
        environment = library.environments[scenario.environment_id]
        release = scenario.provenance.details["bfcl_release"]
        assert environment.provenance.details["bfcl_release"] == release, scenario.id
        if "TradingBot" in environment.provenance.details["classes"]:
            assert ("def update_market_status" in environment.code) is (release == "v3"), scenario.id
    older = await play(library, "v3_multi_turn_base_106", market_closing)
    newer = await play(library, "multi_turn_base_106", market_closing)
    assert results_of(older)["ticket_get_login_status"] == {"username": True}
    assert results_of(newer)["ticket_get_login_status"] == {"login_status": True}


# ------------------------------------------------------------------ the ground truth, and `bfcl evaluate` of v3


@pytest.fixture(scope="module")
def v3_oracle_run(bfcl_v3_import: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bfcl-v3-oracle") / "run"
    result = harness_cli(
        "run", "--envs", str(bfcl_v3_import[0]), "--agent", "oracle", "--mode", "conv",
        "--concurrency", "64", "--out", str(out), timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def our_verdicts(run_dir: Path, library: Library) -> dict[str, dict[str, bool]]:
    """Category → BFCL entry id → success, as the harness scored the run."""
    scenarios = {s.id: s for s in library.scenarios}
    found: dict[str, dict[str, bool]] = {}
    for trajectory in read_results(run_dir / "results.jsonl"):
        scenario = scenarios[trajectory.scenario_id]
        assert trajectory.reward is not None, trajectory.scenario_id
        found.setdefault(category_of(scenario), {})[str(scenario.provenance.upstream_id)] = trajectory.reward.success
    return found


def bfcl_evaluate(export: Path, work: Path, categories: list[str]) -> dict[str, dict[str, bool]]:
    """`bfcl evaluate` of bfcl-eval 2025.6.16, in its own venv, on our export: category → entry id → valid."""
    results = work / "result" / EVALUATED_AS
    results.mkdir(parents=True)
    for file in export.iterdir():
        (results / file.name).write_bytes(file.read_bytes())
    venv = bfcl_venv(BFCL_V3_VERSION)
    # The handler builds an OpenAI client it never uses here; the client wants some key to be set.
    env = {**os.environ, "BFCL_PROJECT_ROOT": str(work), "OPENAI_API_KEY": "not-used"}
    completed = subprocess.run(
        [str(venv.python), "-m", "bfcl_eval", "evaluate", "--model", EVALUATED_AS, "--test-category", ",".join(categories)],
        cwd=work, env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    found: dict[str, dict[str, bool]] = {}
    for category in categories:
        rows = [
            orjson.loads(line)
            for line in (work / "score" / EVALUATED_AS / f"BFCL_v3_{category}_score.json").read_text().splitlines()
        ]
        header, failures = rows[0], {row["id"] for row in rows[1:]}
        ids = [row["id"] for row in source_rows_cache[category]]
        assert header["total_count"] == len(ids)
        found[category] = {entry: entry not in failures for entry in ids}
    return found


source_rows_cache: dict[str, list[dict[str, Any]]] = {}


@pytest.fixture(scope="module", autouse=True)
def _v3_rows(bfcl_v3_wheel: Path) -> None:
    for category in CATEGORIES:
        source_rows_cache[category] = source_rows(bfcl_v3_wheel, f"data/BFCL_v3_{category}.json")


def test_the_v3_ground_truth_scores_as_bfcl_evaluate_scores_it(
    v3_oracle_run: Path, v3: Library, tmp_path: Path
) -> None:
    ours = our_verdicts(v3_oracle_run, v3)
    # Oracle: every entry of every category passes, but the one BFCL's own data makes unpassable.
    assert {category: sum(v.values()) for category, v in ours.items()} == {
        "multi_turn_base": 199, "multi_turn_miss_func": 200, "multi_turn_miss_param": 200,
        "multi_turn_long_context": 200,
    }  # fmt: skip
    assert ours["multi_turn_base"]["multi_turn_base_154"] is False
    export = tmp_path / "export"
    result = harness_cli("export", "bfcl", str(v3_oracle_run), "--out", str(export))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in export.iterdir()) == sorted(f"BFCL_v3_{c}_result.json" for c in CATEGORIES)
    assert "BFCL_v3_multi_turn_base: 200 entries" in result.stdout
    theirs = bfcl_evaluate(export, tmp_path / "bfcl", list(CATEGORIES))
    assert theirs == ours


def test_leaderboard_rows_say_the_release(v3_oracle_run: Path) -> None:
    board = build_leaderboard([v3_oracle_run])
    (table,) = board.tables
    assert table.domains == ["bfcl-v3"]
    (row,) = table.rows
    assert list(row.per_domain) == ["bfcl-v3"]


def sometimes_wrong(scenario: Scenario) -> Plan:
    """The ground truth, but for a third of the entries: nothing in the first turn with calls, or only half of
    its calls (which fails on state or on the response, or passes when the rest changes and says nothing)."""
    number = int(str(scenario.provenance.upstream_id).rsplit("_", 1)[1])

    def plan(turn: int, truth: list[tuple[str, dict[str, Any]]]) -> list[list[tuple[str, dict[str, Any]]]]:
        first = next(i for i, t in enumerate(scenario.turns) if t.reference_actions)
        if turn == first and number % 6 == 1:
            return []
        if turn == first and number % 6 == 4:
            return [truth[: len(truth) // 2]] if len(truth) > 1 else [[("pwd", {})]]
        return ground_truth(turn, truth)

    return plan


async def test_perturbed_v3_runs_score_as_bfcl_evaluate_scores_them(bfcl_v3_wheel: Path, tmp_path: Path) -> None:
    library_dir = tmp_path / "library"
    result = harness_cli(
        "import", "bfcl", "--source", str(bfcl_v3_wheel), "--category", "base", "--category", "miss_param",
        "--no-verify", "--out", str(library_dir),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    library = load_library(library_dir)

    def agent_factory(scenario: Scenario, client: Any, settings: AgentSettings) -> PlannedAgent:
        return PlannedAgent(scenario, sometimes_wrong(scenario))

    config = RunConfig(
        envs=str(library_dir), agent_kind="oracle", mode="conv", concurrency=32, workers=2, out=tmp_path / "run"
    )
    outcome = await run(config, agent_factory=agent_factory, user_factory=user_factory, library=library)
    ours = our_verdicts(outcome.run_dir, library)
    failed = {category: sum(not v for v in verdict.values()) for category, verdict in ours.items()}
    assert all(count >= 50 for count in failed.values()), failed  # the perturbations do fail entries
    export = tmp_path / "export"
    exported = harness_cli("export", "bfcl", str(outcome.run_dir), "--out", str(export))
    assert exported.returncode == 0, exported.stderr
    categories = ["multi_turn_base", "multi_turn_miss_param"]
    assert bfcl_evaluate(export, tmp_path / "bfcl", categories) == ours


# ------------------------------------------------------------------------------------------- bad sources


@pytest.fixture(scope="module")
def v3_unpacked(bfcl_v3_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack(bfcl_v3_wheel, tmp_path_factory.mktemp("bfcl-v3-unpacked"))


def import_base(source: Path, destination: Path) -> tuple[int, str, str]:
    result = harness_cli(
        "import", "bfcl", "--source", str(source), "--category", "base", "--out", str(destination / "lib")
    )
    return result.returncode, result.stdout, result.stderr


def test_a_copy_with_both_releases_data_is_refused(v3_unpacked: Path, tmp_path: Path) -> None:
    copy = linked_copy(v3_unpacked, tmp_path / "bfcl")
    data = copy / "bfcl_eval" / "data"
    (data / "BFCL_v4_multi_turn_base.json").write_bytes((data / "BFCL_v3_multi_turn_base.json").read_bytes())
    assert_refused(
        *import_base(copy, tmp_path / "dest"),
        tmp_path / "dest",
        "holds both of data/BFCL_v3_multi_turn_*.json or data/BFCL_v4_multi_turn_*.json",
    )


def test_a_copy_with_neither_releases_data_is_refused(v3_unpacked: Path, tmp_path: Path) -> None:
    copy = linked_copy(v3_unpacked, tmp_path / "bfcl")
    for file in (copy / "bfcl_eval" / "data").glob("BFCL_v3_multi_turn_*.json"):
        file.rename(file.with_name(file.name.replace("BFCL_v3", "BFCL_v9")))
    assert_refused(*import_base(copy, tmp_path / "dest"), tmp_path / "dest", "holds neither of")


def test_a_release_with_another_multi_turn_checker_is_refused(v3_unpacked: Path, tmp_path: Path) -> None:
    # The harness's checker transcribes one file; a release that changed it would be scored by rules it lacks.
    copy = linked_copy(v3_unpacked, tmp_path / "bfcl")
    checker = copy / "bfcl_eval" / "eval_checker" / "multi_turn_eval" / "multi_turn_checker.py"
    text = checker.read_text()
    checker.unlink()  # a hard link: the file it was copied from stays as it is
    checker.write_text(text.replace("def state_checker(", "def state_checker_changed("))
    assert_refused(
        *import_base(copy, tmp_path / "dest"),
        tmp_path / "dest",
        "multi_turn_checker.py (sha256 ",
        "is not a checker the harness scores as",
    )
