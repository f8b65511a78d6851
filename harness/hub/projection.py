"""The Parquet projection of records: one row per record, typed scalar columns, JSON text for nested values.

Each record type has a fixed list of columns. Scalar fields become typed columns, lists of strings become
``list<string>`` columns, and nested free-form values (states, tool schemas, checks, messages, ...) become
string columns named ``<field>_json`` holding JSON text. ``rows_to_records(records_to_rows(x)) == x``.

Rows that are not schema records (SFT rows, leaderboard rows) use the generic projection: each key with scalar
values of one type keeps its name and type; any other key ``k`` is stored as JSON text in column ``k_json``.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson
import pyarrow as pa

from harness.schema import Environment, Record, RunManifest, Scenario, Trajectory

JSON_SUFFIX = "_json"
ColumnKind = Literal["scalar", "strings", "json", "timestamp"]


@dataclass(frozen=True)
class Column:
    name: str
    field: str
    kind: ColumnKind
    arrow_type: pa.DataType
    description: str


@dataclass(frozen=True)
class DerivedColumn:
    """A convenience column computed from the record (for filtering); ignored when rows become records."""

    name: str
    arrow_type: pa.DataType
    description: str
    compute: Callable[[Any], Any]


@dataclass(frozen=True)
class Projection:
    record_type: str
    model: type[Record]
    columns: tuple[Column, ...]
    derived: tuple[DerivedColumn, ...] = ()

    @property
    def schema(self) -> pa.Schema:
        fields = [pa.field(c.name, c.arrow_type) for c in self.columns]
        fields += [pa.field(d.name, d.arrow_type) for d in self.derived]
        return pa.schema(fields)

    def describe(self) -> list[tuple[str, str, str]]:
        """(column, type as shown by ``datasets``, meaning) for the card."""
        rows = [(c.name, _type_label(c.arrow_type, c.kind), c.description) for c in self.columns]
        rows += [(d.name, _type_label(d.arrow_type, "scalar"), d.description) for d in self.derived]
        return rows


def _type_label(arrow_type: pa.DataType, kind: str) -> str:
    if kind == "json":
        return "string (JSON)"
    if pa.types.is_list(arrow_type):
        return "list<string>"
    if pa.types.is_timestamp(arrow_type):
        return "timestamp (UTC)"
    return str(arrow_type)


def _scalar(name: str, arrow_type: pa.DataType, description: str) -> Column:
    return Column(name, name, "scalar", arrow_type, description)


def _json(field: str, description: str) -> Column:
    return Column(field + JSON_SUFFIX, field, "json", pa.string(), description)


def _strings(name: str, description: str) -> Column:
    return Column(name, name, "strings", pa.list_(pa.string()), description)


STRING = pa.string()

ENVIRONMENT = Projection(
    "environment",
    Environment,
    (
        _scalar("schema_version", STRING, "Version of the record schema."),
        _scalar("id", STRING, "Environment id (scenarios refer to it)."),
        _scalar("name", STRING, "Human-readable name."),
        _scalar("domain", STRING, "Application domain."),
        _scalar("summary", STRING, "One-paragraph summary."),
        _scalar("introduction", STRING, "Agent-facing description of the system and its policy."),
        _strings("rules", "Policy rules the agent must follow."),
        _json("state_entities", "State entities: list of {name, attributes, description}."),
        _json(
            "tools", "OpenAI function-calling tool schemas: list of {type, function: {name, description, parameters}}."
        ),
        _scalar("class_name", STRING, "Name of the environment class defined in `code`."),
        _scalar("code", STRING, "Python source of the environment class, as plain text."),
        _json(
            "provenance",
            "Where the record came from: {source, model, prompt_version, created_at, upstream_id, details}.",
        ),
    ),
)

SCENARIO = Projection(
    "scenario",
    Scenario,
    (
        _scalar("schema_version", STRING, "Version of the record schema."),
        _scalar("id", STRING, "Scenario id."),
        _scalar("environment_id", STRING, "Id of the environment (row of the `environments` config)."),
        _json("initial_state", "Initial state of the environment: object keyed like the environment's state."),
        _scalar("task", STRING, "The whole request, as given to the agent in non-conversational mode."),
        _json(
            "user_profile",
            "Simulated user for conversational mode: {persona, goal, known_info, "
            "withheld_info, instructions}, or null.",
        ),
        _json(
            "checks",
            "Checklist scored on the final state: list of {id, description, source}; `source` "
            "defines `check(initial_state, final_state)` or `check_func(final_state)`.",
        ),
        _json("reference_actions", "Reference solution: list of {name, arguments, masked_arguments}."),
        _json("gold_final_state", "Expected final state, or null."),
        _scalar("difficulty", STRING, "Difficulty label, or null."),
        _strings("tags", "Free-form tags."),
        _json(
            "provenance",
            "Where the record came from: {source, model, prompt_version, created_at, upstream_id, details}.",
        ),
    ),
)


def _reward_value(name: str) -> Callable[[Trajectory], Any]:
    return lambda t: getattr(t.reward, name) if t.reward is not None else None


TRAJECTORY = Projection(
    "trajectory",
    Trajectory,
    (
        _scalar("schema_version", STRING, "Version of the record schema."),
        _scalar("episode_id", STRING, "Episode id (unique within the run)."),
        _scalar("run_id", STRING, "Run id, or null."),
        _scalar("scenario_id", STRING, "Scenario the agent worked."),
        _scalar("environment_id", STRING, "Environment of the scenario."),
        _scalar("mode", STRING, "`nonconv` (whole task up front) or `conv` (simulated user)."),
        _scalar("trial", pa.int64(), "Trial index for repeated episodes of one scenario."),
        _json("agent", "Agent settings: {kind, role, model: {model, temperature, ...}, system_prompt_version}."),
        _json("user", "Simulated-user settings (same shape as `agent_json`), or null."),
        _json("tools", "Tool schemas offered to the agent (OpenAI format)."),
        _json("messages", "The conversation in OpenAI chat format (system, user, assistant with tool_calls, tool)."),
        _json("steps", "Executed tool calls: list of {index, turn, call, observation, state_diff, duration_ms}."),
        _json("final_state_diff", "Difference between initial and final state: list of {path, op, before, after}."),
        _json("check_results", "Per-check outcome: list of {check_id, passed, value, error, passed_at_reset}."),
        _json(
            "reward",
            "Reward breakdown: {state_reward, delta_reward, success, checks_passed, checks_total, ...}, or null.",
        ),
        _scalar(
            "termination",
            STRING,
            "Why the episode ended (agent_done, user_stop, max_steps, context_overflow, agent_error, infra_error).",
        ),
        _scalar("termination_detail", STRING, "Detail of the termination, or null."),
        _json(
            "usage",
            "Token usage and cost per role: {role: {requests, prompt_tokens, completion_tokens, cost_usd, ...}}.",
        ),
        _json(
            "timings", "Timings: {started_at, ended_at, wall_seconds, model_seconds, tool_seconds, scoring_seconds}."
        ),
        _strings("errors", "Errors recorded during the episode."),
    ),
    (
        DerivedColumn("agent_model", STRING, "Derived: the agent's model string.", lambda t: t.agent.model.model),
        DerivedColumn("success", pa.bool_(), "Derived: `reward.success`.", _reward_value("success")),
        DerivedColumn("state_reward", pa.float64(), "Derived: `reward.state_reward`.", _reward_value("state_reward")),
        DerivedColumn("num_tool_calls", pa.int64(), "Derived: number of executed tool calls.", lambda t: len(t.steps)),
    ),
)

RUN_MANIFEST = Projection(
    "run_manifest",
    RunManifest,
    (
        _scalar("schema_version", STRING, "Version of the record schema."),
        _scalar("run_id", STRING, "Run id."),
        Column("created_at", "created_at", "timestamp", pa.timestamp("us", tz="UTC"), "When the run started."),
        _scalar("package_version", STRING, "Version of the harness that ran it."),
        _scalar("git_revision", STRING, "Git revision of the harness, or null."),
        _json("dataset", "Environments and scenarios used: {source, revision, fingerprint}."),
        _json("config", "Run configuration (models, modes, trials, limits)."),
        _json("model_resolution", "How each model alias was resolved (provider model, api base)."),
        _scalar("episodes_planned", pa.int64(), "Number of episodes the run planned."),
        _json("cluster", "Ray cluster the episodes ran on: {address, ray_version, nodes}, or null."),
    ),
)

PROJECTIONS: dict[str, Projection] = {p.record_type: p for p in (ENVIRONMENT, SCENARIO, TRAJECTORY, RUN_MANIFEST)}
GENERIC_ROW = "row"
"""Record type of rows that are plain JSON objects (SFT rows, leaderboard rows)."""


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # e.g. integers beyond 64 bits, which the json module still writes
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _loads(text: str) -> Any:
    return orjson.loads(text)


@contextmanager
def collection_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while converting many records.

    Building tens of thousands of acyclic objects triggers collection after collection over everything
    already alive; pausing it makes loading a large dataset several times faster.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ------------------------------------------------------------------------------------------- schema records


def records_to_rows(records: Iterable[Record], record_type: str) -> list[dict[str, Any]]:
    with collection_paused():
        return _records_to_rows(records, PROJECTIONS[record_type])


def _records_to_rows(records: Iterable[Record], projection: Projection) -> list[dict[str, Any]]:
    rows = []
    for record in records:
        if not isinstance(record, projection.model):
            raise TypeError(f"expected {projection.model.__name__}, got {type(record).__name__}")
        data = record.model_dump(mode="json")
        row: dict[str, Any] = {}
        for column in projection.columns:
            value = data[column.field]
            if column.kind == "json":
                row[column.name] = _dumps(value)
            elif column.kind == "timestamp":
                row[column.name] = getattr(record, column.field)
            else:
                row[column.name] = value
        for derived in projection.derived:
            row[derived.name] = derived.compute(record)
        rows.append(row)
    return rows


def rows_to_records(rows: Iterable[dict[str, Any]], record_type: str) -> list[Any]:
    with collection_paused():
        return _rows_to_records(rows, PROJECTIONS[record_type])


def _rows_to_records(rows: Iterable[dict[str, Any]], projection: Projection) -> list[Any]:
    records = []
    for row in rows:
        data: dict[str, Any] = {}
        for column in projection.columns:
            if column.name not in row:
                continue
            value = row[column.name]
            if column.kind == "json":
                data[column.field] = _loads(value) if value is not None else None
            elif column.kind == "strings":
                data[column.field] = list(value) if value is not None else []
            else:
                data[column.field] = value
        records.append(projection.model.model_validate(data))
    return records


def records_to_table(records: Sequence[Record], record_type: str) -> pa.Table:
    projection = PROJECTIONS[record_type]
    return pa.Table.from_pylist(records_to_rows(records, record_type), schema=projection.schema)


# --------------------------------------------------------------------------------------------- generic rows


def _scalar_type(values: list[Any]) -> pa.DataType | None:
    """The arrow type of a key whose non-null values are all scalars of one kind, else None."""
    present = [v for v in values if v is not None]
    if not present:
        return STRING
    if all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        if all(-(2**63) <= v < 2**63 for v in present):
            return pa.int64()
        return None
    if all(isinstance(v, float) for v in present):
        return pa.float64()
    if all(isinstance(v, str) for v in present):
        return STRING
    if all(isinstance(v, datetime) for v in present):
        return None
    return None


@dataclass(frozen=True)
class GenericLayout:
    """How the keys of plain JSON rows map to columns."""

    keys: tuple[str, ...]
    scalar_types: dict[str, pa.DataType]

    def column_name(self, key: str) -> str:
        return key if key in self.scalar_types else key + JSON_SUFFIX

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(self.column_name(k), self.scalar_types.get(k, STRING)) for k in self.keys])

    def describe(self) -> list[tuple[str, str, str]]:
        return [
            (
                self.column_name(k),
                str(self.scalar_types[k]) if k in self.scalar_types else "string (JSON)",
                GENERIC_MEANINGS.get(k, f"The rows' `{k}` value.")
                + ("" if k in self.scalar_types else " Stored as JSON text."),
            )
            for k in self.keys
        ]


GENERIC_MEANINGS = {
    "messages": "OpenAI-format chat messages (system, user, assistant with tool_calls, tool).",
    "tools": "Tool schemas offered in the conversation (OpenAI function-calling format).",
    "conversations": "ShareGPT turns: list of {from, value} (human, gpt, function_call, observation).",
    "system": "System prompt.",
    "scenario_id": "Scenario the row came from.",
    "environment_id": "Environment the row came from.",
    "episode_id": "Episode the row came from.",
    "model": "Model.",
    "reward": "Reward of the source episode.",
}
"""Meanings of keys that SFT and leaderboard rows commonly have, for the card."""


def generic_layout(rows: Sequence[dict[str, Any]]) -> GenericLayout:
    keys: dict[str, None] = {}
    for row in rows:
        for key in row:
            keys.setdefault(key, None)
    scalar_types: dict[str, pa.DataType] = {}
    for key in keys:
        # A key ending in `_json` is always JSON-encoded, so decoding column names is unambiguous.
        if key.endswith(JSON_SUFFIX):
            continue
        arrow_type = _scalar_type([row.get(key) for row in rows])
        if arrow_type is not None:
            scalar_types[key] = arrow_type
    return GenericLayout(tuple(keys), scalar_types)


def generic_rows_to_table(rows: Sequence[dict[str, Any]]) -> tuple[pa.Table, GenericLayout]:
    """Missing keys are stored as null and read back as null."""
    layout = generic_layout(rows)
    columns: dict[str, list[Any]] = {layout.column_name(k): [] for k in layout.keys}
    for row in rows:
        for key in layout.keys:
            value = row.get(key)
            if key in layout.scalar_types:
                columns[layout.column_name(key)].append(value)
            else:
                columns[layout.column_name(key)].append(None if value is None else _dumps(value))
    table = pa.Table.from_pydict(columns, schema=layout.schema)
    return table, layout


def table_rows_to_generic(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inverse of ``generic_rows_to_table`` for rows read back (by pyarrow or ``datasets``)."""
    with collection_paused():
        return _table_rows_to_generic(rows)


def _table_rows_to_generic(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    result = []
    for row in rows:
        record: dict[str, Any] = {}
        for name, value in row.items():
            if name.endswith(JSON_SUFFIX):
                record[name[: -len(JSON_SUFFIX)]] = _loads(value) if value is not None else None
            else:
                record[name] = value
        result.append(record)
    return result
