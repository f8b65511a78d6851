"""``harness serve`` over HTTP in a subprocess (the real CLI), read the way a user reads it: the first line on
stderr is the URL to pass, credential included; every later line (the log) is kept for the test to read."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.cli_process import start_cli


@dataclass
class ServeProcess:
    """A running ``harness serve``: its first line (``url``), its process, and its stderr so far."""

    url: str
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def origin(self) -> str:
        """``http://host:port``: the server without the credential."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def token(self) -> str:
        """The credential: the first segment of the printed URL's path."""
        return urlsplit(self.url).path.split("/")[1]

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def rss_bytes(self) -> int:
        """The server process's resident memory, from /proc."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS in /proc status")


def _drain(stream: object, lines: list[str], changed: threading.Event) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.append(line.rstrip("\n"))
        changed.set()
    changed.set()


@contextlib.contextmanager
def serve_http(
    args: list[str], *, env: Mapping[str, str] | None = None, startup_s: float = 180, verbose: bool = False
) -> Iterator[ServeProcess]:
    """``harness [--verbose] serve ARGS`` until the block ends (then SIGTERM). Ready once it has said what it
    serves (the line after the URL, printed when the scenarios are screened: requests sent from then on are
    answered, those sent earlier wait in the socket's backlog)."""
    process = start_cli([*(["--verbose"] if verbose else []), "serve", *args], env)
    lines: list[str] = []
    changed = threading.Event()
    assert process.stderr is not None
    reader = threading.Thread(target=_drain, args=(process.stderr, lines, changed), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + startup_s
        while not any(line.startswith("Serving ") for line in lines):
            if process.poll() is not None:
                reader.join(timeout=5)
                raise RuntimeError(f"harness serve exited {process.returncode}: {os.linesep.join(lines)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"harness serve did not start: {os.linesep.join(lines)}")
            changed.wait(0.2)
            changed.clear()
        assert lines[0].startswith("http"), lines
        yield ServeProcess(lines[0], process, lines)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=10)
