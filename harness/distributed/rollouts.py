"""RL rollouts on a Ray cluster: a pool of environment actors with the gym interface and the reward function.

    import ray
    from harness.distributed import EnvironmentPool, PolicyEndpoint
    from harness.library import load_library

    ray.init()                                                   # or ray.init(address="auto") on a cluster
    pool = await EnvironmentPool.create(load_library(), actors=4)
    # Step by step, the policy's generate call in between (any framework):
    session, messages, tools = await pool.reset("airline_reservations-004")
    result = await pool.step(session, assistant_message)       # StepOutcome: reward, terminated, truncated, ...
    # Or whole groups (GRPO-style): n rollouts per scenario, sampled from an OpenAI-compatible endpoint.
    policy = PolicyEndpoint(model="hosted_vllm/qwen3-8b", api_base="http://localhost:8000/v1", temperature=1.0)
    groups = await pool.rollout_groups(["airline_reservations-004"], group_size=8, policy=policy)
    rewards = [[rollout.reward for rollout in group] for group in groups]
    await pool.shutdown()

Each actor owns a sandbox pool on its node and any number of sessions (one ``harness.gym.ToolEnv`` each);
sessions stay on the actor that reset them. Environment code never runs in the trainer's process.
"""

from __future__ import annotations

import asyncio
import itertools
from contextlib import AsyncExitStack
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.gym import ToolEnv
from harness.library import Library
from harness.llm import AliasTable, LLMClient
from harness.registry import rules_profile
from harness.rules.profiles import DEFAULT_RULES, RulesName
from harness.sandbox import SandboxLimits, SandboxPool
from harness.schema import ModelSettings, Scenario, TerminationReason, Trajectory
from harness.scoring.reward import CompositeWeights, trajectory_reward

from .cluster import import_ray


class PolicyEndpoint(BaseModel):
    """The policy being trained, served behind an OpenAI-compatible endpoint (vLLM, SGLang, ...)."""

    model_config = ConfigDict(frozen=True)

    model: str = Field(description="litellm model string, e.g. hosted_vllm/qwen3-8b.")
    api_base: str | None = None
    api_key_env: str | None = Field(default=None, description="Name of the variable holding the key, if any.")
    temperature: float | None = 1.0
    max_tokens: int | None = None
    max_concurrency: int = Field(default=64, ge=1, description="Requests in flight per actor.")


class StepOutcome(BaseModel):
    """What ``step`` returns: the gym tuple, with the finished trajectory once the episode has ended."""

    observations: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    reward: float
    terminated: bool
    truncated: bool
    termination: str | None = None
    trajectory: Trajectory | None = None


class Rollout(BaseModel):
    scenario_id: str
    reward: float = Field(description="Composite reward; 0 for an episode lost to an infrastructure error.")
    termination: str
    trajectory: Trajectory


def _scenario_index(library: Library) -> dict[str, Scenario]:
    index: dict[str, Scenario] = {}
    for scenario in library.scenarios:
        if scenario.id in index:
            raise ValueError(f"scenario id {scenario.id!r} appears twice in the library")
        index[scenario.id] = scenario
    return index


