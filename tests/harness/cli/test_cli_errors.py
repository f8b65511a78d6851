"""The real ``harness`` command in subprocesses: bad input is refused before any work with one line per problem
and status 2; an endpoint that does not answer stops the run once with status 1; infrastructure errors give
status 1, each cause printed once with a count and the command that re-runs them; waits are bounded."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.doubles.mock_openai import Fault, MockOpenAIServer
from tests.doubles.seed_replay import LIBRARY, alias_file, serving_mock
from tests.support.cli_process import REPO, finish, harness, start_cli

SEED = REPO / "datasets" / "seed"


@pytest.fixture
def mock_server() -> Iterator[MockOpenAIServer]:
    with serving_mock() as server:
        yield server


def bad_inputs(out: Path) -> list[tuple[list[str], str]]:
    """Every subcommand with an ordinary mistake, and a fragment of the one line it must print."""
    return [
        (["run", "--trials", "-1"], "--trials"),
        (["run", "--concurrency", "0"], "--concurrency"),
        (["run", "--max-requests", "0"], "--max-requests"),
        (["run", "--limit", "0"], "--limit"),
        (["run", "--timeout", "0"], "--timeout"),
        (["run", "--mode", "sideways"], "nonconv, conv or both"),
        (["run", "--agent", "foo"], "function_calling"),
        (["run", "--model", "oracle"], "use --agent oracle"),
        (["run", "--model", "notaprovider/x"], "'notaprovider/x' is neither a model alias"),
        (["run", "--env", "bankingg"], "did you mean 'banking'"),
        (["run", "--scenario", "nosuch"], "unknown scenario 'nosuch'"),
        (["run", "--envs", "/nonexistent"], "no such folder"),
        (["run", "--envs", "nope/nodataset"], "nope/nodataset"),
        (["run", "--nosuchflag"], "--nosuchflag"),
        (["nosuchcommand"], "nosuchcommand"),
        (["validate", "/nonexistent"], "no such folder"),
        (["sft", "--teacher", "oracle", "--out", str(out / "sft")], "use --agent oracle"),
        (["sft", "--teacher", "local", "--attempts", "0", "--out", str(out / "sft")], "--attempts"),
        (["show", "/nonexistent"], "/nonexistent"),
        (["leaderboard", "build", "/nonexistent", "--out", str(out / "lb")], "/nonexistent"),
        (["leaderboard", "publish", "/nonexistent", "--repo", "org/name"], "/nonexistent"),
        (["publish", "environments", "/nonexistent", "--repo", "org/name", "--out", str(out / "p")], "no such folder"),
        (["publish", "nosuchkind", "x", "--repo", "org/name"], "nosuchkind"),
        (["import", "envscaler", "--environments", "/nonexistent", "--out", str(out / "i")], "/nonexistent"),
        (["synth", "envs", "--from", "/nonexistent", "--model", "local", "--out", str(out / "se")], "/nonexistent"),
        (["synth", "scenarios", "--envs", "/nonexistent", "--model", "local", "--out", str(out / "ss")], "no such"),
        (["synth", "graph", "--envs", "/nonexistent", "--out", str(out / "g.json")], "no such folder"),
        (["synth", "queries", "--graph", "/nonexistent", "--model", "local", "--out", str(out / "q")], "/nonexistent"),
        (["serve", "nosuchenv"], "nosuchenv"),
    ]


def test_every_subcommand_refuses_bad_input_with_one_line_and_status_2(tmp_path: Path) -> None:
    cases = bad_inputs(tmp_path / "outputs")
    results = []
    for start in range(0, len(cases), 4):  # a few at a time: each process imports the whole stack
        batch = cases[start : start + 4]
        processes = [
            start_cli(args + (["--out", str(tmp_path / "run")] if args[0] == "run" else []), cwd=tmp_path)
            for args, _ in batch
        ]
        results.extend(zip(batch, (finish(p) for p in processes), strict=True))
    for (args, fragment), result in results:
        assert result.code == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr, args
        assert len(result.stderr_lines) == 1, (args, result.stderr)
        assert fragment in result.stderr, (args, result.stderr)
    assert not (tmp_path / "run").exists(), "a refused run made no run folder"
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "outputs").exists()


def test_debug_prints_the_traceback(tmp_path: Path) -> None:
    result = harness(["--debug", "validate", "/nonexistent"], cwd=tmp_path)
    assert result.code == 2
    assert "Traceback" in result.stderr and "no such folder" in result.stderr


def library_with(tmp_path: Path, scenario_lines: list[bytes]) -> Path:
    root = tmp_path / "library"
    (root / "environments").mkdir(parents=True)
    (root / "scenarios").mkdir()
    for suffix in (".py", ".json"):
        shutil.copy(SEED / "environments" / f"banking{suffix}", root / "environments" / f"banking{suffix}")
    (root / "scenarios" / "banking.jsonl").write_bytes(b"".join(line + b"\n" for line in scenario_lines))
    return root


def banking_lines(count: int) -> list[bytes]:
    return [orjson.dumps(s.model_dump(mode="json")) for s in LIBRARY.scenarios_for("banking")[:count]]


def test_a_library_with_bad_records_is_refused_unless_skipped_and_the_skip_is_recorded(tmp_path: Path) -> None:
    library = library_with(tmp_path, [*banking_lines(2), b'{"id": "broken", "task": ', b"[1, 2]"])
    out = tmp_path / "run"
    refused = harness(["run", "--envs", str(library), "--agent", "oracle", "--out", str(out)])
    assert refused.code == 2 and "Traceback" not in refused.stderr
    assert all(line.startswith("error:") for line in refused.stderr_lines)
    assert len(refused.stderr_lines) == 3  # one line per bad record, then what would work
    assert "banking.jsonl:3" in refused.stderr and "banking.jsonl:4" in refused.stderr
    assert "--skip-bad-records" in refused.stderr_lines[-1]
    assert not out.exists()

    skipped = harness(["run", "--envs", str(library), "--agent", "oracle", "--skip-bad-records", "--out", str(out)])
    assert skipped.code == 0, skipped.stdout + skipped.stderr
    assert skipped.last_line == "exit 0: all 2 episodes were scored"
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["config"]["skip_bad_records"] is True
    assert [problem.split(":")[:2] for problem in manifest["config"]["skipped_records"]] == [
        ["banking.jsonl", "3"],
        ["banking.jsonl", "4"],
    ]


def test_zero_selected_episodes_is_refused_without_a_run_folder(tmp_path: Path) -> None:
    library = library_with(tmp_path, [])
    result = harness(["run", "--envs", str(library), "--agent", "oracle", "--out", str(tmp_path / "run")])
    assert result.code == 2 and len(result.stderr_lines) == 1
    assert "no episodes to run" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_corrupt_results_line_on_resume_is_one_warning_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = harness(["run", "--agent", "oracle", "--limit", "2", "--out", str(out)])
    assert first.code == 0, first.stderr
    with (out / "results.jsonl").open("ab") as results:
        results.write(b"this is not json\n")
    resumed = harness(["run", "--agent", "oracle", "--limit", "2", "--out", str(out), "--resume"])
    assert resumed.code == 0, resumed.stderr
    assert "results.jsonl:3: skipping a line that is not a Trajectory" in resumed.stderr
    assert len((out / "results.jsonl").read_bytes().splitlines()) == 3  # nothing re-run, nothing removed


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_endpoint_stops_the_run_once_before_any_episode(tmp_path: Path) -> None:
    models = alias_file(tmp_path / "models.toml", f"http://127.0.0.1:{closed_port()}/v1")
    out = tmp_path / "run"
    result = harness(
        ["run", "--model", "mock-agent", "--limit", "5", "--out", str(out)], {"HARNESS_MODELS_FILE": str(models)}
    )
    assert result.code == 1
    assert len(result.stderr_lines) == 1 and "unreachable" in result.stderr, result.stderr
    assert "HARNESS_MODEL_MOCK_AGENT_API_BASE" in result.stderr
    assert not out.exists()


def test_infrastructure_errors_exit_1_printed_once_with_a_count_and_the_retry_command_finishes(
    mock_server: MockOpenAIServer, tmp_path: Path
) -> None:
    models = alias_file(tmp_path / "models.toml", mock_server.base_url)
    env = {"HARNESS_MODELS_FILE": str(models)}
    out = tmp_path / "run"
    mock_server.inject(Fault(kind="bad_request", times=None))
    failed = harness(["run", "--model", "mock-agent", "--limit", "4", "--out", str(out)], env)
    assert failed.code == 1, failed.stdout + failed.stderr
    assert "infra error ×4:" in failed.stdout
    assert failed.stdout.count("request rejected by") == 1
    assert failed.last_line.startswith("exit 1: 4 of 4 episodes ended in infrastructure errors")
    # A rejected request is recorded as one a retry alone cannot fix: the command says to re-run it anyway.
    assert "4 of them were refused in a way a retry alone cannot fix" in failed.last_line
    retry_command = failed.last_line.split("re-run them with: ", 1)[1]
    assert retry_command.endswith(f"--resume --retry-errors --retry-unretryable --out {out}")

    mock_server.clear_faults()
    retried = harness(retry_command.split()[1:], env)
    assert retried.code == 0, retried.stdout + retried.stderr
    assert retried.last_line == "exit 0: all 4 episodes were scored"
    lines = (out / "results.jsonl").read_bytes().splitlines()
    assert len(lines) == 8  # the four errors stay in the log; the summary counts the last result of each
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["overall"]["scored"] == 4 and summary["overall"]["infra_errors"] == 0


def test_a_hung_request_times_out_after_the_timeout_naming_the_endpoint(
    mock_server: MockOpenAIServer, tmp_path: Path
) -> None:
    models = alias_file(tmp_path / "models.toml", mock_server.base_url)
    mock_server.inject(Fault(kind="hang", times=1, hang_seconds=60))
    result = harness(
        ["run", "--model", "mock-agent", "--limit", "1", "--timeout", "1", "--out", str(tmp_path / "run")],
        {"HARNESS_MODELS_FILE": str(models)},
    )
    assert result.code == 0, result.stdout + result.stderr
    assert f"mock-agent at {mock_server.base_url}: timed out after 1 s" in result.stderr
    manifest = orjson.loads((tmp_path / "run" / "manifest.json").read_bytes())
    assert manifest["config"]["timeout"] == 1.0


def test_the_run_says_what_it_runs_explains_its_columns_and_its_exit_status(
    mock_server: MockOpenAIServer, tmp_path: Path
) -> None:
    models = alias_file(tmp_path / "models.toml", mock_server.base_url)
    out = tmp_path / "run"
    result = harness(
        ["run", "--model", "mock-agent", "--limit", "2", "--trials", "2", "--max-steps", "12", "--out", str(out)],
        {"HARNESS_MODELS_FILE": str(models)},
    )
    assert result.code == 0, result.stdout + result.stderr
    header = result.stdout.splitlines()[:3]
    assert f"model mock-agent → hosted_vllm/replay at {mock_server.base_url}" in header[0]
    assert "2 scenarios" in header[1] and "2 trials" in header[1] and "step limit 12" in header[1]
    assert "4 episodes planned, 4 to run, 0 already recorded" in header[2] and str(out) in header[2]
    assert "delta reward: share of the checks false at reset" in result.stdout
    assert result.last_line == "exit 0: all 4 episodes were scored"


@pytest.mark.parametrize("agent", ["do_nothing"])
def test_the_do_nothing_agent_scores_the_floor(agent: str, tmp_path: Path) -> None:
    result = harness(["run", "--agent", agent, "--limit", "3", "--out", str(tmp_path / "run")])
    assert result.code == 0, result.stdout + result.stderr
    summary = orjson.loads((tmp_path / "run" / "summary.json").read_bytes())
    assert summary["overall"]["scored"] == 3
    assert summary["overall"]["mean_delta_reward"] == 0.0 and summary["overall"]["success_rate"] == 0.0


def test_the_no_argument_run_also_scores_the_reference_actions_and_a_do_nothing_agent(tmp_path: Path) -> None:
    # The main job as a newcomer runs it (one step per episode here, to keep the embedded model's work small).
    result = harness(["run", "--max-steps", "1"], cwd=tmp_path)
    assert result.code == 0, result.stdout + result.stderr
    assert "model local → harness_local/gemma-3-270m" in result.stdout.splitlines()[0]
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if line.count("│") > 5}
    oracle, idle = rows["reference actions (oracle)"], rows["do nothing"]
    assert [cell.strip() for cell in oracle.split("│")[2:6]] == ["4", "1.000", "1.000", "1.000"]
    assert [cell.strip() for cell in idle.split("│")[2:6]] == ["4", "0.000", "0.000", "0.000"]
    assert "the ceiling" in result.stdout and "the floor" in result.stdout
    assert result.last_line == "exit 0: all 4 episodes were scored (and 8 baseline episodes)"


def test_a_hosted_model_without_its_key_is_refused_before_any_episode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = tmp_path / "run"
    result = harness(["run", "--model", "openai/gpt-4.1", "--limit", "1", "--out", str(out)])
    assert result.code == 2, result.stdout + result.stderr
    assert len(result.stderr_lines) == 1, result.stderr
    assert "needs OPENAI_API_KEY in the environment" in result.stderr
    assert not out.exists()


def test_a_hosted_model_is_probed_where_its_client_would_send_it(
    mock_server: MockOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = "sk-canary-4b1d9e"
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    down = harness(["run", "--model", "openai/gpt-4.1", "--limit", "1", "--out", str(tmp_path / "down")])
    assert down.code == 1, down.stdout + down.stderr
    assert len(down.stderr_lines) == 1 and "unreachable" in down.stderr, down.stderr
    assert canary not in down.stdout + down.stderr
    assert not (tmp_path / "down").exists()

    monkeypatch.setenv("OPENAI_BASE_URL", mock_server.base_url)
    harness(["run", "--model", "openai/gpt-4.1", "--limit", "1", "--out", str(tmp_path / "up")])
    probes = [r for r in mock_server.requests if r.path == "/v1/models"]
    assert len(probes) == 1, "one probe of the endpoint before the first episode"
