"""A small Ray test cluster shared by the ``test_ray_*`` suites (a pytest plugin, see ``conftest.py``): a head
that offers no CPUs (it hosts only the driver, as a KubeRay head usually does) and two worker nodes of one CPU
each, all in this process tree. Ray is imported only when a test asks for the cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="envharness-tests")
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def cli(args: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
    """``harness ARGS`` as a user runs it, in its own process, its output as wide as its longest line (the
    assertions read whole lines)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *args],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def kill_when_lines(process: subprocess.Popen, results: Path, lines: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if results.exists() and results.read_bytes().count(b"\n") >= lines:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.communicate()
