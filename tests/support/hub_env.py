"""Point ``huggingface_hub`` and ``datasets`` at the Hub test server.

Both libraries read their endpoint and cache folders when they are imported, so this module must be imported
before either of them (``tests/conftest.py`` imports it first thing). It picks a free port on 127.0.0.1,
sets the environment, and starts the server lazily on first use (``hub_server()``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import sys
import tempfile
import threading
from pathlib import Path

if "huggingface_hub" in sys.modules or "datasets" in sys.modules:
    raise RuntimeError(
        "tests.support.hub_env must be imported before huggingface_hub and datasets: they read HF_ENDPOINT at import. "
        "Import it first thing in tests/conftest.py."
    )

TEST_TOKEN = "hf_envharnessTestToken9f3c2a7d1b"
"""A recognisable dummy token: tests assert it never appears in built files, cards or logs."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


HUB_PORT = _free_port()
HUB_URL = f"http://127.0.0.1:{HUB_PORT}"
_WORKDIR = Path(tempfile.mkdtemp(prefix="envharness-hub-tests-"))
atexit.register(shutil.rmtree, _WORKDIR, ignore_errors=True)

os.environ["HF_ENDPOINT"] = HUB_URL
os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ["HF_TOKEN"] = TEST_TOKEN
os.environ["HF_HOME"] = str(_WORKDIR / "hf_home")
os.environ["HF_HUB_CACHE"] = str(_WORKDIR / "hf_home" / "hub")
os.environ["HF_DATASETS_CACHE"] = str(_WORKDIR / "hf_datasets")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
os.environ["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "0"
os.environ.pop("HF_HUB_OFFLINE", None)
os.environ.pop("HF_DATASETS_OFFLINE", None)
os.environ.pop("HUGGING_FACE_HUB_TOKEN", None)
_no_proxy = [entry for entry in os.environ.get("NO_PROXY", "").split(",") if entry]
os.environ["NO_PROXY"] = os.environ["no_proxy"] = ",".join([*_no_proxy, "127.0.0.1", "localhost"])

_server_lock = threading.Lock()
_server = None


def hub_server():  # -> tests.doubles.hub_server.HubServer
    """The running test server (started on first call, stopped at exit)."""
    global _server
    with _server_lock:
        if _server is None:
            from tests.doubles.hub_server import HubServer

            server = HubServer(_WORKDIR / "server", port=HUB_PORT, token=TEST_TOKEN)
            server.start()
            atexit.register(server.stop)
            _server = server
        return _server
