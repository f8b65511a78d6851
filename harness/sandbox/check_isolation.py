"""What keeps one check of a batch from changing how the next one is evaluated.

The checks of one scenario run one after the other in one check process. Python code can reach the whole process
from any allowed module (``typing.sys.modules`` leads everywhere), so two layers keep each check to itself:

* an audit hook, live only while check code runs, refuses the routes to the evaluator's own frames and code: frame
  lookups (``sys._getframe``, ``tb_frame``, ``gi_frame`` ...), tracers and profilers, the garbage collector's object
  lists, new code objects, new threads and forks, and rebinding a function's code or a shared class's special
  attributes;
* after each check, everything a check can rebind without those routes is put back as it was before the batch
  started: every module's namespace (``builtins``, the runtime's own helpers, ``sys.modules`` itself), the
  dictionaries, lists and sets those namespaces hold (caches and registries), the attributes of the classes and
  objects they hold, the decimal context, the recursion and integer-digit limits and the call timer's handler.

Both are built from locals captured before the first check runs: check code cannot reach them to undo them. Only
the standard library; imported by the zygote before confinement.
"""

from __future__ import annotations

import decimal
import itertools
import operator
import signal
import sys
import types
from collections.abc import Callable
from typing import Any

GROUP_SIZE = 64
"""Dictionaries (or lists) compared together in one pass."""
_HEAP_TYPE = 1 << 9
"""``Py_TPFLAGS_HEAPTYPE``: classes made by Python code, whose attributes can be rebound (built-in ones cannot)."""

REFUSED_EVENTS: frozenset[str] = frozenset(
    {
        "sys._getframe",
        "sys._current_frames",
        "sys._current_exceptions",
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "code.__new__",
        "_thread.start_new_thread",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.exec",
    }
)
"""Audit events refused while check code runs: each one reaches frames, code or objects of the evaluator, or
leaves something running after the check returns."""

READABLE_FUNCTION_ATTRIBUTES: frozenset[str] = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
"""Audited reads that stay allowed (``dataclasses`` and ``inspect.signature`` make them); every other audited read
(``tb_frame``, ``gi_frame``, ``cr_frame``, ``ag_frame``, ``__globals__``, ...) is refused."""


REPLY_PATH_MODULES: frozenset[str] = frozenset(
    {
        "builtins",
        "os",
        "posix",
        "orjson",
        "harness.sandbox.runtime",
        "harness.sandbox.check_runner",
        "harness.sandbox.check_isolation",
    }
)
"""The modules whose namespaces the reply of a batch goes through: put back after its last check, when no other
check is left to protect but the reply still has to carry every result unchanged."""


class CheckIsolationError(AttributeError):
    """Raised into check code that takes a refused route. An AttributeError, so the standard library's own
    fallbacks (``namedtuple`` and ``Enum`` guessing their module from the caller's frame) still work."""


IMPORT_EVENT = "harness.sandbox.import"
"""The audit event the sandbox's import raises: it tells the guard that a check reached beyond its own namespace."""


def install_check_guard() -> list[Any]:
    """Install the process's audit hook; the holder it shares with the evaluator: ``[label, imported]``, the label
    of the check running now (None while trusted code runs: then everything is allowed) and whether that check
    imported a module (the only way to the process's shared state). The holder must only live in the evaluator's
    locals."""
    running: list[Any] = [None, False]

    def audit(
        event: str,
        args: tuple[Any, ...],
        running: list[Any] = running,
        refused: frozenset[str] = REFUSED_EVENTS,
        readable: frozenset[str] = READABLE_FUNCTION_ATTRIBUTES,
        error: type[Exception] = CheckIsolationError,
        is_type: Callable[[Any], bool] = type.__instancecheck__.__get__(type),
        is_function: Callable[[Any], bool] = type.__instancecheck__.__get__(types.FunctionType),
        type_attribute: Callable[[Any, str], Any] = type.__getattribute__,
        code_of: Callable[[Any], Any] = types.FunctionType.__dict__["__code__"].__get__,
        length: Callable[[Any], int] = len,
        import_event: str = IMPORT_EVENT,
    ) -> None:
        label = running[0]
        if label is None:
            return
        if event == import_event:
            running[1] = True
        elif event in refused or event.startswith("ctypes."):  # the zygote loaded ctypes: memory at will
            raise error(f"{event} is not allowed in a check")
        elif event == "object.__getattr__":
            if length(args) < 2 or args[1] not in readable:
                raise error(f"reading {args[1] if length(args) > 1 else 'that attribute'!r} is not allowed in a check")
        elif event in ("object.__setattr__", "object.__delattr__") and args:
            target = args[0]
            if is_type(target):
                if type_attribute(target, "__module__") != label:
                    raise error("changing a class the check did not define is not allowed")
            elif is_function(target) and code_of(target).co_filename != f"<{label}>":
                raise error("changing a function the check did not define is not allowed")

    sys.addaudithook(audit)
    return running


