"""A virtual environment per bfcl-eval release, with the release and the dependencies it declares, built once
and cached: its ``bfcl evaluate`` scores our exports in tests and benchmarks.

``bfcl evaluate`` loads ``bfcl_eval.constants.model_config``, which imports every model handler and with them the
SDKs the release pins (openai, anthropic, mistralai, cohere, the Google and AWS clients, numpy 1.26.4): the
release's own dependency list is the smallest set that runs it, so it is installed as declared, beside (never
inside) the project's venv."""

from __future__ import annotations

import json
import sys

from tests.support.cached_venv import CachedVenv, cached_venv


def bfcl_venv(version: str) -> CachedVenv:
    """The cached venv of ``bfcl-eval==version`` (its name follows the pin and the interpreter's version)."""
    python = "".join(str(part) for part in sys.version_info[:2])
    return cached_venv(f"bfcl-eval-{version}-py{python}", [[f"bfcl-eval=={version}"]])


if __name__ == "__main__":
    venv = bfcl_venv(sys.argv[1] if len(sys.argv) > 1 else "2025.6.16")
    print(json.dumps({"root": str(venv.root), "build_seconds": venv.build_seconds, "bytes": venv.size_bytes()}))
