"""Typed codecs between record values and Arrow/``datasets`` columns.

A codec knows one value's ``datasets`` feature, how to turn the Python value into what Arrow stores, and how
to turn a stored value back. Nested records become structs and lists of structs, so the dataset viewer, TRL
and SQL engines see real columns. Only free-form values (states, JSON-schema parameters, tool arguments and
results, open settings) are stored as JSON text, because their keys differ from row to row and a struct
would grow a null field for every key any row ever used.
"""

from __future__ import annotations

import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

# The `datasets` library, by name, so that type checkers never resolve the project's own `datasets/` folder.
hf_datasets: Any = importlib.import_module("datasets")


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):  # e.g. integers beyond 64 bits, which the json module still writes
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def loads(text: str) -> Any:
    return orjson.loads(text)


class Codec(ABC):
    """How one value is stored. ``label`` is the type as the card shows it."""

    label: str = ""

    @abstractmethod
    def feature(self) -> Any:
        """The ``datasets`` feature of the column."""

    @abstractmethod
    def encode(self, value: Any) -> Any:
        """The value as stored in Parquet."""

    @abstractmethod
    def decode(self, value: Any) -> Any:
        """The stored value back as the record holds it."""


@dataclass(frozen=True)
class Scalar(Codec):
    dtype: str
    convert: Callable[[Any], Any] | None = None

    @property
    def label(self) -> str:  # type: ignore[override]  # a property over the base's plain attribute
        return self.dtype

    def feature(self) -> Any:
        return hf_datasets.Value(self.dtype)

    def encode(self, value: Any) -> Any:
        if value is None or self.convert is None:
            return value
        return self.convert(value)

    def decode(self, value: Any) -> Any:
        return value


def _string(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


STRING = Scalar("string", _string)
INT = Scalar("int64", int)
FLOAT = Scalar("float64", float)
BOOL = Scalar("bool", bool)


@dataclass(frozen=True)
class Timestamp(Codec):
    label: str = "timestamp[us, tz=UTC]"

    def feature(self) -> Any:
        return hf_datasets.Value("timestamp[us, tz=UTC]")

    def encode(self, value: Any) -> Any:
        if isinstance(value, str):
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value

    def decode(self, value: Any) -> Any:
        return value


TIMESTAMP = Timestamp()


@dataclass(frozen=True)
class JsonText(Codec):
    """A free-form JSON value stored as JSON text; ``null`` stays a null cell."""

    label: str = "string (JSON)"

    def feature(self) -> Any:
        return hf_datasets.Value("string")

    def encode(self, value: Any) -> Any:
        return None if value is None else dumps(value)

    def decode(self, value: Any) -> Any:
        return None if value is None else loads(value)


JSON = JsonText()


@dataclass(frozen=True)
class ListOf(Codec):
    item: Codec

    @property
    def label(self) -> str:  # type: ignore[override]  # a property over the base's plain attribute
        return f"list<{self.item.label}>"

    def feature(self) -> Any:
        return [self.item.feature()]

    def encode(self, value: Any) -> Any:
        return None if value is None else [self.item.encode(v) for v in value]

    def decode(self, value: Any) -> Any:
        return None if value is None else [self.item.decode(v) for v in value]


@dataclass(frozen=True)
class Struct(Codec):
    """A fixed set of named fields (a pydantic model's fields). Every key is kept on decode."""

    fields: dict[str, Codec]

    @property
    def label(self) -> str:  # type: ignore[override]  # a property over the base's plain attribute
        return "struct"

    def feature(self) -> Any:
        return {name: codec.feature() for name, codec in self.fields.items()}

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        return {name: codec.encode(value.get(name)) for name, codec in self.fields.items()}

    def decode(self, value: Any) -> Any:
        if value is None:
            return None
        return {name: codec.decode(value.get(name)) for name, codec in self.fields.items()}


@dataclass(frozen=True)
class OpenStruct(Codec):
    """A dict with well-known keys (chat messages). Known keys are typed fields; a known key holding a value
    of another shape, and any other key, go to the ``extra`` field as JSON text. On decode, null fields are
    left out except those in ``always``, so a message reads back with the keys it had."""

    fields: dict[str, Codec]
    always: tuple[str, ...] = ()
    accepts: dict[str, Callable[[Any], bool]] = field(default_factory=dict)
    extra: str | None = "extra"

    @property
    def label(self) -> str:  # type: ignore[override]  # a property over the base's plain attribute
        return "struct"

    def feature(self) -> Any:
        features = {name: codec.feature() for name, codec in self.fields.items()}
        if self.extra:
            features[self.extra] = hf_datasets.Value("string")
        return features

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        row: dict[str, Any] = {}
        rest: dict[str, Any] = {}
        for name, codec in self.fields.items():
            item = value.get(name)
            accepts = self.accepts.get(name)
            if item is not None and accepts is not None and not accepts(item):
                rest[name] = item
                item = None
            row[name] = codec.encode(item)
        rest.update({k: v for k, v in value.items() if k not in self.fields})
        if self.extra:
            row[self.extra] = dumps(rest) if rest else None
        elif rest:
            raise ValueError(f"unexpected keys {sorted(rest)}; expected only {sorted(self.fields)}")
        return row

    def decode(self, value: Any) -> Any:
        if value is None:
            return None
        result: dict[str, Any] = {}
        for name, codec in self.fields.items():
            item = value.get(name)
            if item is not None or name in self.always:
                result[name] = codec.decode(item)
        if self.extra and value.get(self.extra):
            result.update(loads(value[self.extra]))
        return result


@dataclass(frozen=True)
class KeyedList(Codec):
    """A mapping with data-dependent keys stored as a list of ``{key_field: key, ...value fields}`` structs,
    so every row has the same schema however many keys it has."""

    key_field: str
    key: Codec
    value: Codec
    value_field: str | None = None
    """Name of the value's field when the value is not a struct (then each item is {key, value})."""

    @property
    def label(self) -> str:  # type: ignore[override]  # a property over the base's plain attribute
        return "list<struct>"

    def _item(self) -> Struct:
        if self.value_field is not None:
            return Struct({self.key_field: self.key, self.value_field: self.value})
        assert isinstance(self.value, Struct)
        return Struct({self.key_field: self.key, **self.value.fields})

    def feature(self) -> Any:
        return [self._item().feature()]

    def encode(self, value: Any) -> Any:
        if value is None:
            return None
        items = []
        for key, item in value.items():
            if self.value_field is not None:
                items.append({self.key_field: self.key.encode(key), self.value_field: self.value.encode(item)})
            else:
                items.append({self.key_field: self.key.encode(key), **self.value.encode(item)})
        return items

    def decode(self, value: Any) -> Any:
        if value is None:
            return None
        result: dict[Any, Any] = {}
        for item in value:
            key = item[self.key_field]
            if self.value_field is not None:
                result[key] = self.value.decode(item.get(self.value_field))
            else:
                result[key] = self.value.decode({k: v for k, v in item.items() if k != self.key_field})
        return result


def is_text(value: Any) -> bool:
    return isinstance(value, str)
