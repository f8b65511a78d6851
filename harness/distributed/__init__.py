"""Past one machine: runs, synthesis, validation and RL environment actors on a Ray cluster.

Needs the ``ray`` extra. :class:`Fleet` is the one cluster dispatch loop: executors on every node, each started
from one :class:`ExecutorConfig`, running opaque work units. ``harness.run.run`` uses :class:`RayBackend` (a
fleet of episode executors) when ``RunConfig.ray`` is set: the driver plans and writes the run folder, executors
on the cluster's nodes run the episodes; ``synth.distributed`` runs synthesis on the same fleet. RL trainers use
:class:`EnvironmentPool`: environment actors with the gym interface, group rollouts and the reward function.
"""

from harness.distributed.backend import RayBackend
from harness.distributed.cluster import ClusterUnavailable, join
from harness.distributed.executor import EpisodeExecutor, EpisodeTicket, ExecutorPlan
from harness.distributed.fleet import Fleet
from harness.distributed.limiter import ClusterGate, ClusterLimiter, ClusterLLMClient
from harness.distributed.rollouts import EnvironmentActor, EnvironmentPool, PolicyEndpoint, Rollout, StepOutcome
from harness.distributed.settings import ExecutorConfig, WorkUnit, executor_config
from harness.distributed.validation import validate_on_cluster
from harness.distributed.worker import FleetExecutor

__all__ = [
    "ClusterGate",
    "ClusterLLMClient",
    "ClusterLimiter",
    "ClusterUnavailable",
    "EnvironmentActor",
    "EnvironmentPool",
    "EpisodeExecutor",
    "EpisodeTicket",
    "ExecutorConfig",
    "ExecutorPlan",
    "Fleet",
    "FleetExecutor",
    "PolicyEndpoint",
    "RayBackend",
    "Rollout",
    "StepOutcome",
    "WorkUnit",
    "executor_config",
    "join",
    "validate_on_cluster",
]
