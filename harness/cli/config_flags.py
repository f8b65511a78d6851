"""Command-line flags generated from a pydantic config, so that a setting is declared once, in its config.

Each user-facing field becomes one option: its flag is ``--`` plus the field's name with dashes (or the name given
as ``json_schema_extra={"flag": "agent"}``), its help text the field's ``description``, its default the field's.
A field marked ``json_schema_extra={"user_facing": False}`` gets no flag. :class:`ConfigFlags` builds the signature
typer reads (``@flags.options``), turns what typer passes back into the config's keyword arguments
(``flags.values``) and builds the config, naming a refused value by its flag (``flags.build``).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Annotated, Any, Generic, Literal, TypeVar, Union, get_args, get_origin

import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

FLAG_KEY = "flag"
USER_FACING_KEY = "user_facing"

ConfigT = TypeVar("ConfigT", bound=BaseModel)


def field_metadata(field: FieldInfo) -> dict[str, Any]:
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def user_facing_fields(config: type[BaseModel]) -> dict[str, FieldInfo]:
    """The fields of ``config`` that the command line sets, in declaration order."""
    return {
        name: field
        for name, field in config.model_fields.items()
        if field_metadata(field).get(USER_FACING_KEY, True) is not False
    }


def flag_for(name: str, field: FieldInfo) -> str:
    """The long option of a field: its declared flag name, else its own name, with dashes."""
    declared = field_metadata(field).get(FLAG_KEY)
    return "--" + str(declared or name).replace("_", "-")


def command_line_type(annotation: Any) -> Any:
    """The type typer parses for a field: a choice (``Literal``) is read as text and checked by the config."""
    origin = get_origin(annotation)
    if origin is Literal:
        return str
    if origin is Union or origin is types.UnionType:
        members = [command_line_type(member) for member in get_args(annotation) if member is not type(None)]
        parsed = members[0] if len(members) == 1 else str
        return parsed | None if type(None) in get_args(annotation) else parsed
    if origin is list:
        return list[command_line_type(get_args(annotation)[0])]  # type: ignore[misc]  # a type built at runtime
    return annotation


def is_list_field(field: FieldInfo) -> bool:
    annotation = field.annotation
    return get_origin(annotation) is list or any(get_origin(member) is list for member in get_args(annotation))


class ConfigFlags(Generic[ConfigT]):
    """The options of a command that sets (some of) a config's fields.

    ``include`` limits the fields (default: every user-facing one); ``flags``, ``defaults`` and ``help`` replace
    a field's flag name, default or help text for this command only (``harness sft`` calls ``--model``
    ``--teacher``). Typer passes each option under its field's name."""

    def __init__(
        self,
        config: type[ConfigT],
        *,
        include: tuple[str, ...] | None = None,
        flags: dict[str, str] | None = None,
        defaults: dict[str, Any] | None = None,
        help: dict[str, str] | None = None,
    ) -> None:
        fields = user_facing_fields(config)
        unknown = set(include or ()) - set(fields)
        if unknown:
            raise TypeError(f"{config.__name__} has no user-facing field {', '.join(sorted(unknown))}")
        self.config = config
        self.fields = {name: fields[name] for name in include} if include is not None else fields
        self.renamed = flags or {}
        self.defaults = defaults or {}
        self.help = help or {}

    def flag(self, name: str) -> str:
        renamed = self.renamed.get(name)
        return "--" + renamed.replace("_", "-") if renamed else flag_for(name, self.fields[name])

    @property
    def flags(self) -> dict[str, str]:
        """Field name → long option, for each field this command sets."""
        return {name: self.flag(name) for name in self.fields}

    def parameter(self, name: str) -> inspect.Parameter:
        """One keyword parameter with a ``typer.Option`` built from the field."""
        field = self.fields[name]
        help_text = self.help.get(name) or field.description
        if not help_text:
            raise TypeError(f"config field {name!r} has no description to use as its help text")
        parsed = command_line_type(field.annotation)
        if is_list_field(field):
            parsed, default = parsed | None, None  # repeatable; given no times, it is the config's empty list
        elif name in self.defaults:
            default = self.defaults[name]
        else:
            default = field.get_default(call_default_factory=True)
        option = typer.Option(self.flag(name), help=help_text)
        return inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[parsed, option], default=default
        )

    def options(self, command: Callable[..., Any]) -> Callable[..., Any]:
        """Give ``command`` (which takes ``**values``) one option per field, after its own parameters."""
        own = [
            parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for parameter in inspect.signature(command, eval_str=True).parameters.values()
            if parameter.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        generated = [self.parameter(name) for name in self.fields]
        command.__signature__ = inspect.Signature([*own, *generated])  # type: ignore[attr-defined]  # read by typer
        return command

    def values(self, passed: dict[str, Any]) -> dict[str, Any]:
        """The config's keyword arguments among what typer passed (a repeatable option given no times is the
        field's empty list)."""
        return {
            name: [] if passed[name] is None and is_list_field(field) else passed[name]
            for name, field in self.fields.items()
        }

    def build(self, **values: Any) -> ConfigT:
        """The config from ``values``; a value it refuses is named by the flag that set it (exit status 2)."""
        from harness.cli.errors import validation_lines
        from harness.errors import BadInput

        try:
            return self.config(**values)
        except ValidationError as error:
            raise BadInput(*validation_lines(error, self.flags)) from None
