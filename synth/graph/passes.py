"""The model-backed passes of graph construction, asked through a :class:`synth.answers.Asker`."""

from __future__ import annotations

import ast
from typing import Any, Literal

from pydantic import Field

from harness.schema import Environment
from harness.toolspec import find_class
from synth.graph.edges import GraphModel
from synth.graph.records import InputSource, OutputField, ParameterNode, ToolEdge, ToolGraph, tool_id


def model_graph_passes(asker: Any, usage: Any, *, prune: bool = False) -> GraphModel:
    """The model-backed passes (output listing, input classing, edge proposals, and with ``prune`` the pruning
    of spurious embedding edges), asked through a :class:`synth.answers.Asker` (answers are validated and
    cached by the model client, so each tool's outputs are asked for once)."""
    from synth.records import Answer, Reasoned
    from synth.templates import load_template

    class OutputItem(Answer):
        name: str
        type: str = "string"
        description: str = ""

    class OutputsAnswer(Reasoned):
        outputs: list[OutputItem] = Field(default_factory=list)

    class SourcesAnswer(Reasoned):
        sources: dict[str, Literal["user", "tool"]] = Field(default_factory=dict)

    class EdgeItem(Answer):
        source: str
        target: str
        input: str | None = None
        reason: str = ""

    class EdgesAnswer(Reasoned):
        edges: list[EdgeItem] = Field(default_factory=list)

    class SpuriousItem(Answer):
        source: str
        target: str
        output: str | None = None
        input: str | None = None
        reason: str = ""

    class PruneAnswer(Reasoned):
        spurious: list[SpuriousItem] = Field(default_factory=list)

    async def list_outputs(environment: Environment, tool_name: str) -> list[OutputField] | None:
        class_node = find_class(ast.parse(environment.code), environment.class_name)
        method = next((n for n in class_node.body if isinstance(n, ast.FunctionDef) and n.name == tool_name), None)
        if method is None:
            return None
        messages = load_template("query_graph_outputs").render(
            tool=tool_name, source=ast.get_source_segment(environment.code, method) or ""
        )
        answer = await asker.json(messages, OutputsAnswer, "graph_outputs", usage)
        return [OutputField(o.name, o.type, o.description) for o in answer.outputs if o.name.isidentifier()]

    async def classify_inputs(environment: Environment, inputs: list[ParameterNode]) -> dict[str, InputSource]:
        listing = "\n".join(f"{p.id}: {p.tool.split('.', 1)[1]}, {p.name}, {p.description}" for p in inputs)
        messages = load_template("query_graph_sources").render(environment=environment.name, parameters=listing)
        answer = await asker.json(messages, SourcesAnswer, "graph_sources", usage)
        return dict(answer.sources)

    async def propose_edges(environment: Environment, graph: ToolGraph) -> list[ToolEdge]:
        tools = graph.tools_of(environment.id)
        listing = "\n".join(f"- {t.name}(inputs: {t.inputs}; outputs: {t.outputs}): {t.description}" for t in tools)
        edges = "\n".join(
            f"- {e.source.split('.', 1)[1]} -> {e.target.split('.', 1)[1]}"
            for e in graph.edges
            if e.source.startswith(environment.id + ".") and e.target.startswith(environment.id + ".")
        )
        messages = load_template("query_graph_edges").render(
            environment=environment.name, tools=listing, edges=edges or "(none)"
        )
        answer = await asker.json(messages, EdgesAnswer, "graph_edges", usage)
        return [
            ToolEdge(
                source=tool_id(environment.id, e.source),
                target=tool_id(environment.id, e.target),
                input=e.input,
                via="model",
                reason=e.reason or None,
            )
            for e in answer.edges
        ]

    def short(node_id: str) -> str:
        return node_id.split(".", 1)[1]

    async def prune_edges(environment: Environment, graph: ToolGraph, edges: list[ToolEdge]) -> list[ToolEdge]:
        tools = graph.tools_of(environment.id)
        listing = "\n".join(f"- {t.name}(inputs: {t.inputs}; outputs: {t.outputs}): {t.description}" for t in tools)
        lines = "\n".join(
            f"- {e.source if graph.tool(e.source).environment_id != environment.id else short(e.source)}.{e.output}"
            f" -> {short(e.target)}.{e.input} ({e.similarity})"
            for e in edges
        )
        messages = load_template("query_graph_prune").render(environment=environment.name, tools=listing, edges=lines)
        answer = await asker.json(messages, PruneAnswer, "graph_prune", usage)
        named = {(s.source, s.output, s.target, s.input) for s in answer.spurious}
        return [
            e
            for e in edges
            if (short(e.source), e.output, short(e.target), e.input) in named
            or (e.source, e.output, short(e.target), e.input) in named
        ]

    return GraphModel(
        list_outputs=list_outputs,
        classify_inputs=classify_inputs,
        propose_edges=propose_edges,
        prune_edges=prune_edges if prune else None,
    )
