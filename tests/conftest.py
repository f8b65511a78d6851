"""Test setup shared by every suite.

``tests.support.hub_env`` must come first: huggingface_hub and datasets read their endpoint when imported, and the
tests point them at the Hub-compatible test server on 127.0.0.1.
"""

from __future__ import annotations

import os

import tests.support.hub_env  # noqa: F401  (must precede any import of huggingface_hub or datasets)

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytest_plugins = ["tests.support.conftest_hub", "tests.support.bfcl_fixtures", "tests.support.ray_cluster"]
