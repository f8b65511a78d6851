"""The fixtures the trainer test modules share: the verl venv and OpenEnv's client venv."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.openenv_client import client_python
from tests.support.verl_venv import VerlVenv, verl_venv


@pytest.fixture(scope="session")
def verl_environment() -> VerlVenv:
    """The cached venv with verl 0.9.1 (built here when missing: the first run reaches PyPI)."""
    venv = verl_venv()
    built = "from the cache" if venv.build_seconds is None else f"built in {venv.build_seconds:.0f} s"
    print(f"verl venv {venv.root} ({built}, {venv.size_bytes() / 2**30:.2f} GiB)", file=sys.stderr)
    return venv


@pytest.fixture(scope="session")
def openenv_python() -> Path:
    """The python of the cached venv with OpenEnv 0.10's client (built here when missing: the first run reaches PyPI)."""
    return client_python()
