"""Topology-aware sampling of tool chains on the tool dependency graph (EnvFactory).

A chain starts from one tool. For each input of a tool: an optional input is skipped with probability
``p_skip_optional``; an input that is already satisfiable (the user gives it, or a tool already in the chain
produces it) is left as it is with probability ``p_skip_satisfied`` (otherwise, the "extra predecessor" case,
a producer is added anyway); an input that is not satisfiable needs a producer, which is chosen and resolved
first, recursively up to ``max_depth``. Producers are placed before consumers. Then ``k`` unvisited successors
of the chain (``k`` uniform in 1..all of them) are resolved and appended. Chains hold at most ``max_tools``
tools from at most ``max_environments`` environments. Everything is drawn from ``random.Random(seed)``.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from synth.graph import ToolGraph

logger = logging.getLogger(__name__)


class SamplingParams(BaseModel):
    p_skip_optional: float = Field(default=0.6, ge=0, le=1)
    p_skip_satisfied: float = Field(default=0.9, ge=0, le=1, description="1 − ρ, the extra-predecessor rate.")
    max_depth: int = Field(default=5, ge=0)
    max_tools: int = Field(default=15, ge=1)
    max_environments: int = Field(default=3, ge=1)
    expansion_rounds: int = Field(default=1, ge=0, description="Rounds of forward expansion to successors.")
    p_start_state_changing: float = Field(
        default=0.8, ge=0, le=1, description="Chance that the first tool is one that changes the state."
    )
    environments: list[str] | None = Field(default=None, description="Only these environments (None: all).")
    start_attempts: int = Field(default=20, ge=1, description="Start tools tried before giving up.")


class InputBinding(BaseModel):
    """How one input of a chain step gets its value."""

    name: str
    required: bool
    source: Literal["user", "tool", "skipped"]
    producer: int | None = Field(default=None, description="Index in the chain of the tool that produces it.")


class ChainStep(BaseModel):
    tool: str
    inputs: list[InputBinding] = Field(default_factory=list)


class ToolChain(BaseModel):
    seed: int
    steps: list[ChainStep]

    @property
    def tools(self) -> list[str]:
        return [s.tool for s in self.steps]

    @property
    def environments(self) -> list[str]:
        seen: list[str] = []
        for step in self.steps:
            environment = step.tool.split(".", 1)[0]
            if environment not in seen:
                seen.append(environment)
        return seen


class ChainSamplingError(RuntimeError):
    """No chain could be built from any start tool tried."""


@dataclass
class _Draft:
    """A chain under construction; resolution works on a copy so that a failed branch leaves no trace."""

    steps: list[ChainStep] = field(default_factory=list)
    environments: list[str] = field(default_factory=list)

    def copy(self) -> _Draft:
        return _Draft([s.model_copy(deep=True) for s in self.steps], list(self.environments))

    def index_of(self, tool_id: str) -> int | None:
        for index, step in enumerate(self.steps):
            if step.tool == tool_id:
                return index
        return None


class ChainSampler:
    def __init__(self, graph: ToolGraph, params: SamplingParams | None = None):
        self.graph = graph
        self.params = params or SamplingParams()
        allowed = set(self.params.environments) if self.params.environments else None
        self.candidates = sorted(t.id for t in graph.tools if allowed is None or t.environment_id in allowed)

    def sample(self, seed: int) -> ToolChain:
        rng = random.Random(seed)
        tried: set[str] = set()
        for _attempt in range(self.params.start_attempts):
            start = self._pick_start(rng, tried)
            if start is None:
                break
            tried.add(start)
            draft = self._resolve(_Draft(), start, 0, rng, frozenset())
            if draft is None:
                continue
            for _round in range(self.params.expansion_rounds):
                draft = self._expand(draft, rng)
            return ToolChain(seed=seed, steps=draft.steps)
        raise ChainSamplingError(f"no chain could be sampled with seed {seed}")

    def _pick_start(self, rng: random.Random, tried: set[str]) -> str | None:
        remaining = [t for t in self.candidates if t not in tried]
        if not remaining:
            return None
        changing = [t for t in remaining if self.graph.tool(t).state_changing]
        if changing and rng.random() < self.params.p_start_state_changing:
            return rng.choice(changing)
        return rng.choice(remaining)

    def _environment_allowed(self, draft: _Draft, tool_key: str) -> bool:
        environment = self.graph.tool(tool_key).environment_id
        if self.params.environments and environment not in self.params.environments:
            return False
        return environment in draft.environments or len(draft.environments) < self.params.max_environments

    def _resolve(
        self, draft: _Draft, tool_key: str, depth: int, rng: random.Random, stack: frozenset[str]
    ) -> _Draft | None:
        """``draft`` with ``tool_key`` appended after the producers its inputs need, or None if impossible."""
        if draft.index_of(tool_key) is not None:
            return draft
        if len(draft.steps) >= self.params.max_tools or not self._environment_allowed(draft, tool_key):
            return None
        work = draft.copy()
        environment = self.graph.tool(tool_key).environment_id
        if environment not in work.environments:
            work.environments.append(environment)
        stack = stack | {tool_key}
        bindings: list[InputBinding] = []
        for parameter in self.graph.inputs(tool_key):
            if not parameter.required and rng.random() < self.params.p_skip_optional:
                bindings.append(InputBinding(name=parameter.name, required=False, source="skipped"))
                continue
            producer = self._producer_in(work, tool_key, parameter.name)
            user_given = parameter.source == "user"
            satisfiable = user_given or producer is not None
            if satisfiable and rng.random() < self.params.p_skip_satisfied:
                bindings.append(self._binding(parameter.name, parameter.required, user_given, producer))
                continue
            candidates = [
                p
                for p in self.graph.producers(tool_key, parameter.name)
                if p not in stack and work.index_of(p) is None and self._environment_allowed(work, p)
            ]
            rng.shuffle(candidates)
            resolved = None
            if depth < self.params.max_depth:
                for candidate in candidates[:3]:
                    resolved = self._resolve(work, candidate, depth + 1, rng, stack)
                    if resolved is not None and len(resolved.steps) >= self.params.max_tools:
                        resolved = None  # a producer that leaves no room for this tool is no use to it
                    if resolved is not None:
                        break
            if resolved is not None:
                work = resolved
                producer = self._producer_in(work, tool_key, parameter.name)
            elif not satisfiable:
                if parameter.required:
                    return None
                bindings.append(InputBinding(name=parameter.name, required=False, source="skipped"))
                continue
            bindings.append(self._binding(parameter.name, parameter.required, user_given, producer))
        if len(work.steps) >= self.params.max_tools:
            return None
        work.steps.append(ChainStep(tool=tool_key, inputs=bindings))
        return work

    def _producer_in(self, draft: _Draft, tool_key: str, input_name: str) -> int | None:
        """The latest tool of the chain that produces this input."""
        producers = set(self.graph.producers(tool_key, input_name))
        for index in range(len(draft.steps) - 1, -1, -1):
            if draft.steps[index].tool in producers:
                return index
        return None

    @staticmethod
    def _binding(name: str, required: bool, user_given: bool, producer: int | None) -> InputBinding:
        if producer is not None:
            return InputBinding(name=name, required=required, source="tool", producer=producer)
        assert user_given
        return InputBinding(name=name, required=required, source="user")

    def _expand(self, draft: _Draft, rng: random.Random) -> _Draft:
        in_chain = {s.tool for s in draft.steps}
        successors = sorted(
            {
                successor
                for step in draft.steps
                for successor in self.graph.successors(step.tool)
                if successor not in in_chain and self._environment_allowed(draft, successor)
            }
        )
        if not successors:
            return draft
        chosen = rng.sample(successors, rng.randint(1, len(successors)))
        for successor in chosen:
            if len(draft.steps) >= self.params.max_tools:
                break
            resolved = self._resolve(draft, successor, 0, rng, frozenset())
            if resolved is not None:
                draft = resolved
        return draft


def unsatisfied_inputs(graph: ToolGraph, chain: ToolChain) -> list[str]:
    """Required inputs of the chain that neither the user nor an earlier tool of the chain provides."""
    problems: list[str] = []
    for index, step in enumerate(chain.steps):
        bound = {b.name: b for b in step.inputs}
        for parameter in graph.inputs(step.tool):
            if not parameter.required:
                continue
            binding = bound.get(parameter.name)
            if binding is None or binding.source == "skipped":
                problems.append(f"{step.tool}.{parameter.name}: not bound")
            elif binding.source == "user" and parameter.source != "user":
                problems.append(f"{step.tool}.{parameter.name}: produced by tools, yet left to the user")
            elif binding.source == "tool":
                producer = binding.producer
                if producer is None or producer >= index:
                    problems.append(f"{step.tool}.{parameter.name}: producer is not earlier in the chain")
                elif chain.steps[producer].tool not in graph.producers(step.tool, parameter.name):
                    problems.append(f"{step.tool}.{parameter.name}: {chain.steps[producer].tool} does not produce it")
    return problems