def _has_own_namespace(value: Any) -> bool:
    kind = type(value)
    if kind in (type, types.ModuleType, types.FunctionType) or not kind.__flags__ & _HEAP_TYPE:
        return False
    try:
        namespace = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return False
    return type(namespace) is dict


def capture_shared_state(extra_modules: list[types.ModuleType]) -> Callable[[list[Any], bool], None]:
    """What a check process shares between its checks, as it is now; a function that puts it back (or, after the
    last check, only the namespaces the reply goes through). Whatever it
    replaces goes to the ``graveyard`` list it is given (kept alive until the process exits), so that no finalizer
    of a check's objects runs while it restores. It uses only what it captured here, never a global another check
    could rebind."""
    modules: list[types.ModuleType] = [m for m in sys.modules.values() if isinstance(m, types.ModuleType)]
    modules.extend(m for m in extra_modules if all(m is not n for n in modules))
    dicts: list[tuple[dict[Any, Any], dict[Any, Any]]] = [(vars(m), dict(vars(m))) for m in modules]
    lists: list[tuple[list[Any], list[Any]]] = []
    sets: list[tuple[set[Any], set[Any]]] = []
    classes: list[tuple[type, Any, frozenset[str], tuple[Any, ...], tuple[Any, ...]]] = []
    seen: set[int] = set()
    for _namespace, saved in list(dicts):
        for value in saved.values():
            if id(value) in seen:
                continue
            seen.add(id(value))
            if type(value) is dict:
                dicts.append((value, value.copy()))
            elif type(value) is list:
                lists.append((value, value.copy()))
            elif type(value) is set:
                sets.append((value, value.copy()))
            elif isinstance(value, type) and value.__flags__ & _HEAP_TYPE:
                view = type.__dict__["__dict__"].__get__(value)
                classes.append((value, view, frozenset(view), tuple(view), tuple(view.values())))
            elif _has_own_namespace(value):
                state = object.__getattribute__(value, "__dict__")
                dicts.append((state, dict(state)))
    reply_path = [(vars(m), dict(vars(m))) for m in modules if m.__name__ in REPLY_PATH_MODULES]
    # Groups compared in one pass each (C loops); only a group that changed is looked at entry by entry.
    dict_groups = [
        (
            [current for current, _saved in group],
            [len(saved) for _current, saved in group],
            tuple(key for _current, saved in group for key in saved),
            tuple(value for _current, saved in group for value in saved.values()),
            group,
        )
        for group in (dicts[start : start + GROUP_SIZE] for start in range(0, len(dicts), GROUP_SIZE))
    ]
    list_groups = [
        (
            [current for current, _saved in group],
            [len(saved) for _current, saved in group],
            tuple(item for _current, saved in group for item in saved),
            group,
        )
        for group in (lists[start : start + GROUP_SIZE] for start in range(0, len(lists), GROUP_SIZE))
    ]
    views = tuple(view for _cls, view, _names, _keys, _values in classes)
    all_keys = tuple(key for _cls, _view, _names, keys, _values in classes for key in keys)
    all_values = tuple(value for _cls, _view, _names, _keys, values in classes for value in values)
    context = decimal.getcontext().copy()
    recursion_limit = sys.getrecursionlimit()
    digits_limit = sys.get_int_max_str_digits()
    alarm_handler = signal.getsignal(signal.SIGPROF)

    def restore(
        graveyard: list[Any],
        reply_path_only: bool = False,
        dict_groups: list[Any] = dict_groups,
        as_list: Any = list,
        list_groups: list[Any] = list_groups,
        sets: list[tuple[set[Any], set[Any]]] = sets,
        classes: list[tuple[type, Any, frozenset[str], tuple[Any, ...], tuple[Any, ...]]] = classes,
        views: tuple[Any, ...] = views,
        all_keys: tuple[Any, ...] = all_keys,
        all_values: tuple[Any, ...] = all_values,
        flatten: Any = itertools.chain.from_iterable,
        values_of: Any = operator.methodcaller("values"),
        reply_path: list[tuple[dict[Any, Any], dict[Any, Any]]] = reply_path,
        same: Callable[[Any, Any], bool] = operator.is_,
        every: Callable[[Any], bool] = all,
        length: Callable[[Any], int] = len,
        sum_of: Any = sum,
        ordered: Any = sorted,
        identity: Callable[[Any], int] = id,
        mapping: Any = map,
        zipped: Any = zip,
        set_class_attribute: Callable[[Any, str, Any], None] = type.__setattr__,
        delete_class_attribute: Callable[[Any, str], None] = type.__delattr__,
        keep: Any = list.append,
        set_context: Callable[[Any], None] = decimal.setcontext,
        context: Any = context,
        set_recursion_limit: Callable[[int], None] = sys.setrecursionlimit,
        recursion_limit: int = recursion_limit,
        set_digits_limit: Callable[[int], None] = sys.set_int_max_str_digits,
        digits_limit: int = digits_limit,
        set_handler: Any = signal.signal,
        alarm: int = signal.SIGPROF,
        alarm_handler: Any = alarm_handler,
    ) -> None:
        if reply_path_only:
            for current, saved in reply_path:
                keep(graveyard, current.copy())
                current.clear()
                current.update(saved)
            return
        # Compared first and only rewritten when changed: rewriting would copy every page shared with the zygote.
        for currents, lengths, keys, values, pairs in dict_groups:
            if (
                as_list(mapping(length, currents)) == lengths
                and every(mapping(same, flatten(currents), keys))
                and every(mapping(same, flatten(mapping(values_of, currents)), values))
            ):
                continue
            for current, saved in pairs:
                if (
                    length(current) == length(saved)
                    and every(mapping(same, current, saved))
                    and every(mapping(same, current.values(), saved.values()))
                ):
                    continue
                keep(graveyard, current.copy())
                current.clear()
                current.update(saved)
        for currents, lengths, items, pairs in list_groups:
            if as_list(mapping(length, currents)) == lengths and every(mapping(same, flatten(currents), items)):
                continue
            for current, saved_items in pairs:
                if length(current) == length(saved_items) and every(mapping(same, current, saved_items)):
                    continue
                keep(graveyard, current.copy())
                current[:] = saved_items
        for members, saved_members in sets:
            if length(members) == length(saved_members) and ordered(mapping(identity, members)) == ordered(
                mapping(identity, saved_members)
            ):
                continue
            keep(graveyard, members.copy())
            members.clear()
            members.update(saved_members)
        # Classes cannot be emptied and refilled: compared all at once first, by identity.
        if not (
            length(all_keys) == sum_of(mapping(length, views))
            and every(mapping(same, flatten(views), all_keys))
            and every(mapping(same, flatten(mapping(values_of, views)), all_values))
        ):
            for cls, view, names, keys, values in classes:
                keep(graveyard, view.copy())
                for name in [n for n in view if n not in names]:
                    delete_class_attribute(cls, name)
                for name, value in zipped(keys, values):
                    if view.get(name) is not value:
                        set_class_attribute(cls, name, value)
        set_context(context.copy())
        set_recursion_limit(recursion_limit)
        set_digits_limit(digits_limit)
        set_handler(alarm, alarm_handler)

    return restore


