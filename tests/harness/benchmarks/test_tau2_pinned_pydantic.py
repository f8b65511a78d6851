"""τ²'s import runs upstream's code on upstream's pinned pydantic (its jail environment): the airline tools' schemas
the model is sent equal those upstream's own code makes on the lock file's pydantic (the τ² venv of
tests/support/tau2_venv.py), where the harness's newer pydantic added `"additionalProperties": true` to three."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.harness.benchmarks.test_tau2_export import run_official, tau2_official  # noqa: F401  (fixture)
from tests.harness.benchmarks.test_tau2_import import airline_library, tau2_wheel  # noqa: F401  (fixtures)
from tests.support.cached_venv import CachedVenv

pytestmark = pytest.mark.tau2_venv

UPSTREAM_SCHEMAS = """
import json
from tau2.domains.airline.environment import get_environment
print(json.dumps([tool.openai_schema for tool in get_environment().get_tools()]))
"""
WIDENED_BY_NEWER_PYDANTIC = {"book_reservation", "update_reservation_flights", "update_reservation_passengers"}


def by_name(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {tool["function"]["name"]: tool for tool in tools}


def test_airline_tool_schemas_equal_upstreams_on_its_pinned_pydantic(
    airline_library: Path,  # noqa: F811
    tau2_official: CachedVenv,  # noqa: F811
) -> None:
    finished = run_official(tau2_official, "-c", UPSTREAM_SCHEMAS)
    assert finished.returncode == 0, finished.stderr[-2000:]
    theirs = by_name(json.loads(finished.stdout.splitlines()[-1]))
    record = json.loads((airline_library / "environments" / "tau2-airline.json").read_text())
    ours = by_name(record["tools"])
    assert set(ours) >= WIDENED_BY_NEWER_PYDANTIC
    assert ours == theirs
    for name in WIDENED_BY_NEWER_PYDANTIC:
        assert "additionalProperties" not in json.dumps(ours[name]), name
