"""Virtual environments beside (never inside) the project's own, built once and cached under
``~/.cache/envharness`` (or ``$ENVHARNESS_CACHE``).

A venv is built under another name and renamed when complete, so an interrupted build is never taken for a ready
one; its console scripts keep the build path in their shebang, so callers run ``<venv>/bin/python -m ...``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.cache_lock import exclusive

CACHE = Path(os.environ.get("ENVHARNESS_CACHE", Path.home() / ".cache" / "envharness"))


@dataclass
class CachedVenv:
    root: Path
    build_seconds: float | None
    """How long this process took to build it (None: it was in the cache)."""

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def size_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.root.rglob("*") if path.is_file() and not path.is_symlink())


def pip_install(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *args], check=True, timeout=3600)


def cached_venv(name: str, installs: list[list[str]]) -> CachedVenv:
    """``CACHE/name``, built when missing by one ``pip install`` per item of ``installs``, in order (by one test
    process; the others wait for it)."""
    root = CACHE / name
    with exclusive(root):
        return _cached_venv(root, installs)


def _cached_venv(root: Path, installs: list[list[str]]) -> CachedVenv:
    if (root / "ready").exists():
        return CachedVenv(root, None)
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    building = root.with_name(root.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
    for args in installs:
        pip_install(building / "bin" / "python", *args)
    building.rename(root)
    seconds = time.monotonic() - started
    (root / "ready").write_text(json.dumps({"build_seconds": round(seconds, 1)}), encoding="utf-8")
    return CachedVenv(root, seconds)
