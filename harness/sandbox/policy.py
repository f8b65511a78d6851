"""What model-written code may use. Standard library only: the worker imports this before anything else."""

from __future__ import annotations

OPTIONAL_MODULES: frozenset[str] = frozenset(
    {"mpmath", "pydantic", "pydantic.main", "pydantic.fields", "pydantic.json_schema", "annotated_types"}
)
"""Third-party modules allowed when they are installed (BFCL's MathAPI imports mpmath: the ``bfcl`` extra;
τ²-bench's domain models are pydantic models, and ``pydantic.main`` is named so that the zygote loads the model
machinery that ``import pydantic`` leaves to first use).
The zygote imports them ahead and the jail lets children read their package folders, nothing else of
site-packages."""

ALLOWED_MODULES: frozenset[str] = OPTIONAL_MODULES | frozenset(
    {
        "typing",
        "typing_extensions",
        "dataclasses",
        "datetime",
        "time",
        "uuid",
        "random",
        "re",
        "math",
        "decimal",
        "fractions",
        "json",
        "copy",
        "collections",
        "itertools",
        "functools",
        "enum",
        "string",
        "statistics",
        "operator",
        "bisect",
        "heapq",
        "textwrap",
        "hashlib",
        "calendar",
        "abc",
        "numbers",
        "__future__",
        # Imported by the standard library on first use (datetime.strptime imports it through __import__).
        "_strptime",
    }
)

FORBIDDEN_NAMES: frozenset[str] = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "open",
        "__import__",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "input",
        "help",
        "exit",
        "quit",
        "memoryview",
        "__builtins__",
        "__loader__",
        "__spec__",
        "__file__",
    }
)

# Dunder attributes that cannot lead out of the sandbox.
ALLOWED_DUNDER_ATTRIBUTES: frozenset[str] = frozenset({"__init__", "__name__", "__doc__"})

# Non-dunder attributes of frames, generators, coroutines, tracebacks and code objects: each is a way out.
FORBIDDEN_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "gi_frame",
        "gi_code",
        "cr_frame",
        "cr_code",
        "ag_frame",
        "ag_code",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "tb_frame",
        "tb_next",
        "co_code",
        "func_globals",
        "mro",
    }
)

# Builtins removed from the namespace model-written code runs in (defence in depth behind the AST check).
REMOVED_BUILTINS: frozenset[str] = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "open",
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "globals",
        "locals",
        "vars",
        "memoryview",
        "__import__",
        "__loader__",
        "__spec__",
    }
)


def is_forbidden_attribute(name: str) -> bool:
    if name in FORBIDDEN_ATTRIBUTES:
        return True
    return name.startswith("__") and name.endswith("__") and name not in ALLOWED_DUNDER_ATTRIBUTES
