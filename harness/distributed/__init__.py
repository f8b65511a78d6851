"""Past one machine: runs, SFT rollouts and RL environment actors on a Ray cluster.

Needs the ``ray`` extra. ``harness.run.run`` uses :class:`RayBackend` when ``RunConfig.ray`` is set: the
driver plans and writes the run folder, executors on the cluster's nodes run the episodes. RL trainers use
:class:`EnvironmentPool`: environment actors with the gym interface, group rollouts and the reward function.
"""

from harness.distributed.backend import RayBackend
from harness.distributed.cluster import ClusterUnavailable, join
from harness.distributed.executor import EpisodeExecutor, EpisodeTicket, ExecutorPlan
from harness.distributed.limiter import ClusterGate, ClusterLimiter, ClusterLLMClient
from harness.distributed.rollouts import EnvironmentActor, EnvironmentPool, PolicyEndpoint, Rollout, StepOutcome
from harness.distributed.validation import validate_on_cluster

__all__ = [
    "ClusterGate",
    "ClusterLLMClient",
    "ClusterLimiter",
    "ClusterUnavailable",
    "EnvironmentActor",
    "EnvironmentPool",
    "EpisodeExecutor",
    "EpisodeTicket",
    "ExecutorPlan",
    "PolicyEndpoint",
    "RayBackend",
    "Rollout",
    "StepOutcome",
    "join",
    "validate_on_cluster",
]
