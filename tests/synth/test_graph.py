"""The tool dependency graph on seed-library environments, embedded with the real offline all-MiniLM-L6-v2."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.library import load_library
from harness.schema import Environment
from harness.toolspec import derive_tools
from synth.graph import (
    GraphModel,
    ToolEdge,
    ToolGraph,
    build_graph,
    docstring_outputs,
    draw_graph,
    read_tools,
    state_changing_tools,
)

ENVIRONMENTS = ("retail_orders", "banking", "airline_reservations")


@pytest.fixture(scope="module")
def library():
    return load_library()


def _samples(library):
    samples: dict[str, dict] = {}
    for scenario in library.scenarios:
        samples.setdefault(scenario.environment_id, scenario.initial_state)
    return samples


@pytest.fixture(scope="module")
def seed_graph(library) -> ToolGraph:
    environments = [library.environments[e] for e in ENVIRONMENTS]
    return asyncio.run(build_graph(environments, sample_states=_samples(library)))


@pytest.fixture(scope="module")
def embedding_only_graph(library) -> ToolGraph:
    environments = [library.environments[e] for e in ENVIRONMENTS]
    return asyncio.run(build_graph(environments, sample_states=_samples(library), match_names=False))


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("retail_orders.find_user_by_email", "retail_orders.list_user_orders"),
        ("retail_orders.find_user_by_email", "retail_orders.get_user_details"),
        ("retail_orders.find_user_by_email", "retail_orders.list_payment_methods"),
        ("retail_orders.list_user_orders", "retail_orders.cancel_order"),
        ("retail_orders.get_order_details", "retail_orders.cancel_order"),
        ("retail_orders.list_payment_methods", "retail_orders.change_order_payment_method"),
        ("banking.find_customer_by_email", "banking.list_accounts"),
        ("banking.find_customer_by_email", "banking.list_cards"),
        ("banking.list_cards", "banking.freeze_card"),
        ("banking.list_accounts", "banking.close_account"),
        ("airline_reservations.find_customer_by_email", "airline_reservations.list_customer_reservations"),
        ("airline_reservations.list_customer_reservations", "airline_reservations.cancel_reservation"),
    ],
)
def test_id_finding_tool_leads_to_the_tool_that_needs_the_id(seed_graph: ToolGraph, source: str, target: str) -> None:
    assert seed_graph.has_edge(source, target)
    assert source in seed_graph.predecessors(target)


def test_embedding_similarity_alone_recovers_the_customer_id_edges(embedding_only_graph: ToolGraph) -> None:
    assert all(e.via == "embedding" for e in embedding_only_graph.edges)
    assert embedding_only_graph.has_edge("banking.find_customer_by_email", "banking.list_accounts")
    assert embedding_only_graph.has_edge("retail_orders.find_user_by_email", "retail_orders.list_user_orders")
    edge = next(
        e
        for e in embedding_only_graph.edges
        if e.source == "banking.find_customer_by_email" and e.target == "banking.list_accounts"
    )
    assert (edge.output, edge.input) == ("customer_id", "customer_id")
    assert edge.similarity is not None and edge.similarity > embedding_only_graph.threshold


def test_edges_a_person_would_not_draw_are_absent(seed_graph: ToolGraph) -> None:
    # A tool that only confirms with a message feeds nothing; an email lookup does not feed a product search.
    assert seed_graph.successors("retail_orders.cancel_order") == []
    assert not seed_graph.has_edge("retail_orders.find_user_by_email", "retail_orders.search_products")
    assert not seed_graph.has_edge("retail_orders.get_product", "retail_orders.list_user_orders")


def test_a_higher_threshold_keeps_a_subset_of_the_similarity_edges(library) -> None:
    environments = [library.environments["retail_orders"]]
    samples = _samples(library)
    low = asyncio.run(build_graph(environments, threshold=0.75, sample_states=samples, match_names=False))
    high = asyncio.run(build_graph(environments, threshold=0.9, sample_states=samples, match_names=False))
    pairs = {(e.source, e.target, e.input) for e in high.edges}
    assert pairs < {(e.source, e.target, e.input) for e in low.edges}


def test_inputs_are_classed_as_user_given_or_tool_produced(seed_graph: ToolGraph) -> None:
    def source(tool: str, name: str) -> str | None:
        return seed_graph.parameter(tool, "input", name).source

    assert source("retail_orders.find_user_by_email", "email") == "user"
    assert source("retail_orders.cancel_order", "reason") == "user"
    assert source("retail_orders.update_default_address", "address") == "user"
    assert source("retail_orders.list_user_orders", "user_id") == "tool"
    assert source("retail_orders.cancel_order", "order_id") == "tool"
    assert source("banking.freeze_card", "card_id") == "tool"


def test_tools_that_change_the_state_are_told_from_queries(seed_graph: ToolGraph) -> None:
    assert seed_graph.tool("retail_orders.cancel_order").state_changing
    assert seed_graph.tool("banking.transfer_between_accounts").state_changing
    assert not seed_graph.tool("retail_orders.get_order_details").state_changing
    assert not seed_graph.tool("banking.list_transactions").state_changing


def test_outputs_are_read_from_the_source_without_a_sample_state(library) -> None:
    sources = read_tools(library.environments["retail_orders"])
    assert {"order_id", "status", "payment_method_id"} <= {o.name for o in sources["get_order_details"].outputs}
    assert [o.name for o in sources["place_order"].outputs] == ["order_id"]
    assert sources["cancel_order"].outputs == []


DOCUMENTED = '''
class Notes:
    def __init__(self, init_config: dict):
        self.notes: dict = init_config.get("notes", {})

    def create_note(self, text: str) -> dict:
        """Create a note.

        Args:
            text: The note's text.

        Returns:
            note_id (string): The id of the created note.
            created (boolean): Whether it was stored.
        """
        note_id = f"N-{len(self.notes) + 1}"
        self.notes[note_id] = {"note_id": note_id, "text": text}
        return {"success": True, "data": {"note_id": note_id, "created": True}}

    def delete_note(self, note_id: str) -> dict:
        """Delete a note.

        Args:
            note_id: The note to delete.
        """
        self.notes.pop(note_id, None)
        return {"success": True, "message": "deleted"}

    def count_notes(self) -> dict:
        """How many notes there are."""
        return {"success": True, "data": len(self.notes)}
'''


def _notes_environment() -> Environment:
    return Environment(
        id="notes", name="Notes", class_name="Notes", code=DOCUMENTED, tools=derive_tools(DOCUMENTED, "Notes")
    )


def test_a_returns_section_gives_the_outputs() -> None:
    fields = docstring_outputs(
        "Create.\n\nArgs:\n    text: x\n\nReturns:\n    note_id (string): The id.\n    created (boolean): ok\n"
    )
    assert [(f.name, f.type) for f in fields] == [("note_id", "string"), ("created", "boolean")]
    sources = read_tools(_notes_environment())
    assert sources["create_note"].outputs_from == "docstring"
    assert sources["delete_note"].state_changing and sources["create_note"].state_changing
    assert not sources["count_notes"].state_changing


def _bag_of_words(texts: list[str]) -> list[list[float]]:
    vectors = []
    for text in texts:
        vector = [0.0] * 64
        for word in text.lower().replace("(", " ").replace(")", " ").replace(":", " ").split():
            vector[sum(map(ord, word)) % 64] += 1.0
        vectors.append(vector)
    return vectors


async def _embed(texts: list[str]) -> list[list[float]]:
    return _bag_of_words(texts)


async def test_model_passes_add_edges_within_an_environment_and_reclass_inputs(library) -> None:
    calls: list[str] = []

    async def propose(environment: Environment, graph: ToolGraph) -> list[ToolEdge]:
        calls.append(environment.id)
        return [
            ToolEdge(source="notes.count_notes", target="notes.delete_note", reason="count before deleting"),
            ToolEdge(source="notes.count_notes", target="retail_orders.cancel_order", reason="another environment"),
            ToolEdge(source="notes.count_notes", target="notes.missing_tool"),
        ]

    async def classify(environment: Environment, inputs):
        return {p.id: "user" for p in inputs if p.name == "note_id"}

    graph = await build_graph(
        [_notes_environment(), library.environments["retail_orders"]],
        embed=_embed,
        embedding_model="bag-of-words",
        model=GraphModel(propose_edges=propose, classify_inputs=classify),
    )
    assert calls == ["notes", "retail_orders"]
    model_edges = [e for e in graph.edges if e.via == "model"]
    assert [(e.source, e.target) for e in model_edges] == [("notes.count_notes", "notes.delete_note")]
    assert graph.parameter("notes.delete_note", "input", "note_id").source == "user"
    # Without the model, the same-name identifier rule makes the note id internal.
    plain = await build_graph([_notes_environment()], embed=_embed, embedding_model="bag-of-words")
    assert plain.parameter("notes.delete_note", "input", "note_id").source == "tool"
    assert plain.has_edge("notes.create_note", "notes.delete_note")


def test_graph_round_trips_through_json_and_draws_a_png(seed_graph: ToolGraph, tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    seed_graph.save(path)
    loaded = ToolGraph.load(path)
    assert loaded.model_dump() == seed_graph.model_dump()
    assert loaded.producers("retail_orders.cancel_order", "order_id") == seed_graph.producers(
        "retail_orders.cancel_order", "order_id"
    )
    picture = tmp_path / "graph.png"
    draw_graph(loaded, picture)
    data = picture.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


async def test_model_backed_passes_list_outputs_class_inputs_and_add_edges(library) -> None:
    import itertools
    import json

    from harness.llm import LLMClient, register_python_model
    from harness.schema import ModelSettings, Usage
    from synth.answers import Asker
    from synth.graph import model_graph_passes

    asked: list[str] = []

    def graph_model(request: dict) -> dict:
        system, user = request["messages"][0]["content"], request["messages"][1]["content"]
        if system.startswith("You list the output fields"):
            asked.append(user.split("\n", 1)[0])
            if "Tool: count_notes" in user:
                return {
                    "role": "assistant",
                    "content": json.dumps({"outputs": [{"name": "note_count", "type": "integer"}]}),
                }
            return {"role": "assistant", "content": json.dumps({"outputs": []})}
        if system.startswith("You classify"):
            ids = [line.split(": ", 1)[0] for line in user.splitlines() if line.startswith("notes.")]
            return {"role": "assistant", "content": json.dumps({"sources": dict.fromkeys(ids, "user")})}
        if system.startswith("You complete a tool dependency graph"):
            edges = [{"source": "count_notes", "target": "create_note", "input": None, "reason": "check the limit"}]
            return {"role": "assistant", "content": json.dumps({"edges": edges})}
        raise AssertionError(system[:60])

    name = f"graph-{next(itertools.count())}-{id(asked)}"
    register_python_model(name, graph_model)
    client = LLMClient(cache_dir=None)
    usage = Usage()
    try:
        passes = model_graph_passes(Asker(client, ModelSettings(model=f"python/{name}")), usage)
        graph = await build_graph([_notes_environment()], embed=_embed, embedding_model="bag-of-words", model=passes)
    finally:
        await client.aclose()
    # The documented tool keeps its Returns section; the others are asked once each.
    assert asked == ["Tool: delete_note", "Tool: count_notes"]
    assert graph.tool("notes.count_notes").outputs == ["note_count"]
    assert graph.tool("notes.count_notes").outputs_from == "model"
    assert graph.has_edge("notes.count_notes", "notes.create_note")
    assert next(e for e in graph.edges if e.via == "model").reason == "check the limit"
    assert graph.parameter("notes.delete_note", "input", "note_id").source == "user"
    assert usage.requests == 4


def test_state_changing_tools_are_recognised_across_the_seed_library(library) -> None:
    """Read from the source only: the seed library's naming tells the truth to compare with."""
    query_prefixes = ("get_", "list_", "find_", "search_", "check_", "count_", "quote_")
    wrong = []
    for environment in library.environments.values():
        for name, source in read_tools(environment).items():
            if source.state_changing == name.startswith(query_prefixes):
                wrong.append(f"{environment.id}.{name}")
    assert wrong == []


