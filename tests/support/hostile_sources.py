"""Hostile copies of benchmark sources for the importers' tests: a file outside the source holding a marker string
that must never reach a library or the terminal, files linked to it, bombs that expand into millions of objects,
and the assertion that an import was refused in one line and wrote nothing.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.support.cli_process import cli_environment

MARKER = f"host-secret-{uuid.uuid4().hex}"
"""What a file outside the source holds: it must appear nowhere an import writes or prints."""


def write_secret(path: Path, text: str | None = None) -> Path:
    """A file outside the source holding :data:`MARKER` (inside ``text`` when given: ``{marker}`` is replaced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((text or "{marker}\n").replace("{marker}", MARKER))
    return path


def link_to(target: Path, link: Path) -> None:
    """Replace ``link`` (a file of a source) by a symbolic link to ``target``."""
    if link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(target)


def linked_copy(source: Path, destination: Path) -> Path:
    """A copy of folder ``source`` whose files are hard links (cheap; replace a file by unlinking it first)."""
    shutil.copytree(source, destination, copy_function=os.link)
    return destination


def unpack(wheel: Path, destination: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(destination)
    return destination


def _noisy_chunks(count: int, entries: int, every: int) -> list[bytes]:
    """Pieces of ``[],[],...`` with a random number every ``every`` entries, so that the text deflates about 80:1:
    below the archive's ratio limit, so that only the JSON budget stands in the way."""
    rng = random.Random(7)
    chunks = []
    for _ in range(count):
        parts = [b"[]," if index % every else b"[%d]," % rng.randrange(10**9) for index in range(entries)]
        chunks.append(b"".join(parts))
    return chunks


def write_bomb(handle: IO[bytes], megabytes: int) -> int:
    """Write a JSON list of about ``megabytes`` MB of tiny arrays to ``handle``; the number of values it holds."""
    chunks = _noisy_chunks(8, 350_000, 200)
    handle.write(b"[")
    written = 1
    values = 1
    index = 0
    while written < megabytes << 20:
        chunk = chunks[index % len(chunks)]
        handle.write(chunk)
        written += len(chunk)
        values += chunk.count(b",")
        index += 1
    handle.write(b"[]]")
    return values + 1


def rebuilt_wheel(original: Path, destination: Path, replace: Mapping[str, Callable[[IO[bytes]], object]]) -> Path:
    """``original`` with the members named in ``replace`` written by their functions instead (streamed, so a bomb
    of hundreds of MB is never held in memory)."""
    with zipfile.ZipFile(original) as source, zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if info.filename in replace:
                with target.open(info.filename, "w", force_zip64=True) as handle:
                    replace[info.filename](handle)
            else:
                target.writestr(info, source.read(info))
    return destination


@dataclass
class Measured:
    code: int
    stdout: str
    stderr: str
    peak_kib: int
    """The largest resident set of the command (or any process it waited for), in KiB."""


_DRIVER = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "sys.stdout.write(done.stdout)\n"
    "sys.stderr.write(done.stderr)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(done.returncode)\n"
)


def harness_measured(*args: str, env: Mapping[str, str] | None = None, timeout: float = 600) -> Measured:
    """The real CLI in a subprocess of a small driver that reports the CLI's peak resident memory."""
    command = [sys.executable, "-c", _DRIVER, sys.executable, "-m", "harness.cli", *args]
    done = subprocess.run(
        command, capture_output=True, text=True, env=cli_environment(env), timeout=timeout, check=False
    )
    *printed, peak = done.stdout.splitlines() or ["0"]
    return Measured(done.returncode, "\n".join(printed), done.stderr, int(peak))


def own_peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def assert_refused(code: int, stdout: str, stderr: str, destination: Path, *needles: str) -> str:
    """The import was refused as bad input in one line holding every needle, without a traceback, wrote nothing
    under ``destination`` (the folder that holds ``--out``), and showed no byte of the secret. The line."""
    output = stdout + stderr
    assert code == 2, output
    assert "Traceback" not in output, output
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, output
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert MARKER not in output
    written = [path for path in destination.rglob("*")] if destination.exists() else []
    assert written == [], written
    return lines[0]


def assert_secret_nowhere(folder: Path) -> None:
    """No file under ``folder`` holds :data:`MARKER`."""
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert MARKER.encode() not in path.read_bytes(), path
