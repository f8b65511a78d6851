"""Records to rows of their config's fixed schema and back (the conversion :mod:`harness.hub.projection` declares)."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from harness.hub.codec import KeyedList, ListOf, OpenStruct, Struct, loads
from harness.hub.projection import JSON_SUFFIX, PROJECTIONS, Projection


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


# ------------------------------------------------------------------------------------------------ writing


class RowSchemaError(ValueError):
    """A row that does not fit its config's fixed schema."""


def records_to_rows(records: Iterable[Any], record_type: str) -> list[dict[str, Any]]:
    """Schema records (or, for row configs, plain dicts) as rows of the config's fixed schema."""
    projection = PROJECTIONS[record_type]
    with collection_paused():
        return [_to_row(record, projection, number) for number, record in enumerate(records, start=1)]


def _to_row(record: Any, projection: Projection, number: int) -> dict[str, Any]:
    if projection.model is not None:
        if not isinstance(record, projection.model):
            raise TypeError(f"expected {projection.model.__name__}, got {type(record).__name__}")
        data = record.model_dump(mode="python")
    else:
        if isinstance(record, BaseModel):
            record = record.model_dump(mode="python")
        data = record
        unknown = sorted(set(data) - {c.name for c in projection.columns})
        if unknown:
            raise RowSchemaError(
                f"row {number}: {', '.join(map(repr, unknown))} not in the fixed {projection.record_type} schema "
                f"(columns: {', '.join(c.name for c in projection.columns)})"
            )
    row: dict[str, Any] = {}
    for column in projection.columns:
        try:
            if column.compute is not None:
                row[column.name] = column.codec.encode(column.compute(record))
            else:
                row[column.name] = column.codec.encode(data.get(column.name))
        except (ValueError, TypeError) as error:
            raise RowSchemaError(f"row {number}, column {column.name!r}: {error}") from error
    return row


def records_to_table(records: Sequence[Any], record_type: str) -> pa.Table:
    projection = PROJECTIONS[record_type]
    return pa.Table.from_pylist(records_to_rows(records, record_type), schema=projection.schema)


# ------------------------------------------------------------------------------------------------ reading


def rows_to_records(rows: Iterable[dict[str, Any]], record_type: str) -> list[Any]:
    """Rows read back (by pyarrow or ``datasets``, layout 1 or 2) as records (or row dicts)."""
    projection = PROJECTIONS[record_type]
    with collection_paused():
        return [_from_row(row, projection) for row in rows]


def _from_row(row: dict[str, Any], projection: Projection) -> Any:
    data: dict[str, Any] = {}
    for column in projection.stored:
        if column.name in row:
            value = row[column.name]
            if value is None and column.absent_when_null:
                continue
            if isinstance(value, str) and isinstance(column.codec, Struct | ListOf | KeyedList | OpenStruct):
                value = loads(value)  # a nested value someone stored as JSON text
                data[column.name] = value
            else:
                data[column.name] = column.codec.decode(value)
        elif column.name + JSON_SUFFIX in row:  # layout 1
            value = row[column.name + JSON_SUFFIX]
            if value is None and column.absent_when_null:
                continue
            data[column.name] = loads(value) if value is not None else None
    if projection.model is None:
        if projection.drop_nulls:
            return {k: v for k, v in data.items() if v is not None}
        return data
    if "rules" in data and data["rules"] is None:
        data["rules"] = []
    for name in ("tags", "errors"):
        if name in data and data[name] is None:
            data[name] = []
    return projection.model.model_validate(data)


def table_rows_to_generic(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of an unknown config as dicts; layout-1 ``k_json`` columns are decoded back to ``k``."""
    with collection_paused():
        result = []
        for row in rows:
            record: dict[str, Any] = {}
            for name, value in row.items():
                if name.endswith(JSON_SUFFIX):
                    record[name[: -len(JSON_SUFFIX)]] = loads(value) if value is not None else None
                else:
                    record[name] = value
            result.append(record)
        return result
