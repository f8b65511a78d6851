"""The tool dependency graph (EnvFactory): tools and their parameters as nodes, an edge from tool A to tool B when
an output of A can feed an input of B.

Every input and output parameter is embedded as ``"name (type): description"``; A → B is added when the cosine
similarity of an output of A and an input of B is above a threshold. A tool's outputs come, in order of
preference, from a ``Returns:`` section of its docstring, from a model asked once per tool to list them, or from
reading the method's source: what its ``"data"`` holds (records of a state collection, the keys of a dict
literal, an id it creates). Edges stay within one environment unless cross-environment edges are asked for
(an airline's ``customer_id`` does not feed a food-delivery order). An optional model pass prunes spurious
embedding edges, another may add edges within one environment (tools without parameters get their logical
predecessors this way). Each input is classed as given by the user or produced by a tool, by a model or by the
rule that an identifier some tool outputs is internal.
"""

from synth.graph.drawing import COLUMN_NAMES, EDGE_STYLES, PANEL_SIZE, draw_graph
from synth.graph.edges import (
    EdgeProposer,
    EdgePruner,
    EmbedFunction,
    GraphModel,
    OutputLister,
    SourceClassifier,
    build_graph,
    classify_by_rule,
    name_edges,
    similarity_edges,
)
from synth.graph.passes import model_graph_passes
from synth.graph.records import (
    DEFAULT_THRESHOLD,
    GRAPH_SCHEMA_VERSION,
    InputSource,
    OutputField,
    OutputOrigin,
    ParameterNode,
    ToolEdge,
    ToolGraph,
    ToolNode,
    embedding_text,
    is_identifier_name,
    parameter_id,
    tool_id,
)
from synth.graph.source import (
    CollectionInfo,
    ToolSource,
    collection_infos,
    configured_state_keys,
    docstring_outputs,
    read_tools,
    state_changing_tools,
    state_keys,
)

__all__ = [
    "COLUMN_NAMES",
    "DEFAULT_THRESHOLD",
    "EDGE_STYLES",
    "GRAPH_SCHEMA_VERSION",
    "PANEL_SIZE",
    "CollectionInfo",
    "EdgeProposer",
    "EdgePruner",
    "EmbedFunction",
    "GraphModel",
    "InputSource",
    "OutputField",
    "OutputLister",
    "OutputOrigin",
    "ParameterNode",
    "SourceClassifier",
    "ToolEdge",
    "ToolGraph",
    "ToolNode",
    "ToolSource",
    "build_graph",
    "classify_by_rule",
    "collection_infos",
    "configured_state_keys",
    "docstring_outputs",
    "draw_graph",
    "embedding_text",
    "is_identifier_name",
    "model_graph_passes",
    "name_edges",
    "parameter_id",
    "read_tools",
    "similarity_edges",
    "state_changing_tools",
    "state_keys",
    "tool_id",
]
