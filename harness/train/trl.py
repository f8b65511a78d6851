"""GRPO with TRL on our environments: the public face of the TRL adapter (see the README's "Train on it")."""

from harness.train.jailed_episode import RolloutOutcome
from harness.train.trl_dataset import prompt_dataset, write_prompt_dataset
from harness.train.trl_environment import JailedToolEnvironment, environment_factory, finish_rollout
from harness.train.trl_rewards import COMPONENTS, reward_functions
from harness.train.trl_rollout import rollout_func

__all__ = [
    "COMPONENTS",
    "JailedToolEnvironment",
    "RolloutOutcome",
    "environment_factory",
    "finish_rollout",
    "prompt_dataset",
    "reward_functions",
    "rollout_func",
    "write_prompt_dataset",
]
