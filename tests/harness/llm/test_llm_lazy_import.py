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


SELF_HOSTED = """
import sys
from harness.llm import AliasTable, LLMClient
from harness.llm.aliases import AliasEntry

names = ["replay", "gpt-4o", "gpt-4o-mini", "Qwen/Qwen3-8B", "claude-3-5-sonnet-20240620"]
entries = {name: AliasEntry(model=f"hosted_vllm/{name}", api_base="http://127.0.0.1:9/v1") for name in names}
client = LLMClient(aliases=AliasTable(entries, environ={}))
print(all(client.route_problem(name) is None for name in names))
print(all(client.price_of(client.resolve(name)) is None for name in names))
print("litellm" in sys.modules)
from harness.llm.litellm_setup import litellm_module
litellm = litellm_module()
print(any(entry.get("litellm_provider") == "hosted_vllm" for entry in litellm.model_cost.values()))
priced = []
for name in names:
    try:
        litellm.get_model_info(f"hosted_vllm/{name}")
        priced.append(name)
    except Exception:
        pass
print(priced or "none")
"""


def test_a_self_hosted_model_is_routed_and_found_unpriced_without_importing_litellm() -> None:
    """A vLLM server reached directly needs litellm neither for its route nor for its price, which litellm's cost
    map never has (no entry of that provider; checked here against litellm itself, also for names it prices under
    other providers)."""
    finished = subprocess.run(
        [sys.executable, "-c", SELF_HOSTED],
        capture_output=True,
        text=True,
        env=cli_environment(),
        cwd=REPO,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.split() == ["True", "True", "False", "False", "none"]
