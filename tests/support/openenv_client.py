"""OpenEnv 0.10's real client in a venv of its own, and ``harness serve --protocol openenv`` in a subprocess.

openenv 0.10 pins ``fastmcp<4`` and the project pins fastmcp 4, so the client lives in
``~/.cache/envharness/openenv-0.10.0`` (built once, reused) and talks to the server over the network only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.cache_lock import exclusive
from tests.support.serve_process import ServeProcess, serve_http

logger = logging.getLogger(__name__)

OPENENV_VERSION = "0.10.0"
CLIENT_VENV = Path.home() / ".cache" / "envharness" / f"openenv-{OPENENV_VERSION}"
DRIVER = Path(__file__).with_name("openenv_driver.py")
SESSIONS_DRIVER = Path(__file__).with_name("openenv_sessions.py")


def client_python() -> Path:
    """The client venv's python, building the venv first when it is missing (pip install from PyPI; one test
    process builds it, the others wait)."""
    with exclusive(CLIENT_VENV):
        return _client_python()


def _client_python() -> Path:
    python = CLIENT_VENV / "bin" / "python"
    probe = [str(python), "-c", "import openenv.core.mcp_client"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    started = time.monotonic()
    building = CLIENT_VENV.with_name(CLIENT_VENV.name + ".building")
    subprocess.run(["rm", "-rf", str(building)], check=True)
    subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
    pip = [str(building / "bin" / "python"), "-m", "pip", "install", "-q", f"openenv=={OPENENV_VERSION}"]
    subprocess.run(pip, check=True, capture_output=True)
    subprocess.run(["rm", "-rf", str(CLIENT_VENV)], check=True)
    building.rename(CLIENT_VENV)
    logger.warning("built the OpenEnv client venv in %.0f s", time.monotonic() - started)
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServedEnvironment:
    """A ``harness serve --protocol openenv``: ``base_url`` is the URL it printed (its credential the path's
    first segment), what OpenEnv's clients take as their base URL."""

    server: ServeProcess
    python: Path

    @property
    def base_url(self) -> str:
        return self.server.url

    @property
    def process(self) -> subprocess.Popen[str]:
        return self.server.process

    def drive(
        self,
        program: list[tuple[int, dict[str, Any]]],
        *,
        base_url: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> list[Any]:
        """Run ``program`` with OpenEnv's MCPToolClient (on ``base_url``, default the printed URL, sending
        ``headers``); one report entry per operation."""
        ran = subprocess.run(
            [str(self.python), str(DRIVER), base_url or self.base_url, json.dumps(program), json.dumps(headers or {})],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert ran.returncode == 0, ran.stderr
        report: list[Any] = json.loads(ran.stdout.strip().splitlines()[-1])
        return report

    def drive_concurrently(self, programs: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """Run one program per session, all sessions at once over ``/ws`` (``openenv_sessions.py``)."""
        ran = subprocess.run(
            [str(self.python), str(SESSIONS_DRIVER), self.base_url],
            input=json.dumps(programs),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert ran.returncode == 0, ran.stderr
        report: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
        return report

    @property
    def alive(self) -> bool:
        return self.server.alive


@contextlib.contextmanager
def serve_openenv(
    python: Path,
    env_id: str,
    *args: str,
    startup_s: float = 180,
    env: Mapping[str, str] | None = None,
    verbose: bool = False,
) -> Iterator[ServedEnvironment]:
    """``harness [--verbose] serve ENV --protocol openenv`` on a free port of 127.0.0.1, until the block ends."""
    command = [env_id, "--protocol", "openenv", "--port", "0", *args]
    with serve_http(command, env=env, startup_s=startup_s, verbose=verbose) as server:
        deadline = time.monotonic() + startup_s
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.url}/health", timeout=5).status_code == 200:
                    break
            if not server.alive or time.monotonic() > deadline:
                raise RuntimeError(f"harness serve --protocol openenv did not answer /health: {server.log}")
            time.sleep(0.2)
        yield ServedEnvironment(server, python)