class EnvironmentActor:
    """Ray actor body (``ray.remote(EnvironmentActor)``): gym sessions and group rollouts on one node."""

    def __init__(
        self,
        library: Library,
        *,
        workers: int | None = None,
        max_steps: int | None = None,
        weights: CompositeWeights | None = None,
        sandbox_limits: SandboxLimits | None = None,
        allow_weak_sandbox: bool = False,
        rules: RulesName = DEFAULT_RULES,
        include_invalid: bool = False,
    ) -> None:
        self.library = library
        self.rules = rules
        self.include_invalid = include_invalid
        self.allow_weak_sandbox = allow_weak_sandbox
        self.scenarios = _scenario_index(library)
        self.workers = workers
        self.max_steps = max_steps
        self.weights = weights or CompositeWeights()
        self.sandbox_limits = sandbox_limits
        self._stack = AsyncExitStack()
        self._pool: SandboxPool | None = None
        self._sessions: dict[str, ToolEnv] = {}
        self._client: LLMClient | None = None

    async def _sandbox(self) -> SandboxPool:
        if self._pool is None:
            self._pool = await self._stack.enter_async_context(
                self.library.jail(
                    allow_weak_sandbox=self.allow_weak_sandbox, workers=self.workers, limits=self.sandbox_limits
                ).pool()
            )
        return self._pool

    def _env(self, pool: SandboxPool) -> ToolEnv:
        return ToolEnv(
            self.library,
            pool=pool,
            max_steps=self.max_steps,
            weights=self.weights,
            rules=self.rules,
            include_invalid=self.include_invalid,
        )

    async def reset(self, session_id: str, scenario_id: str, seed: int = 0) -> tuple[list[Any], list[Any]]:
        env = self._sessions.get(session_id) or self._env(await self._sandbox())
        self._sessions[session_id] = env
        return await env.reset(self.scenarios[scenario_id], seed=seed)

    async def step(self, session_id: str, assistant_message: dict[str, Any]) -> StepOutcome:
        result = await self._sessions[session_id].step(assistant_message)
        trajectory = result.info.get("trajectory")
        return StepOutcome(
            observations=result.observations,
            messages=result.messages,
            reward=result.reward,
            terminated=result.terminated,
            truncated=result.truncated,
            termination=result.info.get("termination"),
            trajectory=trajectory,
        )

    async def close(self, session_id: str) -> None:
        env = self._sessions.pop(session_id, None)
        if env is not None:
            await env.close()

    async def rollout_group(self, scenario_id: str, size: int, policy: PolicyEndpoint, seed: int = 0) -> list[Rollout]:
        """``size`` episodes of one scenario, each sampled from ``policy`` until the episode ends."""
        pool = await self._sandbox()
        if self._client is None:
            self._client = LLMClient(aliases=AliasTable({}, environ={}))
        client = self._client
        scenario = self.scenarios[scenario_id]
        extra: dict[str, Any] = {}
        if policy.api_base:
            extra["api_base"] = policy.api_base
        if policy.api_key_env:
            extra["api_key_env"] = policy.api_key_env
        settings = ModelSettings(
            model=policy.model, temperature=policy.temperature, max_tokens=policy.max_tokens, extra=extra
        )
        gate = asyncio.Semaphore(policy.max_concurrency)

        async def one(index: int) -> Rollout:
            env = self._env(pool)
            messages, tools = await env.reset(scenario, seed=seed + index)
            try:
                while True:
                    async with gate:
                        answer = await client.chat(settings, messages, tools=tools, role="policy")
                    result = await env.step(answer.message)
                    messages = result.messages
                    if result.terminated or result.truncated:
                        break
            finally:
                await env.close()
            trajectory: Trajectory = result.info["trajectory"]
            return Rollout(
                scenario_id=scenario.id,
                reward=result.reward,
                termination=trajectory.termination.value,
                trajectory=trajectory,
            )

        return list(await asyncio.gather(*(one(index) for index in range(size))))

    async def shutdown(self) -> None:
        for session_id in list(self._sessions):
            await self.close(session_id)
        if self._client is not None:
            await self._client.aclose()
        await self._stack.aclose()
        self._pool = None


