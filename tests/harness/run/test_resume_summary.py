"""A run killed part way, then resumed with its infrastructure errors retried, ends with the summary of the same run
made in one go, byte for byte: the resumed run counts the records it reads at opening, takes out each one its retry
replaces (read back from the file) and counts what it appends, through the real command line and the mock model."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import orjson

from tests.doubles.mock_openai import Fault, MockOpenAIServer
from tests.doubles.seed_replay import alias_file, register_scenarios
from tests.support.cli_process import finish, harness, start_cli

ARGS = ["run", "--model", "mock-agent", "--user-model", "mock-user", "--mode", "both", "--limit", "8"]
ARGS += ["--trials", "2", "--concurrency", "3"]


def test_a_killed_and_resumed_run_summarizes_as_one_made_in_one_go(tmp_path: Path) -> None:
    server = MockOpenAIServer(record_bodies=False, latency=0.1)
    register_scenarios(server)
    with server.running_in_thread():
        models = alias_file(tmp_path / "models.toml", server.base_url)
        with models.open("a") as aliases:
            aliases.write(f'[aliases.mock-user]\nmodel = "hosted_vllm/user"\napi_base = "{server.base_url}"\n')
        env = {"HARNESS_MODELS_FILE": str(models)}
        whole = tmp_path / "whole" / "run"
        assert harness([*ARGS, "--out", str(whole)], env).code == 0

        # The first requests are refused (400): their episodes are recorded as infrastructure errors a retry alone
        # cannot fix, then the run is killed part way.
        server.inject(Fault(kind="bad_request", times=3))
        killed = tmp_path / "killed" / "run"
        process = start_cli([*ARGS, "--out", str(killed)], env)
        results = killed / "results.jsonl"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (results.exists() and results.read_bytes().count(b"\n") >= 8):
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        finish(process)
        recorded = [
            orjson.loads(line) for line in results.read_bytes().splitlines(keepends=True) if line.endswith(b"\n")
        ]
        assert 8 <= len(recorded) < 32
        assert sum(line["termination"] == "infra_error" for line in recorded) >= 1

        server.clear_faults()
        resumed = harness([*ARGS, "--out", str(killed), "--resume", "--retry-errors", "--retry-unretryable"], env)
        assert resumed.code == 0, resumed.stdout + resumed.stderr

    lines = [orjson.loads(line) for line in results.read_bytes().splitlines()]
    assert len(lines) > len({line["episode_id"] for line in lines}) == 32  # the retries replaced earlier lines
    assert (killed / "summary.json").read_bytes() == (whole / "summary.json").read_bytes()
    summary = orjson.loads((whole / "summary.json").read_bytes())
    assert summary["overall"]["episodes"] == summary["overall"]["scored"] == 32
