"""Building the graph: nodes from the tools' schemas and sources, similarity and same-name edges, the optional
model passes (:class:`GraphModel`), and the classing of each input as given by the user or produced by a tool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.schema import Environment
from synth.graph.records import (
    DEFAULT_THRESHOLD,
    InputSource,
    OutputField,
    ParameterNode,
    ToolEdge,
    ToolGraph,
    ToolNode,
    is_identifier_name,
    parameter_id,
    tool_id,
)
from synth.graph.source import ToolSource, read_tools

EmbedFunction = Callable[[list[str]], Awaitable[list[list[float]]]]
OutputLister = Callable[[Environment, str], Awaitable[list[OutputField] | None]]
SourceClassifier = Callable[[Environment, list[ParameterNode]], Awaitable[dict[str, InputSource] | None]]
EdgeProposer = Callable[[Environment, ToolGraph], Awaitable[list[ToolEdge]]]
EdgePruner = Callable[[Environment, ToolGraph, list[ToolEdge]], Awaitable[list[ToolEdge]]]


@dataclass
class GraphModel:
    """Model-backed passes of graph construction; each may be left out (the deterministic rule is used)."""

    list_outputs: OutputLister | None = None
    classify_inputs: SourceClassifier | None = None
    propose_edges: EdgeProposer | None = None
    prune_edges: EdgePruner | None = None  # given the embedding edges into one environment: the spurious ones


def _nodes_for(environment: Environment, sources: dict[str, ToolSource]) -> tuple[list[ToolNode], list[ParameterNode]]:
    tools: list[ToolNode] = []
    parameters: list[ParameterNode] = []
    for spec in environment.tools:
        source = sources.get(spec.name)
        node_id = tool_id(environment.id, spec.name)
        schema = spec.function.parameters or {}
        required = set(schema.get("required") or [])
        inputs = []
        for name, prop in (schema.get("properties") or {}).items():
            inputs.append(name)
            parameters.append(
                ParameterNode(
                    id=parameter_id(node_id, "input", name),
                    tool=node_id,
                    name=name,
                    direction="input",
                    type=str(prop.get("type") or "string"),
                    description=str(prop.get("description") or ""),
                    required=name in required,
                )
            )
        outputs = []
        for output in source.outputs if source else []:
            outputs.append(output.name)
            parameters.append(
                ParameterNode(
                    id=parameter_id(node_id, "output", output.name),
                    tool=node_id,
                    name=output.name,
                    direction="output",
                    type=output.type,
                    description=output.description,
                )
            )
        tools.append(
            ToolNode(
                id=node_id,
                environment_id=environment.id,
                name=spec.name,
                description=spec.function.description,
                state_changing=source.state_changing if source else True,
                inputs=inputs,
                outputs=outputs,
                outputs_from=source.outputs_from if source else "none",
            )
        )
    return tools, parameters


def _normalized(vectors: Sequence[Sequence[float]]) -> Any:
    import numpy as np

    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        matrix = matrix.reshape(len(vectors), -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def similarity_edges(
    graph_tools: list[ToolNode],
    parameters: list[ParameterNode],
    vectors: dict[str, Any],
    threshold: float,
    cross_environment: bool,
) -> list[ToolEdge]:
    """A → B for every (output of A, input of B) pair whose cosine similarity is above ``threshold``; the best
    pair per (A, B, input of B) is kept. Computed as one matrix product per block of outputs."""
    import numpy as np

    outputs = [p for p in parameters if p.direction == "output"]
    inputs = [p for p in parameters if p.direction == "input"]
    if not outputs or not inputs:
        return []
    tool_index = {t.id: i for i, t in enumerate(graph_tools)}
    environment_index = {e: i for i, e in enumerate(sorted({t.environment_id for t in graph_tools}))}
    tool_environment = np.asarray([environment_index[t.environment_id] for t in graph_tools])
    output_tool = np.asarray([tool_index[p.tool] for p in outputs])
    input_tool = np.asarray([tool_index[p.tool] for p in inputs])
    output_matrix = _normalized([vectors[p.text] for p in outputs])
    input_matrix = _normalized([vectors[p.text] for p in inputs])
    found_rows, found_columns, found_scores = [], [], []
    block = 1024
    for start in range(0, len(outputs), block):
        scores = output_matrix[start : start + block] @ input_matrix.T
        rows, columns = np.nonzero(scores > threshold)
        keep = output_tool[start + rows] != input_tool[columns]
        if not cross_environment:
            keep &= tool_environment[output_tool[start + rows]] == tool_environment[input_tool[columns]]
        found_rows.append(start + rows[keep])
        found_columns.append(columns[keep])
        found_scores.append(scores[rows[keep], columns[keep]])
    rows = np.concatenate(found_rows)
    columns = np.concatenate(found_columns)
    similarity = np.concatenate(found_scores)
    if not len(rows):
        return []
    # The best output of each source tool for each input: one edge per (source tool, input parameter).
    keys = output_tool[rows].astype(np.int64) * len(inputs) + columns
    order = np.lexsort((-similarity, keys))
    _, first = np.unique(keys[order], return_index=True)
    edges = []
    for position in order[first].tolist():
        output = outputs[int(rows[position])]
        target = inputs[int(columns[position])]
        edges.append(
            ToolEdge(
                source=output.tool,
                target=target.tool,
                output=output.name,
                input=target.name,
                similarity=round(float(similarity[position]), 4),
            )
        )
    return sorted(edges, key=lambda e: (e.source, e.target, e.input or ""))


def name_edges(
    graph_tools: list[ToolNode], parameters: list[ParameterNode], existing: list[ToolEdge]
) -> list[ToolEdge]:
    """A → B within one environment when A outputs an identifier with exactly the name of an input of B: the
    same name for an id in one system is the same thing, however far apart the two descriptions embed."""
    environment_of = {t.id: t.environment_id for t in graph_tools}
    producers: dict[tuple[str, str], list[str]] = {}
    for parameter in parameters:
        if parameter.direction == "output" and is_identifier_name(parameter.name):
            producers.setdefault((environment_of[parameter.tool], parameter.name), []).append(parameter.tool)
    present = {(e.source, e.target, e.input) for e in existing}
    added: list[ToolEdge] = []
    for parameter in parameters:
        if parameter.direction != "input":
            continue
        for source in producers.get((environment_of[parameter.tool], parameter.name), []):
            if source != parameter.tool and (source, parameter.tool, parameter.name) not in present:
                added.append(
                    ToolEdge(
                        source=source, target=parameter.tool, output=parameter.name, input=parameter.name, via="name"
                    )
                )
    return sorted(added, key=lambda e: (e.source, e.target, e.input or ""))


def classify_by_rule(graph: ToolGraph, environment_id: str) -> dict[str, InputSource]:
    """An input is produced by a tool when it names an identifier and some tool of its environment outputs it
    (by name or by an edge into it); every other input comes from the user."""
    output_names = {
        name for tool in graph.tools_of(environment_id) for name in tool.outputs if is_identifier_name(name)
    }
    classes: dict[str, InputSource] = {}
    for tool in graph.tools_of(environment_id):
        for parameter in graph.inputs(tool.id):
            produced = parameter.name in output_names or any(
                graph.tool(p).environment_id == environment_id for p in graph.producers(tool.id, parameter.name)
            )
            classes[parameter.id] = "tool" if is_identifier_name(parameter.name) and produced else "user"
    return classes


async def build_graph(
    environments: Sequence[Environment],
    *,
    embed: EmbedFunction | None = None,
    embedding_model: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    cross_environment: bool = False,
    sample_states: dict[str, dict[str, Any]] | None = None,
    model: GraphModel | None = None,
    match_names: bool = True,
) -> ToolGraph:
    """Build the graph of ``environments``. ``embed`` defaults to :func:`harness.llm.embeddings.embed` with
    ``embedding_model`` (None: the offline all-MiniLM-L6-v2). ``sample_states`` (environment id → a state)
    let output fields be read off real records. ``match_names`` adds the same-name identifier edges of
    :func:`name_edges` to the similarity edges."""
    model = model or GraphModel()
    if embed is None:
        from harness.llm.embeddings import embed as default_embed

        async def embed_texts(texts: list[str]) -> list[list[float]]:
            return await default_embed(texts, embedding_model)

        embed = embed_texts
    tools: list[ToolNode] = []
    parameters: list[ParameterNode] = []
    for environment in environments:
        sources = read_tools(environment, (sample_states or {}).get(environment.id))
        if model.list_outputs is not None:
            for name, source in sources.items():
                if source.outputs_from == "docstring":
                    continue
                listed = await model.list_outputs(environment, name)
                if listed:
                    source.outputs, source.outputs_from = listed, "model"
        env_tools, env_parameters = _nodes_for(environment, sources)
        tools.extend(env_tools)
        parameters.extend(env_parameters)
    texts = sorted({p.text for p in parameters})
    embedded = await embed(texts) if texts else []
    vectors = dict(zip(texts, embedded, strict=True))
    graph = ToolGraph(
        embedding_model=embedding_model or "all-MiniLM-L6-v2",
        threshold=threshold,
        cross_environment=cross_environment,
        tools=tools,
        parameters=parameters,
        edges=similarity_edges(tools, parameters, vectors, threshold, cross_environment),
    )
    by_id = {e.id: e for e in environments}
    pruned: list[ToolEdge] = []
    if model.prune_edges is not None:
        for environment in environments:
            into = [e for e in graph.edges if graph.tool(e.target).environment_id == environment.id]
            if not into:
                continue
            spurious = {_edge_key(e) for e in await model.prune_edges(environment, graph, into)}
            pruned += [e for e in into if _edge_key(e) in spurious]
        dropped = {_edge_key(e) for e in pruned}
        graph.replace_edges(e for e in graph.edges if _edge_key(e) not in dropped)
    if match_names:
        graph.add_edges(name_edges(tools, parameters, graph.edges))
    if model.propose_edges is not None:
        added: list[ToolEdge] = []
        for environment in environments:
            for edge in await model.propose_edges(environment, graph):
                if _valid_model_edge(graph, edge, environment.id):
                    added.append(edge.model_copy(update={"via": "model"}))
        graph.add_edges(added)
    classes: dict[str, InputSource] = {}
    for environment_id in graph.environment_ids:
        classes.update(classify_by_rule(graph, environment_id))
        if model.classify_inputs is not None:
            inputs = [p for t in graph.tools_of(environment_id) for p in graph.inputs(t.id)]
            answer = await model.classify_inputs(by_id[environment_id], inputs) if inputs else None
            for parameter_key, given_by in (answer or {}).items():
                if parameter_key in classes:
                    classes[parameter_key] = given_by
    for parameter in graph.parameters:
        if parameter.direction == "input":
            parameter.source = classes.get(parameter.id, "user")
    graph.details = {
        "environments": len(environments),
        "tools": len(tools),
        "parameters": len(parameters),
        "edges": len(graph.edges),
        "edges_by_rule": {via: sum(e.via == via for e in graph.edges) for via in ("embedding", "name", "model")},
        "cross_environment_edges": sum(
            graph.tool(e.source).environment_id != graph.tool(e.target).environment_id for e in graph.edges
        ),
        "pruned": [e.model_dump(mode="json") for e in pruned],
        "outputs_from": {
            origin: sum(t.outputs_from == origin for t in tools) for origin in ("docstring", "model", "source", "none")
        },
    }
    return graph


def _edge_key(edge: ToolEdge) -> tuple[str, str, str | None, str | None]:
    return (edge.source, edge.target, edge.output, edge.input)


def _valid_model_edge(graph: ToolGraph, edge: ToolEdge, environment_id: str) -> bool:
    if edge.source == edge.target or not graph.has_tool(edge.source) or not graph.has_tool(edge.target):
        return False
    if graph.tool(edge.source).environment_id != environment_id:
        return False
    if graph.tool(edge.target).environment_id != environment_id or graph.has_edge(edge.source, edge.target):
        return False
    return edge.input is None or edge.input in graph.tool(edge.target).inputs
