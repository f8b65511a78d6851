"""litellm is imported on the first call that goes through it, not with the CLI: the commands that never call a
model through it (imports, validation, exports, reports, ``--help``) start in a fraction of the time."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cli_process import REPO, cli_environment

PROBE = """
import sys
import harness.cli
import harness.llm
loaded = sorted(name for name in ("litellm", "openai") if name in sys.modules)
print(",".join(loaded) or "none")
from harness.llm.litellm_setup import litellm_module
litellm = litellm_module()
providers = sorted(entry["provider"] for entry in litellm.custom_provider_map)
print(",".join(providers))
"""


def test_the_cli_does_not_import_litellm_and_the_first_use_configures_it() -> None:
    finished = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=cli_environment(), cwd=REPO, check=False
    )
    assert finished.returncode == 0, finished.stderr
    before, providers = finished.stdout.split()
    assert before == "none"
    assert providers == "harness_local,python"
