"""Joining a Ray cluster, and checking its nodes before any episode starts.

Every problem found here is a ``ClusterUnavailable`` with one line that names the node and what to do.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import socket
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel

from harness import __version__
from harness.run.config import RunRefused

logger = logging.getLogger(__name__)

NAMESPACE = "envharness"
CONNECT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 120.0
PACKAGE_ROOTS = ("harness", "agents")


class ClusterUnavailable(RunRefused):
    """The cluster cannot run this job as asked; the message is one line, printed before any episode starts."""


def import_ray() -> ModuleType:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ClusterUnavailable("--ray needs Ray: pip install 'envharness[ray]'") from None


def _host_and_port(address: str) -> tuple[str, int] | None:
    text = address.removeprefix("ray://")
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def join(address: str) -> bool:
    """Connect this process to the cluster at ``address`` ('local' starts one here). True if Ray was
    initialised here (then the caller shuts it down), False if this process was already connected."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    target: str
    if address == "local":
        target = "local"  # a new instance here, even when RAY_ADDRESS names another cluster
        # Ray announces on every start that the cluster it starts uses its default token authentication; that
        # notice is not about the run, and a run's terminal shows only what is.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    elif address == "auto":
        target = "auto"
    else:
        endpoint = _host_and_port(address)
        if endpoint is None:
            raise ClusterUnavailable(
                f"--ray {address!r} is not a cluster address: use HOST:PORT, ray://HOST:PORT, 'auto' or 'local'"
            )
        try:
            with socket.create_connection(endpoint, timeout=CONNECT_TIMEOUT_S):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ClusterUnavailable(f"cannot reach a Ray cluster at {address}: {reason}") from None
        target = address
    try:
        ray.init(
            address=target,
            namespace=NAMESPACE,
            logging_level=logging.WARNING,
            log_to_driver=True,
            configure_logging=True,
            include_dashboard=False if target == "local" else None,
        )
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterUnavailable(f"cannot join the Ray cluster at {address}: {detail}") from None
    return True


def code_digest() -> str:
    """A hash of the package's Python sources: driver and executors must run the same code."""
    digest = hashlib.sha256()
    for root_name in PACKAGE_ROOTS:
        module = sys.modules.get(root_name) or importlib.import_module(root_name)
        root = Path(next(iter(module.__path__)))
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class NodeReport(BaseModel):
    version: str
    digest: str
    python: str
    modules_missing: list[str]


def node_report(modules: list[str]) -> NodeReport:
    """Runs on a node: which package it has, and whether the job's own modules (agent factories) import."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            missing.append(f"{name} ({exc})")
    return NodeReport(version=__version__, digest=code_digest(), python=sys.version.split()[0], modules_missing=missing)


def alive_nodes() -> list[dict[str, Any]]:
    """Alive nodes that offer CPUs (a head started with ``--num-cpus 0`` runs only the driver)."""
    ray = import_ray()
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    working = [node for node in nodes if float(node.get("Resources", {}).get("CPU", 0)) > 0]
    return working or nodes


def node_label(node: dict[str, Any]) -> str:
    return f"{node['NodeManagerAddress']} ({node['NodeID'][:8]})"


def check_nodes(nodes: list[dict[str, Any]], modules: list[str]) -> list[dict[str, Any]]:
    """Run ``node_report`` on every node; refuse the job, naming the node, if one cannot run it. A node that
    left the cluster meanwhile is dropped with a warning. Returns the nodes that passed."""
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(node_report)
    expected = code_digest()
    python = sys.version.split()[0]
    pending = [
        (
            node,
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(
                modules
            ),
        )
        for node in nodes
    ]
    passed = []
    for node, reference in pending:
        label = node_label(node)
        try:
            report = ray.get(reference, timeout=PROBE_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise ClusterUnavailable(f"node {label} did not answer within {PROBE_TIMEOUT_S:.0f}s") from None
        except ray.exceptions.RayTaskError as exc:
            raise ClusterUnavailable(
                f"node {label} cannot run envharness: {root_cause(exc)}; install envharness[ray] there "
                f"(version {__version__}, the driver's)"
            ) from None
        except ray.exceptions.RayError as exc:
            logger.warning("node %s left the cluster (%s); running without it", label, type(exc).__name__)
            continue
        if report.modules_missing:
            raise ClusterUnavailable(f"node {label} cannot import {', '.join(report.modules_missing)}")
        if report.digest != expected:
            raise ClusterUnavailable(
                f"node {label} runs other envharness code ({report.version}, sources {report.digest}) than the "
                f"driver ({__version__}, sources {expected}); install the same version on every node"
            )
        if report.python.rsplit(".", 1)[0] != python.rsplit(".", 1)[0]:
            raise ClusterUnavailable(f"node {label} runs Python {report.python}, the driver {python}")
        passed.append(node)
    if not passed:
        raise ClusterUnavailable("no node of the cluster is alive")
    return passed


def root_cause(exc: BaseException) -> str:
    """The innermost error of a Ray failure, on one line."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc).strip()
    for line in reversed(text.splitlines()):
        if "Error" in line or "error" in line:
            return line.strip()
    return text.splitlines()[0] if text else type(exc).__name__
