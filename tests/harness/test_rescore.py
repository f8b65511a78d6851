"""``harness rescore`` and ``harness show --diff`` through the real command line, on a run made against the mock
model: unchanged checks reproduce every verdict byte for byte, a changed check changes exactly its episodes, and an
episode whose environment changed or is missing, whose replay differs, that has no final state or whose record
contradicts itself is listed with its reason and left out of the new folder, its results and its summary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from harness.library import load_library
from tests.support.cli_process import Finished, harness
from tests.support.stored_runs import lines_of, mock_model_run

SEED = Path(__file__).resolve().parents[2] / "datasets" / "seed"
SCENARIOS = ["banking-001", "banking-002", "car_rental-001"]
HEX16 = set("0123456789abcdef")


def verdict(line: dict) -> bytes:
    return orjson.dumps([line["check_results"], line["reward"]], option=orjson.OPT_SORT_KEYS)


def copy_library(tmp_path: Path, name: str) -> Path:
    library = tmp_path / name
    shutil.copytree(SEED, library)
    return library


def edit_scenario(library: Path, environment: str, scenario_id: str, edit) -> None:
    path = library / "scenarios" / f"{environment}.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for record in records:
        if record["id"] == scenario_id:
            edit(record)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory) -> Path:
    return mock_model_run(tmp_path_factory.mktemp("stored"), SCENARIOS)


def rescore(run_dir: Path, library: Path, out: Path) -> Finished:
    return harness(["rescore", str(run_dir), "--envs", str(library), "--out", str(out)])


def test_records_carry_the_versions_of_what_graded_them(stored_run):
    library = load_library(str(SEED))
    from harness.records.versions import checks_hash, environment_hash, library_checks_hash, scenario_hash

    scenarios = {s.id: s for s in library.scenarios}
    for line in lines_of(stored_run):
        versions = line["versions"]
        scenario = scenarios[line["scenario_id"]]
        assert versions["environment"] == environment_hash(library.environments[line["environment_id"]])
        assert versions["scenario"] == scenario_hash(scenario)
        assert versions["checks"] == checks_hash(scenario)
        assert set(versions["checks"]) <= HEX16 and len(versions["checks"]) == 16
        assert versions["rules"] == "harness" and versions["package"]
    manifest = json.loads((stored_run / "manifest.json").read_text())
    assert manifest["checks_version"] == library_checks_hash(library.scenarios)
    summary = json.loads((stored_run / "summary.json").read_text())
    checks = summary["versions"]["checks"]
    assert checks and summary["versions"]["rules"] == ["harness"] and summary["versions"]["unversioned_episodes"] == 0
    shown = harness(["show", str(stored_run)])
    assert shown.code == 0 and f"checks {checks[:8]}" in shown.stdout


def test_unchanged_checks_reproduce_every_verdict_byte_for_byte(stored_run, tmp_path):
    out = tmp_path / "rescored"
    finished = rescore(stored_run, SEED, out)
    assert finished.code == 0, finished.stderr
    assert "Re-scored 12 episodes" in finished.stdout and "0 changed verdict" in finished.stdout
    before = {line["episode_id"]: line for line in lines_of(stored_run)}
    after = {line["episode_id"]: line for line in lines_of(out)}
    assert before.keys() == after.keys()
    for episode_id, line in after.items():
        assert verdict(line) == verdict(before[episode_id])
        assert line["rescored_from"] == stored_run.name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rescored_from"]["run_id"] == stored_run.name


def test_a_changed_check_changes_exactly_its_episodes_and_show_diff_lists_them(stored_run, tmp_path):
    library = copy_library(tmp_path, "library")

    def stricter(record: dict) -> None:
        record["checks"][0]["source"] = "def check(initial_state, final_state):\n    return False\n"

    edit_scenario(library, "banking", "banking-001", stricter)
    out = tmp_path / "rescored"
    finished = rescore(stored_run, library, out)
    assert finished.code == 0, finished.stderr
    before = {line["episode_id"]: line for line in lines_of(stored_run)}
    changed = {line["episode_id"] for line in lines_of(out) if verdict(line) != verdict(before[line["episode_id"]])}
    expected = {episode for episode, line in before.items() if line["scenario_id"] == "banking-001"}
    assert changed == expected and len(expected) == 4
    for episode in expected:
        assert before[episode]["reward"]["success"] is True
    assert all(not line["reward"]["success"] for line in lines_of(out) if line["episode_id"] in expected)

    shown = harness(["show", "--diff", str(stored_run), str(out)])
    assert shown.code == 0, shown.stderr
    assert "4 of 12 paired episodes changed verdict" in shown.stdout
    for episode in expected:
        assert episode[:12] in shown.stdout
    for episode in before.keys() - expected:
        assert episode[:12] not in shown.stdout


def test_an_environment_whose_code_changed_is_refused_per_episode(stored_run, tmp_path):
    library = copy_library(tmp_path, "library")
    code = library / "environments" / "car_rental.py"
    code.write_text(code.read_text() + "\n# edited after the run\n")
    out = tmp_path / "rescored"
    finished = rescore(stored_run, library, out)
    assert finished.code == 1
    refused = [line for line in finished.stderr_lines if line.startswith("not re-scored:")]
    car_rental = [line["episode_id"] for line in lines_of(stored_run) if line["environment_id"] == "car_rental"]
    assert len(refused) == len(car_rental) == 4
    assert all("environment's code changed" in line for line in refused)
    kept = {line["episode_id"] for line in lines_of(out)}
    assert kept.isdisjoint(car_rental) and len(kept) == 8
    report = json.loads((out / "rescore.json").read_text())
    assert sorted(r["episode_id"] for r in report["not_rescored"]) == sorted(car_rental)
    assert {r["cause"] for r in report["not_rescored"]} == {"environment_changed"}


def test_an_old_record_whose_replay_differs_is_refused_with_the_call(stored_run, tmp_path):
    old = tmp_path / "old-run"
    shutil.copytree(stored_run, old)
    lines = lines_of(old)
    tampered = next(line for line in lines if line["steps"])
    for line in lines:
        line.pop("versions")  # a record written before versions existed
    tampered["steps"][0]["observation"]["content"] = {"recorded": "something the tool never returned"}
    (old / "results.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    out = tmp_path / "rescored"
    finished = rescore(old, SEED, out)
    assert finished.code == 1
    refused = [line for line in finished.stderr_lines if line.startswith("not re-scored:")]
    assert len(refused) == 1 and tampered["episode_id"] in refused[0]
    assert "replaying call 1" in refused[0] and "another result than the recorded one" in refused[0]
    assert len(lines_of(out)) == 11


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_an_episode_whose_environment_the_library_lacks_is_listed_and_left_out(stored_run, tmp_path):
    library = copy_library(tmp_path, "library")
    for path in (library / "environments").glob("car_rental.*"):
        path.unlink()
    (library / "scenarios" / "car_rental.jsonl").unlink()
    out = tmp_path / "rescored"
    finished = rescore(stored_run, library, out)
    assert finished.code == 1, finished.stderr
    car_rental = {line["episode_id"] for line in lines_of(stored_run) if line["environment_id"] == "car_rental"}
    listed = [line for line in finished.stderr_lines if line.startswith("not re-scored:")]
    assert len(listed) == len(car_rental) == 4
    assert all("has no environment 'car_rental'" in line for line in listed)
    assert {line.split()[3] for line in listed} == car_rental
    assert "Re-scored 8 episodes" in finished.stdout and "4 of 12 not re-scored" in finished.stdout
    assert {line["episode_id"] for line in lines_of(out)}.isdisjoint(car_rental) and len(lines_of(out)) == 8
    summary = summary_of(out)
    assert summary["overall"]["episodes"] == 8 and summary["overall"]["scored"] == 8
    assert {group["key"]["environment_id"] for group in summary["groups"]} == {"banking"}
    report = json.loads((out / "rescore.json").read_text())
    assert {r["episode_id"] for r in report["not_rescored"]} == car_rental
    assert {r["cause"] for r in report["not_rescored"]} == {"missing_environment"}


def test_a_library_without_any_of_the_runs_environments_says_which_and_writes_nothing(stored_run, tmp_path):
    library = copy_library(tmp_path, "library")
    for environment in ("banking", "car_rental"):
        for path in (library / "environments").glob(f"{environment}.*"):
            path.unlink()
        (library / "scenarios" / f"{environment}.jsonl").unlink()
    out = tmp_path / "rescored"
    finished = rescore(stored_run, library, out)
    assert finished.code == 2
    problems = [line for line in finished.stderr_lines if "has no environment" in line]
    assert len(problems) == 2 and "no environment 'car_rental' (4 episodes of the run)" in problems[1]
    assert "holds none of the environments" in finished.stderr
    assert not out.exists()


def contradicting(line: dict, what: str) -> None:
    if what == "infra error with a reward":
        line["termination"] = "infra_error"
        line["failure"] = {"at_fault": "harness", "detail": "worker lost", "kind": "sandbox"}
    elif what == "success with a failed check":
        line["check_results"][0]["passed"] = False
        line["check_results"][0]["value"] = "False"
    elif what == "checks without a final state":
        line["termination"] = "environment_error"
        line["failure"] = {"at_fault": "environment", "detail": "it exited", "kind": "environment"}
        line["reward"] = {"state_reward": 0.0, "success": False, "checks_passed": 0, "checks_total": 1}
    elif what == "a reward that miscounts its checks":
        line["reward"]["checks_passed"] = line["reward"]["checks_total"] + 3


CONTRADICTIONS = {
    "infra error with a reward": "infrastructure error, which is never scored, yet it carries a reward",
    "success with a failed check": "is a success with failed checks",
    "checks without a final state": "ended without a final state (environment_error) yet carries",
    "a reward that miscounts its checks": "checks passed",
}


@pytest.mark.parametrize("what", list(CONTRADICTIONS))
def test_a_record_that_contradicts_itself_is_refused_with_its_reason(stored_run, tmp_path, what):
    old = tmp_path / "old-run"
    shutil.copytree(stored_run, old)
    lines = lines_of(old)
    tampered = next(line for line in lines if line["reward"]["success"] and line["check_results"])
    contradicting(tampered, what)
    (old / "results.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    out = tmp_path / "rescored"
    finished = rescore(old, SEED, out)
    assert finished.code == 1, finished.stderr
    refused = [line for line in finished.stderr_lines if line.startswith("refused:")]
    assert len(refused) == 1 and tampered["episode_id"] in refused[0]
    assert "the record contradicts itself" in refused[0] and CONTRADICTIONS[what] in refused[0], refused[0]
    assert tampered["episode_id"] not in {line["episode_id"] for line in lines_of(out)}
    assert summary_of(out)["overall"]["episodes"] == 11
    report = json.loads((out / "rescore.json").read_text())
    assert [(r["episode_id"], r["cause"]) for r in report["not_rescored"]] == [
        (tampered["episode_id"], "contradictory_record")
    ]


def test_episodes_without_a_final_state_are_scored_by_the_rules_or_left_out(stored_run, tmp_path):
    """An environment failure is scored by the rules (a failure, reward 0); an infrastructure error has no final
    state and nothing scores it: it is listed as not re-scored and counted nowhere in the new folder."""
    old = tmp_path / "old-run"
    shutil.copytree(stored_run, old)
    lines = lines_of(old)
    failed, lost = [line for line in lines if line["reward"]["success"]][:2]
    failed.update(
        termination="environment_error",
        failure={"at_fault": "environment", "detail": "its process exited", "kind": "environment"},
        check_results=[],
        reward={"state_reward": 0.0, "success": False, "checks_passed": 0, "checks_total": 1, "composite": 0.0},
    )
    lost.update(
        termination="infra_error",
        failure={"at_fault": "harness", "detail": "zygote lost", "kind": "sandbox"},
        check_results=[],
        reward=None,
    )
    (old / "results.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    out = tmp_path / "rescored"
    finished = rescore(old, SEED, out)
    assert finished.code == 1, finished.stderr
    listed = [line for line in finished.stderr_lines if line.startswith("not re-scored:")]
    assert len(listed) == 1 and lost["episode_id"] in listed[0] and "infrastructure error" in listed[0]
    assert "1 environment failures scored by the rules" in finished.stdout
    after = {line["episode_id"]: line for line in lines_of(out)}
    assert lost["episode_id"] not in after and len(after) == 11
    scored = after[failed["episode_id"]]
    scenario = next(s for s in load_library(str(SEED)).scenarios if s.id == failed["scenario_id"])
    assert scored["reward"]["success"] is False and scored["reward"]["checks_total"] == len(scenario.checks)
    overall = summary_of(out)["overall"]
    assert overall["episodes"] == 11 and overall["infra_errors"] == 0 and overall["environment_errors"] == 1


def test_a_leaderboard_keeps_verdicts_of_two_check_versions_apart(stored_run, tmp_path):
    library = copy_library(tmp_path, "library")
    edit_scenario(
        library,
        "banking",
        "banking-002",
        lambda record: record["checks"][0].update(source="def check(initial_state, final_state):\n    return False\n"),
    )
    rescored = tmp_path / "rescored"
    assert rescore(stored_run, library, rescored).code == 0
    board = tmp_path / "board"
    mixed = harness(["leaderboard", "build", str(stored_run), str(rescored), "--out", str(board)])
    assert mixed.code == 2 and "Refusing to merge" in mixed.stderr
    built = harness(["leaderboard", "build", str(stored_run), str(rescored), "--split-by-dataset", "--out", str(board)])
    assert built.code == 0, built.stderr
    from leaderboards.output import ROWS_FILE

    rows = [json.loads(line) for line in (board / ROWS_FILE).read_text().splitlines()]
    versions = {json.loads((run / "manifest.json").read_text())["checks_version"] for run in (stored_run, rescored)}
    assert len(versions) == 2
    labels = sorted(row["settings"] for row in rows if row["model"] == "mock-agent")
    assert len(labels) == 2
    for version in versions:
        assert sum(f"checks {version[:8]}" in label for label in labels) == 1


def test_an_envscaler_import_rescores_under_its_own_rules(tmp_path):
    """EnvScaler's rules (arguments passed through, first call only, str() results) replay the same way."""
    from tests.doubles.mock_openai import MockOpenAIServer
    from tests.doubles.seed_replay import alias_file
    from tests.harness.importers.test_envscaler_import import release_files

    env_file, scenario_file = release_files(tmp_path)
    library = tmp_path / "library"
    command = ["import", "envscaler", "--environments", str(env_file), "--scenarios", str(scenario_file)]
    imported = harness([*command, "--out", str(library)])
    assert imported.code == 0, imported.stderr
    server = MockOpenAIServer(record_bodies=False)
    server.register_replay(
        "Redeem 200 of Ann's points.",
        [
            {"name": "get_user", "arguments": {"user_id": "u1"}},
            {"name": "redeem_points", "arguments": {"user_id": "u1", "points": 200}},
        ],
        reply="Done.",
    )
    with server.running_in_thread():
        models = alias_file(tmp_path / "models.toml", server.base_url)
        run = tmp_path / "run"
        finished = harness(
            ["run", "--envs", str(library), "--model", "mock-agent", "--trials", "2", "--out", str(run)],
            env={"HARNESS_MODELS_FILE": str(models)},
        )
    assert finished.code == 0, finished.stderr
    recorded = lines_of(run)
    assert {line["versions"]["rules"] for line in recorded} == {"envscaler"}
    assert all(line["steps"] for line in recorded)
    out = tmp_path / "rescored"
    assert rescore(run, library, out).code == 0
    before = {line["episode_id"]: verdict(line) for line in recorded}
    assert {line["episode_id"]: verdict(line) for line in lines_of(out)} == before
