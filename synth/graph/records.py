"""The tool dependency graph as records: tools and their parameters as nodes, edges, and the graph that indexes
them (saved and loaded as JSON); the names of nodes, and a tool's output field."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

GRAPH_SCHEMA_VERSION = "1"
DEFAULT_THRESHOLD = 0.85

InputSource = Literal["user", "tool"]
OutputOrigin = Literal["docstring", "model", "source", "none"]

_ID_NAME = re.compile(r"(^|_)ids?$")


class ParameterNode(BaseModel):
    id: str
    tool: str = Field(description="Id of the tool node this parameter belongs to.")
    name: str
    direction: Literal["input", "output"]
    type: str = "string"
    description: str = ""
    required: bool = False
    source: InputSource | None = Field(default=None, description="Inputs only: who provides the value.")

    @property
    def text(self) -> str:
        return embedding_text(self.name, self.type, self.description)


class ToolNode(BaseModel):
    id: str = Field(description="environment_id.tool_name")
    environment_id: str
    name: str
    description: str = ""
    state_changing: bool = False
    inputs: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    outputs_from: OutputOrigin = "none"


class ToolEdge(BaseModel):
    source: str
    target: str
    output: str | None = Field(default=None, description="Output of the source; None for a model-added edge.")
    input: str | None = Field(default=None, description="Input of the target it feeds; None if not parameter-bound.")
    similarity: float | None = None
    via: Literal["embedding", "name", "model"] = "embedding"
    reason: str | None = None


class ToolGraph(BaseModel):
    schema_version: str = GRAPH_SCHEMA_VERSION
    embedding_model: str = ""
    threshold: float = DEFAULT_THRESHOLD
    cross_environment: bool = False
    tools: list[ToolNode] = Field(default_factory=list)
    parameters: list[ParameterNode] = Field(default_factory=list)
    edges: list[ToolEdge] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)

    def model_post_init(self, _context: Any) -> None:
        self._index()

    def _index(self) -> None:
        self._tools = {t.id: t for t in self.tools}
        self._parameters = {p.id: p for p in self.parameters}
        self._producers: dict[tuple[str, str], list[str]] = {}
        self._successors: dict[str, list[str]] = {}
        self._predecessors: dict[str, list[str]] = {}
        for edge in self.edges:
            if edge.input is not None:
                bucket = self._producers.setdefault((edge.target, edge.input), [])
                if edge.source not in bucket:
                    bucket.append(edge.source)
            successors = self._successors.setdefault(edge.source, [])
            if edge.target not in successors:
                successors.append(edge.target)
            predecessors = self._predecessors.setdefault(edge.target, [])
            if edge.source not in predecessors:
                predecessors.append(edge.source)

    def tool(self, tool_id: str) -> ToolNode:
        return self._tools[tool_id]

    def has_tool(self, tool_id: str) -> bool:
        return tool_id in self._tools

    def parameter(self, tool_id: str, direction: str, name: str) -> ParameterNode:
        return self._parameters[parameter_id(tool_id, direction, name)]

    def inputs(self, tool_id: str) -> list[ParameterNode]:
        tool = self._tools[tool_id]
        return [self._parameters[parameter_id(tool_id, "input", name)] for name in tool.inputs]

    def outputs(self, tool_id: str) -> list[ParameterNode]:
        tool = self._tools[tool_id]
        return [self._parameters[parameter_id(tool_id, "output", name)] for name in tool.outputs]

    def producers(self, tool_id: str, input_name: str) -> list[str]:
        """Tools with an output that feeds this input (sorted, so sampling is reproducible)."""
        return sorted(self._producers.get((tool_id, input_name), []))

    def successors(self, tool_id: str) -> list[str]:
        return sorted(self._successors.get(tool_id, []))

    def predecessors(self, tool_id: str) -> list[str]:
        return sorted(self._predecessors.get(tool_id, []))

    def has_edge(self, source: str, target: str) -> bool:
        return target in self._successors.get(source, [])

    def tools_of(self, environment_id: str) -> list[ToolNode]:
        return [t for t in self.tools if t.environment_id == environment_id]

    @property
    def environment_ids(self) -> list[str]:
        return sorted({t.environment_id for t in self.tools})

    def add_edges(self, edges: Iterable[ToolEdge]) -> None:
        self.edges.extend(edges)
        self._index()

    def replace_edges(self, edges: Iterable[ToolEdge]) -> None:
        self.edges = list(edges)
        self._index()

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_INDENT_2))

    @classmethod
    def load(cls, path: Path) -> ToolGraph:
        return cls.model_validate(orjson.loads(path.read_bytes()))


def parameter_id(tool_id: str, direction: str, name: str) -> str:
    return f"{tool_id}:{'in' if direction == 'input' else 'out'}:{name}"


def tool_id(environment_id: str, tool_name: str) -> str:
    return f"{environment_id}.{tool_name}"


def embedding_text(name: str, type_name: str, description: str) -> str:
    return f"{name} ({type_name}): {description}".strip()


def is_identifier_name(name: str) -> bool:
    return bool(_ID_NAME.search(name))


@dataclass(frozen=True)
class OutputField:
    name: str
    type: str = "string"
    description: str = ""
