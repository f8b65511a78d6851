"""BFCL test data: the bfcl-eval wheel, downloaded once with pip (never installed or imported), and a library
imported from it with the real CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli_process import harness_cli
from tests.support.released_wheels import released_wheel

BFCL_VERSION = "2026.3.23"
WHEEL_NAME = f"bfcl_eval-{BFCL_VERSION}-py3-none-any.whl"
REPO = Path(__file__).resolve().parents[2]


def wheel_cache() -> Path:
    return Path(os.environ.get("ENVHARNESS_BFCL_CACHE", Path.home() / ".cache" / "envharness" / "bfcl"))


@pytest.fixture(scope="session")
def bfcl_wheel() -> Path:
    return released_wheel(f"bfcl-eval=={BFCL_VERSION}", WHEEL_NAME, wheel_cache())


@pytest.fixture(scope="session")
def bfcl_library(bfcl_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bfcl") / "library"
    result = harness_cli("import", "bfcl", "--source", str(bfcl_wheel), "--category", "all", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


BFCL_V3_VERSION = "2025.6.16"
"""The last bfcl-eval release with BFCL v3 data (``BFCL_v3_multi_turn_*``), the one the papers report."""


@pytest.fixture(scope="session")
def bfcl_v3_wheel() -> Path:
    return released_wheel(
        f"bfcl-eval=={BFCL_V3_VERSION}", f"bfcl_eval-{BFCL_V3_VERSION}-py3-none-any.whl", wheel_cache()
    )


@pytest.fixture(scope="session")
def bfcl_v3_import(bfcl_v3_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The v3 library imported with the real CLI (every category, the ground truth replayed), and its stdout."""
    out = tmp_path_factory.mktemp("bfcl-v3") / "library"
    result = harness_cli("import", "bfcl", "--source", str(bfcl_v3_wheel), "--category", "all", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out, result.stdout + result.stderr
