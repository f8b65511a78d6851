"""A virtual environment with verl 0.9.1 beside (never inside) the project's own, built once and cached.

verl pins transformers below the TRL extra's version, so its tests run scripts in this venv: it holds the
project's dependencies and the ``train-verl`` extra, read from ``pyproject.toml``, and the scripts run the
checkout's code from ``PYTHONPATH``, with the checkout's package metadata beside it (its entry points: the
benchmarks the registry finds). Torch goes in first, alone, so that pip keeps the CPU build it finds locally instead of a CUDA one.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.cached_venv import CachedVenv, cached_venv
from tests.support.checkout_metadata import checkout_metadata

REPO = Path(__file__).resolve().parents[2]


class VerlVenv(CachedVenv):
    def run(self, script: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        metadata = checkout_metadata()
        pythonpath = os.pathsep.join([str(REPO), str(metadata), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
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


def verl_venv() -> VerlVenv:
    """The cached venv, built when missing (the key follows the project's dependencies and the extra's pins).
    The requirements go in, not the project itself: installing it would build in the checkout (build/,
    *.egg-info)."""
    torch, others, key = _requirements()
    venv = cached_venv(f"verl-0.9.1-{key}", [[torch], others])
    return VerlVenv(venv.root, venv.build_seconds)


if __name__ == "__main__":
    venv = verl_venv()
    print(json.dumps({"root": str(venv.root), "build_seconds": venv.build_seconds, "bytes": venv.size_bytes()}))
