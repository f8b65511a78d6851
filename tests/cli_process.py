"""Drive the real ``harness`` command in a subprocess, against the mock OpenAI-compatible server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.library import load_library
from tests.doubles.mock_openai import MockOpenAIServer

REPO = Path(__file__).resolve().parents[1]
LIBRARY = load_library()


@dataclass
class Finished:
    code: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    @property
    def last_line(self) -> str:
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def cli_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": pythonpath, "COLUMNS": "200", **(extra or {})}


def start_cli(args: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *args],
        env=cli_environment(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 600) -> Finished:
    stdout, stderr = process.communicate(timeout=timeout)
    return Finished(process.returncode, stdout, stderr)


def harness(args: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Finished:
    return finish(start_cli(args, env, cwd))


def register_scenarios(server: MockOpenAIServer) -> None:
    """The mock model replays each scenario's reference actions (found by the task text in the messages)."""
    for scenario in LIBRARY.scenarios:
        server.register_replay(scenario.task, [a.model_dump() for a in scenario.reference_actions])
        user_key = scenario.user_profile.goal if scenario.user_profile else scenario.task
        server.register_user(user_key, [scenario.task])


def alias_file(path: Path, base_url: str, *, model: str = "hosted_vllm/replay", key_env: str | None = None) -> Path:
    lines = ["[aliases.mock-agent]", f'model = "{model}"', f'api_base = "{base_url}"']
    if key_env:
        lines.append(f'api_key_env = "{key_env}"')
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def serving_mock() -> Iterator[MockOpenAIServer]:
    """The mock server in a background thread, replaying every seed scenario's reference actions."""
    server = MockOpenAIServer(record_bodies=False)
    register_scenarios(server)
    with server.running_in_thread():
        yield server
