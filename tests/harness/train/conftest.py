"""The verl venv fixture the verl test modules share."""

from __future__ import annotations

import sys

import pytest

from tests.support.verl_venv import VerlVenv, verl_venv


@pytest.fixture(scope="session")
def verl_environment() -> VerlVenv:
    """The cached venv with verl 0.9.1 (built here when missing: the first run reaches PyPI)."""
    venv = verl_venv()
    built = "from the cache" if venv.build_seconds is None else f"built in {venv.build_seconds:.0f} s"
    print(f"verl venv {venv.root} ({built}, {venv.size_bytes() / 2**30:.2f} GiB)", file=sys.stderr)
    return venv
