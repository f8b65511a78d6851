"""Drive the real ``harness`` command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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


def harness_cli(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, with this checkout first on the path, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        env=cli_environment(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