def test_edges_stay_within_an_environment_unless_cross_environment_is_asked(seed_graph: ToolGraph, library) -> None:
    def environment(node: str) -> str:
        return node.split(".", 1)[0]

    assert not seed_graph.cross_environment and seed_graph.details["cross_environment_edges"] == 0
    assert all(environment(e.source) == environment(e.target) for e in seed_graph.edges)
    environments = [library.environments[e] for e in ENVIRONMENTS]
    crossing = asyncio.run(
        build_graph(environments, sample_states=_samples(library), match_names=False, cross_environment=True)
    )
    across = [e for e in crossing.edges if environment(e.source) != environment(e.target)]
    assert across and crossing.details["cross_environment_edges"] == len(across)


async def test_spurious_embedding_edges_are_pruned_by_the_model(library) -> None:
    import itertools
    import json

    from harness.llm import LLMClient, register_python_model
    from harness.schema import ModelSettings, Usage
    from synth.answers import Asker
    from synth.graph import model_graph_passes

    retail = library.environments["retail_orders"]
    plain = await build_graph([retail], sample_states=_samples(library), match_names=False)
    doomed = next(e for e in plain.edges if e.target == "retail_orders.list_user_orders")
    reviewed: list[str] = []

    def reviewer(request: dict) -> dict:
        system, user = request["messages"][0]["content"], request["messages"][1]["content"]
        if system.startswith("You review the edges"):
            reviewed.append(user)
            spurious = [
                {
                    "source": doomed.source.split(".", 1)[1],
                    "output": doomed.output,
                    "target": "list_user_orders",
                    "input": doomed.input,
                    "reason": "test",
                }
            ]
            content = "Analysis: one edge is doubtful.\n```json\n" + json.dumps({"spurious": spurious}) + "\n```"
            return {"role": "assistant", "content": content}
        if system.startswith("You list the output fields"):
            return {"role": "assistant", "content": json.dumps({"outputs": []})}
        if system.startswith("You classify"):
            return {"role": "assistant", "content": json.dumps({"sources": {}})}
        return {"role": "assistant", "content": json.dumps({"edges": []})}

    name = f"prune-{next(itertools.count())}-{id(reviewed)}"
    register_python_model(name, reviewer)
    client = LLMClient(cache_dir=None)
    try:
        passes = model_graph_passes(Asker(client, ModelSettings(model=f"python/{name}")), Usage(), prune=True)
        pruned = await build_graph([retail], sample_states=_samples(library), match_names=False, model=passes)
    finally:
        await client.aclose()
    assert len(reviewed) == 1 and f"{doomed.output} -> list_user_orders.{doomed.input}" in reviewed[0]
    key = (doomed.source, doomed.target, doomed.output, doomed.input)
    assert key not in {(e.source, e.target, e.output, e.input) for e in pruned.edges}
    assert [(p["source"], p["target"]) for p in pruned.details["pruned"]] == [(doomed.source, doomed.target)]
    assert len([e for e in pruned.edges if e.via == "embedding"]) == len(plain.edges) - 1


def test_pictures_have_one_panel_per_environment(seed_graph: ToolGraph, tmp_path: Path) -> None:
    import matplotlib.image

    single, several = tmp_path / "one.png", tmp_path / "all.png"
    draw_graph(seed_graph, single, environments=["retail_orders"])
    draw_graph(seed_graph, several)
    one, three = matplotlib.image.imread(single), matplotlib.image.imread(several)
    # Three environments lay out as a 2 x 2 grid of panels: twice the width and height of one panel.
    assert three.shape[1] > 1.8 * one.shape[1] and three.shape[0] > 1.6 * one.shape[0]


def test_state_changing_tools_agree_with_reading_the_source_each_time() -> None:
    for environment in load_library().environments.values():
        expected = {name: source.state_changing for name, source in read_tools(environment).items()}
        assert state_changing_tools(environment) == expected
        assert state_changing_tools(environment) == expected  # the kept answer, not a changed one
        assert any(expected.values()) and not all(expected.values()), environment.id
