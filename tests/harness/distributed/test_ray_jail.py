"""A cluster node without one of the jail's layers: Hub code is refused with one line naming that node before
any episode starts.

The node is a real raylet of the test cluster started with ``HARNESS_SANDBOX_DISABLE=seccomp`` in its
environment (its workers inherit it, so their sandbox starts without seccomp, as on a kernel without it); it
leaves the cluster at the end so the other suites see the usual two nodes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.ray_cluster import ROOT, cli


@pytest.fixture
def weak_node(ray_cluster) -> Iterator[Any]:
    """A third worker node whose processes run the sandbox without seccomp."""
    import ray

    before = os.environ.get("HARNESS_SANDBOX_DISABLE")
    os.environ["HARNESS_SANDBOX_DISABLE"] = "seccomp"
    try:
        node = ray_cluster.add_node(num_cpus=1)
    finally:
        if before is None:
            del os.environ["HARNESS_SANDBOX_DISABLE"]
        else:
            os.environ["HARNESS_SANDBOX_DISABLE"] = before
    ray_cluster.wait_for_nodes()
    try:
        yield node
    finally:
        ray_cluster.remove_node(node)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(n["Alive"] and n["NodeID"] == node.node_id for n in ray.nodes()):
            time.sleep(0.2)


def test_hub_code_is_refused_on_a_node_without_seccomp_before_any_episode(
    ray_cluster, hub, repo_id, weak_node, tmp_path
):
    from harness.hub import build_library, upload_built
    from harness.library import load_library

    seed = load_library()
    upload_built(
        build_library([seed.environments["banking"]], seed.scenarios_for("banking")[:2], tmp_path / "b", repo_id)
    )
    out = tmp_path / "run"
    args = ["run", "--envs", repo_id, "--agent", "oracle", "--out", str(out), "--workers", "1"]
    process = cli([*args, "--ray", ray_cluster.address], {})
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 2, stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert f"node {weak_node.node_ip_address} ({weak_node.node_id[:8]})" in lines[0], lines[0]
    assert "seccomp" in lines[0] and "--allow-weak-sandbox" in lines[0], lines[0]
    assert "Traceback" not in stdout + stderr
    assert not (out / "results.jsonl").exists() or not (out / "results.jsonl").read_bytes()


def test_a_node_without_seccomp_is_named_once_when_local_code_runs_there(ray_cluster, weak_node, tmp_path):
    from harness.library import load_library

    seed = load_library()
    scenarios = len(seed.scenarios_for("banking"))
    out = tmp_path / "run"
    args = ["run", "--envs", "datasets/seed", "--env", "banking", "--agent", "oracle", "--out", str(out)]
    process = cli([*args, "--workers", "1", "--ray", ray_cluster.address], {}, cwd=str(ROOT))
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stdout + stderr
    label = f"node {weak_node.node_ip_address} ({weak_node.node_id[:8]}) runs environment code without: seccomp"
    assert sum(label in line for line in stderr.splitlines()) == 1, stderr
    assert len((out / "results.jsonl").read_bytes().splitlines()) == scenarios
