"""Resuming through the real CLI: another model behind the same alias is refused; --limit and --trials extend or
narrow the plan but the summary always covers every recorded episode; SIGINT and SIGTERM stop cleanly, say how
to resume, and the resume finishes with every episode exactly once."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.doubles.mock_openai import MockOpenAIServer
from tests.doubles.seed_replay import alias_file, register_scenarios, serving_mock
from tests.support.cli_process import finish, harness, start_cli


@pytest.fixture
def mock_server() -> Iterator[MockOpenAIServer]:
    with serving_mock() as server:
        yield server


def summary_of(out: Path) -> dict:
    return orjson.loads((out / "summary.json").read_bytes())


def test_resume_refuses_another_model_behind_the_alias(mock_server: MockOpenAIServer, tmp_path: Path) -> None:
    models = alias_file(tmp_path / "models.toml", mock_server.base_url)
    env = {"HARNESS_MODELS_FILE": str(models)}
    out = tmp_path / "run"
    args = ["run", "--model", "mock-agent", "--limit", "2", "--out", str(out)]
    assert harness(args, env).code == 0
    results_before = (out / "results.jsonl").read_bytes()
    manifest_before = (out / "manifest.json").read_bytes()

    alias_file(models, mock_server.base_url, model="hosted_vllm/echo")
    refused = harness([*args, "--limit", "3", "--resume"], env)
    assert refused.code == 2 and len(refused.stderr_lines) == 1, refused.stderr
    assert "model 'mock-agent' resolves to hosted_vllm/echo" in refused.stderr
    assert "hosted_vllm/replay" in refused.stderr
    assert (out / "results.jsonl").read_bytes() == results_before
    assert (out / "manifest.json").read_bytes() == manifest_before


def test_limit_and_trials_extend_or_narrow_the_plan_but_the_summary_covers_every_recorded_episode(
    mock_server: MockOpenAIServer, tmp_path: Path
) -> None:
    models = alias_file(tmp_path / "models.toml", mock_server.base_url)
    env = {"HARNESS_MODELS_FILE": str(models)}
    out = tmp_path / "run"
    base = ["run", "--model", "mock-agent", "--out", str(out)]
    assert harness([*base, "--limit", "3"], env).code == 0
    assert summary_of(out)["overall"]["episodes"] == 3

    narrowed = harness([*base, "--limit", "1", "--resume"], env)
    assert narrowed.code == 0, narrowed.stdout + narrowed.stderr
    assert summary_of(out)["overall"]["episodes"] == 3, "narrowing the plan never shrinks the summary"
    assert orjson.loads((out / "manifest.json").read_bytes())["episodes_planned"] == 3
    assert narrowed.last_line == "exit 0: all 3 episodes were scored"

    extended = harness([*base, "--limit", "4", "--trials", "2", "--resume"], env)
    assert extended.code == 0, extended.stdout + extended.stderr
    assert "8 episodes planned, 5 to run, 3 already recorded" in extended.stdout
    assert summary_of(out)["overall"]["episodes"] == 8
    ids = [orjson.loads(line)["episode_id"] for line in (out / "results.jsonl").read_bytes().splitlines()]
    assert len(ids) == len(set(ids)) == 8


@pytest.mark.parametrize(("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_cleanly_says_how_to_resume_and_the_resume_finishes(
    stop: signal.Signals, status: int, tmp_path: Path
) -> None:
    server = MockOpenAIServer(record_bodies=False, latency=0.2)
    register_scenarios(server)
    with server.running_in_thread():
        models = alias_file(tmp_path / "models.toml", server.base_url)
        env = {"HARNESS_MODELS_FILE": str(models)}
        out = tmp_path / "run"
        args = ["run", "--model", "mock-agent", "--limit", "30", "--concurrency", "4", "--out", str(out)]
        process = start_cli(args, env)
        results = out / "results.jsonl"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (results.exists() and results.read_bytes().count(b"\n") >= 3):
            time.sleep(0.05)
        process.send_signal(stop)
        stopped = finish(process)
        assert stopped.code == status, stopped.stdout + stopped.stderr
        assert "Traceback" not in stopped.stderr
        recorded = results.read_bytes().count(b"\n")
        assert 3 <= recorded < 30
        assert stopped.last_line.startswith(f"exit {status}: stopped by {stop.name} with {recorded} of 30")
        resume_command = stopped.last_line.split("resume with: ", 1)[1]
        assert resume_command.endswith(f"--resume --out {out}")

        resumed = harness(resume_command.split()[1:], env)
        assert resumed.code == 0, resumed.stdout + resumed.stderr
        assert resumed.last_line == "exit 0: all 30 episodes were scored"
    lines = [orjson.loads(line) for line in results.read_bytes().splitlines()]
    ids = [line["episode_id"] for line in lines]
    assert len(ids) == len(set(ids)) == 30
    assert all(line["termination"] != "infra_error" and line["reward"] is not None for line in lines)


def test_sigterm_before_the_first_episode_says_what_happened_and_exits_143(tmp_path: Path) -> None:
    """The endpoint accepts the probe's connection and never answers, so the signal lands before any episode."""
    accepted = threading.Event()
    held: list[socket.socket] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)

        def hold_connections() -> None:
            with contextlib.suppress(OSError):
                while True:
                    connection, _ = listener.accept()
                    held.append(connection)
                    accepted.set()

        threading.Thread(target=hold_connections, daemon=True).start()
        models = alias_file(tmp_path / "models.toml", f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
        out = tmp_path / "run"
        process = start_cli(
            ["run", "--model", "mock-agent", "--limit", "2", "--out", str(out)], {"HARNESS_MODELS_FILE": str(models)}
        )
        assert accepted.wait(300), "the probe reached the endpoint"
        process.send_signal(signal.SIGTERM)
        stopped = finish(process)
        for connection in held:
            connection.close()
    assert stopped.code == 143, stopped.stdout + stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert "stopped by SIGTERM" in stopped.stdout + stopped.stderr
    assert not (out / "results.jsonl").exists()
