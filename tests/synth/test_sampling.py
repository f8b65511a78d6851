"""Topology-aware chain sampling: properties over the seed library's graph and over random graphs.

The seed graph here is embedded with a deterministic bag-of-words embedding injected into ``build_graph`` (the
graph construction test uses the real model); what is under test is the sampler, not the embedding.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.library import load_library
from synth.graph import ParameterNode, ToolEdge, ToolGraph, ToolNode, build_graph, parameter_id
from synth.sampling import ChainSampler, ChainSamplingError, SamplingParams, ToolChain, unsatisfied_inputs


async def _embed(texts: list[str]) -> list[list[float]]:
    vectors = []
    for text in texts:
        vector = [0.0] * 128
        for word in text.lower().replace("(", " ").replace(")", " ").replace(":", " ").replace("'s", "").split():
            vector[sum(ord(c) * (i + 1) for i, c in enumerate(word)) % 128] += 1.0
        vectors.append(vector)
    return vectors


def _seed_graph() -> ToolGraph:
    library = load_library()
    samples: dict[str, dict] = {}
    for scenario in library.scenarios:
        samples.setdefault(scenario.environment_id, scenario.initial_state)
    return asyncio.run(
        build_graph(list(library.environments.values()), embed=_embed, threshold=0.8, sample_states=samples)
    )


SEED_GRAPH = _seed_graph()


def _check_chain(graph: ToolGraph, chain: ToolChain, params: SamplingParams) -> None:
    assert unsatisfied_inputs(graph, chain) == []
    assert 1 <= len(chain.steps) <= params.max_tools
    assert len(chain.environments) <= params.max_environments
    assert len(set(chain.tools)) == len(chain.tools)
    for index, step in enumerate(chain.steps):
        for binding in step.inputs:
            if binding.producer is not None:
                assert binding.producer < index
                assert graph.has_edge(chain.steps[binding.producer].tool, step.tool)


params_strategy = st.builds(
    SamplingParams,
    p_skip_optional=st.floats(0, 1),
    p_skip_satisfied=st.floats(0, 1),
    max_depth=st.integers(0, 5),
    max_tools=st.integers(1, 15),
    max_environments=st.integers(1, 3),
    expansion_rounds=st.integers(0, 2),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), params=params_strategy)
def test_every_required_input_comes_from_the_user_or_an_earlier_tool(seed: int, params: SamplingParams) -> None:
    try:
        chain = ChainSampler(SEED_GRAPH, params).sample(seed)
    except ChainSamplingError:
        # Only possible when no start tool can be resolved within the bounds (e.g. max_depth 0 or max_tools 1).
        assert params.max_depth == 0 or params.max_tools <= 2
        return
    _check_chain(SEED_GRAPH, chain, params)


@st.composite
def random_graphs(draw: st.DrawFn) -> ToolGraph:
    count = draw(st.integers(2, 12))
    tools: list[ToolNode] = []
    parameters: list[ParameterNode] = []
    for n in range(count):
        environment = f"e{draw(st.integers(0, 3))}"
        tool_key = f"{environment}.t{n}"
        inputs = [f"x{k}" for k in range(draw(st.integers(0, 3)))]
        for name in inputs:
            parameters.append(
                ParameterNode(
                    id=parameter_id(tool_key, "input", name),
                    tool=tool_key,
                    name=name,
                    direction="input",
                    required=draw(st.booleans()),
                    source=draw(st.sampled_from(["user", "tool"])),
                )
            )
        tools.append(
            ToolNode(
                id=tool_key, environment_id=environment, name=f"t{n}", state_changing=draw(st.booleans()), inputs=inputs
            )
        )
    edges = []
    for target in tools:
        for name in target.inputs:
            for source in draw(st.lists(st.sampled_from(tools), max_size=3, unique_by=lambda t: t.id)):
                if source.id != target.id:
                    edges.append(ToolEdge(source=source.id, target=target.id, output="y", input=name))
    return ToolGraph(tools=tools, parameters=parameters, edges=edges)


@settings(max_examples=200, deadline=None)
@given(graph=random_graphs(), seed=st.integers(0, 10_000), params=params_strategy)
def test_the_invariant_holds_on_random_graphs(graph: ToolGraph, seed: int, params: SamplingParams) -> None:
    try:
        chain = ChainSampler(graph, params).sample(seed)
    except ChainSamplingError:
        # Then no tool could be placed: each needs a required internal input (a tool whose required inputs all
        # come from the user can always start a chain).
        assert all(any(p.required and p.source == "tool" for p in graph.inputs(t.id)) for t in graph.tools)
        return
    _check_chain(graph, chain, params)


def test_the_same_seed_gives_the_same_chain() -> None:
    sampler = ChainSampler(SEED_GRAPH)
    assert [sampler.sample(7).model_dump() for _ in range(3)] == [ChainSampler(SEED_GRAPH).sample(7).model_dump()] * 3


def test_chains_differ_across_seeds() -> None:
    params = SamplingParams(max_tools=8, environments=["retail_orders"], max_environments=1)
    sampler = ChainSampler(SEED_GRAPH, params)
    chains = [tuple(sampler.sample(seed).tools) for seed in range(200)]
    repeated = {chain: n for chain, n in Counter(chains).items() if n > 1}
    assert len(set(chains)) >= 150
    # What repeats is short: there are few ways to make a one- or two-call chain in one environment.
    assert all(len(chain) <= 3 for chain in repeated)


def test_rho_adds_predecessors_and_optional_inputs_can_all_be_skipped() -> None:
    def mean_length(params: SamplingParams) -> float:
        sampler = ChainSampler(SEED_GRAPH, params)
        return sum(len(sampler.sample(seed).steps) for seed in range(60)) / 60

    never = mean_length(SamplingParams(p_skip_satisfied=1.0, expansion_rounds=0, max_environments=1))
    always = mean_length(SamplingParams(p_skip_satisfied=0.0, expansion_rounds=0, max_environments=1))
    assert always > never
    sampler = ChainSampler(SEED_GRAPH, SamplingParams(p_skip_optional=1.0))
    for seed in range(30):
        for step in sampler.sample(seed).steps:
            assert all(b.source == "skipped" for b in step.inputs if not b.required)


def test_producers_come_before_consumers_in_a_known_chain() -> None:
    params = SamplingParams(environments=["retail_orders"], max_environments=1, p_skip_satisfied=1.0)
    sampler = ChainSampler(SEED_GRAPH, params)
    for seed in range(50):
        chain = sampler.sample(seed)
        tools = [t.split(".")[1] for t in chain.tools]
        if "cancel_order" in tools:
            position = tools.index("cancel_order")
            step = chain.steps[position]
            binding = next(b for b in step.inputs if b.name == "order_id")
            assert binding.source == "tool" and binding.producer is not None and binding.producer < position
            return
    pytest.fail("no chain with cancel_order in 50 seeds")


def test_a_producer_that_leaves_no_room_for_its_consumer_is_not_used() -> None:
    """With one tool allowed, a tool whose inputs the user can give starts a chain alone, even when every input
    has a producer it could have resolved first (a case the property test above once found)."""
    spec = {"t0": ["x0", "x1"], "t1": ["x0", "x1"], "t2": ["x0"]}
    tools = [ToolNode(id=f"e0.{t}", environment_id="e0", name=t, inputs=inputs) for t, inputs in spec.items()]
    parameters = [
        ParameterNode(id=parameter_id(f"e0.{t}", "input", x), tool=f"e0.{t}", name=x, direction="input", source="user")
        for t, inputs in spec.items()
        for x in inputs
    ]
    edges = [
        ToolEdge(source=f"e0.{a}", target=f"e0.{b}", output="y", input=x)
        for a, b, x in [("t1", "t0", "x1"), ("t0", "t1", "x1"), ("t0", "t2", "x0")]
    ]
    graph = ToolGraph(tools=tools, parameters=parameters, edges=edges)
    params = SamplingParams(p_skip_optional=0.0, p_skip_satisfied=0.0, max_depth=1, max_tools=1, expansion_rounds=0)
    for seed in range(20):
        chain = ChainSampler(graph, params).sample(seed)
        assert len(chain.steps) == 1
        assert all(b.source == "user" for b in chain.steps[0].inputs)