def traceback_locator() -> Callable[[BaseException], str]:
    """A function that names where an exception left check code (" (line 3 of check)"), reading the traceback with
    the interpreter's own getters only, so that no code of the check runs while it reads frames."""

    def locate(
        exc: BaseException,
        traceback_of: Callable[[BaseException], Any] = BaseException.__dict__["__traceback__"].__get__,
        next_of: Callable[[Any], Any] = types.TracebackType.__dict__["tb_next"].__get__,
        line_of: Callable[[Any], Any] = types.TracebackType.__dict__["tb_lineno"].__get__,
        frame_of: Callable[[Any], Any] = types.TracebackType.__dict__["tb_frame"].__get__,
        code_of: Callable[[Any], Any] = types.FrameType.__dict__["f_code"].__get__,
        file_of: Callable[[Any], Any] = types.CodeType.__dict__["co_filename"].__get__,
        name_of: Callable[[Any], Any] = types.CodeType.__dict__["co_name"].__get__,
        exact_type: Any = type,
        text_type: type = str,
    ) -> str:
        where = ""
        tb = traceback_of(exc)
        while tb is not None:
            code = code_of(frame_of(tb))
            filename, name = file_of(code), name_of(code)
            if exact_type(filename) is text_type and filename.startswith("<") and exact_type(name) is text_type:
                where = f" (line {line_of(tb)} of {name})"
            tb = next_of(tb)
        return where

    return locate
