"""A virtual environment with verl 0.9.1 beside (never inside) the project's own, built once and cached.

verl pins transformers below the TRL extra's version, so its tests run scripts in this venv: it holds the
project's dependencies and the ``train-verl`` extra, read from ``pyproject.toml``, and the scripts run the
checkout's code from ``PYTHONPATH``.
Torch goes in first, alone, so that pip keeps the CPU build it finds locally instead of a CUDA one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("ENVHARNESS_CACHE", Path.home() / ".cache" / "envharness"))


@dataclass
class VerlVenv:
    root: Path
    build_seconds: float | None
    """How long this process took to build it (None: it was in the cache)."""

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def size_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.root.rglob("*") if path.is_file() and not path.is_symlink())

    def run(self, script: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        pythonpath = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env = {**os.environ, "PYTHONPATH": pythonpath, "TOKENIZERS_PARALLELISM": "false"}
        return subprocess.run(
            [str(self.python), str(script), *args],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _requirements() -> tuple[str, list[str], str]:
    """The torch pin, every other requirement (the project's and the extra's) and the cache key they make."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra = list(project["optional-dependencies"]["train-verl"])
    torch = next(pin for pin in extra if pin.startswith("torch=="))
    others = [*project["dependencies"], *(pin for pin in extra if pin != torch)]
    key = json.dumps([project["dependencies"], extra, sys.version_info[:2]])
    return torch, others, hashlib.sha256(key.encode()).hexdigest()[:12]


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *args], check=True, timeout=3600)


def verl_venv() -> VerlVenv:
    """The cached venv, built when missing (the key follows the project's dependencies and the extra's pins)."""
    torch, others, key = _requirements()
    root = CACHE / f"verl-0.9.1-{key}"
    if (root / "ready").exists():
        return VerlVenv(root, None)
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    building = root.with_name(root.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
    python = building / "bin" / "python"
    _pip(python, torch)
    # The requirements, not the project itself: installing it would build in the checkout (build/, *.egg-info).
    _pip(python, *others)
    # Built under another name and renamed when complete, so an interrupted build is never taken for a ready one
    # (the venv's console scripts keep the old path in their shebang: call its python, as VerlVenv.run does).
    building.rename(root)
    seconds = time.monotonic() - started
    (root / "ready").write_text(json.dumps({"build_seconds": round(seconds, 1)}), encoding="utf-8")
    return VerlVenv(root, seconds)


if __name__ == "__main__":
    venv = verl_venv()
    print(json.dumps({"root": str(venv.root), "build_seconds": venv.build_seconds, "bytes": venv.size_bytes()}))
