"""Test setup shared by every suite.

``tests.support.hub_env`` must come first: huggingface_hub and datasets read their endpoint when imported, and the
tests point them at the Hub-compatible test server on 127.0.0.1.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

import tests.support.hub_env  # noqa: F401  (must precede any import of huggingface_hub or datasets)

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytest_plugins = ["tests.support.conftest_hub", "tests.support.bfcl_fixtures", "tests.support.ray_cluster"]


RAY_CLUSTER_TESTS = "tests/harness/distributed/"
"""The tests that share the session's Ray test cluster (``tests.support.ray_cluster``)."""


class WholeFileScheduling(LoadFileScheduling):
    """pytest-xdist's ``loadfile`` scheduling (each test file runs whole on one worker, so its module fixtures, such
    as an imported benchmark library or a served environment, are built once), with every test of the Ray
    cluster's folder on one worker, so only one cluster starts."""

    def _split_scope(self, nodeid: str) -> str:
        return RAY_CLUSTER_TESTS if nodeid.startswith(RAY_CLUSTER_TESTS) else super()._split_scope(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> WholeFileScheduling:
    return WholeFileScheduling(config, log)