class EnvironmentPool:
    """Environment actors spread over the cluster; build it with ``await EnvironmentPool.create(...)``."""

    def __init__(
        self, library: Library, actors: list[Any], weights: CompositeWeights, rules: RulesName = DEFAULT_RULES
    ) -> None:
        self.library = library
        self.actors = actors
        self.weights = weights
        self.rules = rules_profile(rules).name
        self.scenarios = _scenario_index(library)
        self._where: dict[str, Any] = {}
        self._load = dict.fromkeys(range(len(actors)), 0)
        self._ids = itertools.count()

    @classmethod
    async def create(
        cls,
        library: Library,
        *,
        actors: int = 2,
        workers_per_actor: int | None = None,
        max_steps: int | None = None,
        weights: CompositeWeights | None = None,
        sandbox_limits: SandboxLimits | None = None,
        allow_weak_sandbox: bool = False,
        rules: RulesName = DEFAULT_RULES,
        include_invalid: bool = False,
    ) -> EnvironmentPool:
        """Start ``actors`` environment actors (Ray's SPREAD placement) on the cluster this process joined.
        ``rules`` is the episode profile (``harness`` or a benchmark's) of every session and rollout, and of
        :meth:`reward`; scenarios that fail the cheap validation are refused unless ``include_invalid``."""
        ray = import_ray()
        if not ray.is_initialized():
            raise RuntimeError("call ray.init(...) before creating an EnvironmentPool")
        library_ref = ray.put(library)
        weights = weights or CompositeWeights()
        actor_class = ray.remote(EnvironmentActor).options(
            num_cpus=0, max_concurrency=10_000, scheduling_strategy="SPREAD"
        )
        handles = [
            actor_class.remote(
                library_ref,
                workers=workers_per_actor,
                max_steps=max_steps,
                weights=weights,
                sandbox_limits=sandbox_limits,
                allow_weak_sandbox=allow_weak_sandbox,
                rules=rules,
                include_invalid=include_invalid,
            )
            for _ in range(actors)
        ]
        return cls(library, handles, weights, rules)

    def _least_loaded(self) -> int:
        return min(self._load, key=lambda index: self._load[index])

    async def reset(self, scenario_id: str, *, seed: int = 0) -> tuple[str, list[Any], list[Any]]:
        """Open a session on the least busy actor: its id, the opening messages, and the tools."""
        if scenario_id not in self.scenarios:
            raise KeyError(f"scenario {scenario_id!r} is not in the library")
        index = self._least_loaded()
        session_id = f"session-{next(self._ids)}"
        self._where[session_id] = index
        self._load[index] += 1
        messages, tools = await self.actors[index].reset.remote(session_id, scenario_id, seed)
        return session_id, messages, tools

    async def step(self, session_id: str, assistant_message: dict[str, Any]) -> StepOutcome:
        """Apply one assistant message; once the episode ends the session is closed and the outcome carries
        the reward and the trajectory."""
        index = self._where[session_id]
        outcome: StepOutcome = await self.actors[index].step.remote(session_id, assistant_message)
        if outcome.terminated or outcome.truncated:
            await self.close(session_id)
        return outcome

    async def close(self, session_id: str) -> None:
        index = self._where.pop(session_id, None)
        if index is not None:
            self._load[index] -= 1
            await self.actors[index].close.remote(session_id)

    async def rollout_groups(
        self, scenario_ids: list[str], *, group_size: int, policy: PolicyEndpoint, seed: int = 0
    ) -> list[list[Rollout]]:
        """One group of ``group_size`` rollouts per scenario, groups spread round-robin over the actors."""
        calls = [
            self.actors[position % len(self.actors)].rollout_group.remote(scenario_id, group_size, policy, seed)
            for position, scenario_id in enumerate(scenario_ids)
        ]
        return list(await asyncio.gather(*calls))

    def reward(self, scenario_id: str, trajectory: Trajectory) -> float:
        """The reward function on a stored trajectory (0 for an infrastructure error, which has none): the
        composite reward under rules with one (``harness``), else the check pass rate the rules computed (already 0
        for an episode those rules score 0, rounded as they round)."""
        if trajectory.termination is TerminationReason.INFRA_ERROR:
            return 0.0
        if not rules_profile(self.rules).composite_reward:
            return trajectory.reward.state_reward if trajectory.reward is not None else 0.0
        return trajectory_reward(self.scenarios[scenario_id], trajectory, self.weights)

    async def shutdown(self) -> None:
        ray = import_ray()
        await asyncio.gather(*(actor.shutdown.remote() for actor in self.actors), return_exceptions=True)
        for actor in self.actors:
            ray.kill(actor)
        self.actors.clear()
