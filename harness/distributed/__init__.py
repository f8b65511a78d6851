"""Past one machine: runs, SFT rollouts and RL environment actors on a Ray cluster.

Needs the ``ray`` extra. ``harness.runner.run`` uses :class:`RayBackend` when ``RunConfig.ray`` is set: the
driver plans and writes the run folder, executors on the cluster's nodes run the episodes.
"""

from harness.distributed.backend import RayBackend
from harness.distributed.cluster import ClusterUnavailable, join
from harness.distributed.executor import EpisodeExecutor, EpisodeTicket, ExecutorPlan
from harness.distributed.limiter import ClusterGate, ClusterLimiter, ClusterLLMClient

__all__ = [
    "ClusterGate",
    "ClusterLLMClient",
    "ClusterLimiter",
    "ClusterUnavailable",
    "EpisodeExecutor",
    "EpisodeTicket",
    "ExecutorPlan",
    "RayBackend",
    "join",
]
