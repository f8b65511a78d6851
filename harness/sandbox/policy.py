"""What model-written code may use. Standard library only: the worker imports this before anything else."""

from __future__ import annotations

import re
from collections.abc import Iterable

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def optional_modules_named_in(sources: Iterable[str], jail_modules: Iterable[str]) -> frozenset[str]:
    """The jail modules (third-party modules allowed when installed, with their listed submodules) whose top-level
    name appears anywhere in ``sources`` as a word: in an import, but also in a string a dynamic import could use,
    so that honest code never finds a module missing.

    The jail modules are the names the installed benchmarks declare (``harness.registry.jail_modules``), handed to
    the pool as data: a zygote imports ahead the ones its pool may need (all of them when its pool was not told)
    and the jail lets children read the package folders of those, nothing else of site-packages: a child cannot
    import one its zygote did not. Each one imported makes every fork and exit of a child cost more (the zygote's
    page tables grow: pydantic's add about 0.5 ms of CPU per session), so pools load only what they serve."""
    candidates = frozenset(jail_modules)
    roots = frozenset(name.split(".")[0] for name in candidates)
    named: set[str] = set()
    for source in sources:
        named.update(roots.intersection(_WORD.findall(source)))
        if named == roots:
            break
    return frozenset(name for name in candidates if name.split(".")[0] in named)


def importable_roots(jail_modules: Iterable[str]) -> frozenset[str]:
    """The top-level names code in the jail may import: those of :data:`ALLOWED_MODULES` and of the jail modules."""
    return ALLOWED_MODULES | frozenset(name.split(".")[0] for name in jail_modules)


ALLOWED_MODULES: frozenset[str] = frozenset(
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
        "orjson",
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
