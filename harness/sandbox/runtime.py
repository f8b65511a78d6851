"""What runs inside a confined child: model-written environment code and check functions.

A child is forked by the zygote (``harness.sandbox.zygote``) and confined before it reads anything. An environment
child serves exactly one session: it builds the class from the initial state, runs that session's calls and exits
when the session closes. A check child runs one batch of checks on states that arrived as JSON and exits; it never
ran environment code. Frames are a 4-byte little-endian length and an orjson body, one request at a time.

The restricted builtins and the deterministic shims below are for honest code (clear errors, reproducible
states); the kernel confinement is the security boundary. Standard library and orjson only.
"""

from __future__ import annotations

import base64
import builtins
import gc
import marshal
import os
import signal
import sys
import traceback
from collections.abc import Iterable, Mapping
from types import CodeType
from typing import Any, Protocol

import orjson

from harness.sandbox.check_inputs import ReceivedInputs, read_check_request
from harness.sandbox.check_isolation import IMPORT_EVENT
from harness.sandbox.confirmation import CPU_EXHAUSTED_STATUS
from harness.sandbox.environment_code import compile_environment
from harness.sandbox.policy import ALLOWED_MODULES, REMOVED_BUILTINS, importable_roots, is_forbidden_attribute
from harness.sandbox.shims import CONTEXT, SHIM_MODULES, Clock, FrozenDate, FrozenDateTime
from harness.states.diff import diff_values


class CallTimeout(BaseException):
    """Raised by the alarm when a call overruns. BaseException so `except Exception` cannot swallow it."""


class BadResult(Exception):
    pass


# ------------------------------------------------------------------------------------------- restrictions


_IMPORTABLE: set[str] = set(ALLOWED_MODULES)
"""The top-level names this process's code may import: the standard ones and the jail modules its zygote was given
(:func:`prepare_interpreter`)."""


def _guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    top = name.split(".")[0]
    if level or top not in _IMPORTABLE:
        raise ImportError(f"import of {name!r} is not allowed in the sandbox")
    sys.audit(IMPORT_EVENT, name)  # tells the check guard that shared modules are now within the caller's reach
    if name in SHIM_MODULES:
        return SHIM_MODULES[name]
    return builtins.__import__(name, globals, locals, fromlist, level)


def _guarded_getattr(obj: Any, name: str, *default: Any) -> Any:
    if is_forbidden_attribute(name):
        raise AttributeError(f"access to attribute {name!r} is not allowed in the sandbox")
    return getattr(obj, name, *default)


def _guarded_setattr(obj: Any, name: str, value: Any) -> None:
    if is_forbidden_attribute(name):
        raise AttributeError(f"setting attribute {name!r} is not allowed in the sandbox")
    setattr(obj, name, value)


def _guarded_delattr(obj: Any, name: str) -> None:
    if is_forbidden_attribute(name):
        raise AttributeError(f"deleting attribute {name!r} is not allowed in the sandbox")
    delattr(obj, name)


def _guarded_hasattr(obj: Any, name: str) -> bool:
    if is_forbidden_attribute(name):
        return False
    return hasattr(obj, name)


def _discard_print(*_args: Any, **_kwargs: Any) -> None:
    return None


def restricted_builtins() -> dict[str, Any]:
    """A fresh namespace of the builtins sandboxed code may use: a copy of the one made at the first call (in the
    zygote, before any untrusted code runs), so what one module does to its namespace no other module sees."""
    if not _BUILTINS_TEMPLATE:
        _BUILTINS_TEMPLATE.update((k, v) for k, v in vars(builtins).items() if k not in REMOVED_BUILTINS)
        _BUILTINS_TEMPLATE.update(
            __import__=_guarded_import,
            getattr=_guarded_getattr,
            setattr=_guarded_setattr,
            delattr=_guarded_delattr,
            hasattr=_guarded_hasattr,
            print=_discard_print,
        )
    return _BUILTINS_TEMPLATE.copy()


_BUILTINS_TEMPLATE: dict[str, Any] = {}
"""What ``restricted_builtins`` copies; no sandboxed code ever holds it."""


_SHARED_BUILTINS: dict[str, Any] = {}
"""The restricted builtins of the process's one environment module, built before the zygote forks: copying them
in a child would write to every builtin object's reference count and so give each session private copies of
those pages."""


CPU_GRACE_S = 1.0
"""CPU seconds code that caught the timeout may go on computing before its process ends."""
_overruns = [0]


def _on_alarm(_signum: int, _frame: Any) -> None:
    _overruns[0] += 1
    if _overruns[0] > 1:  # the code caught the first one and kept computing
        os._exit(CPU_EXHAUSTED_STATUS)
    raise CallTimeout()


# ------------------------------------------------------------------------------------------------ state


_PUBLIC_ATTRIBUTES: dict[type, frozenset[Any]] = {}
"""Per class, the attribute names of the last of its objects that was written as its own attributes, none of
them private. orjson asks for each object of a class that it does not write itself (thousands of times for a
database of pydantic models); an object of that class with those very names is written as its attributes without
looking at them again (a retail database: 7.6 ms → 4.2 ms). The one difference from the general rule: an object
whose ``__class__`` claims a set or date class its type is not may then be written by its attributes (only the
environment's own code makes such objects, and its session alone sees them)."""


def _json_default(value: Any) -> Any:
    attributes = getattr(value, "__dict__", None)
    if type(attributes) is dict:
        if attributes.keys() == _PUBLIC_ATTRIBUTES.get(type(value)):
            return attributes
        if not isinstance(value, _NOT_BY_ATTRIBUTES):
            # An object's own attributes: the dict itself when none of them is private.
            for key in attributes:
                if key.startswith("_"):
                    return {k: v for k, v in attributes.items() if not k.startswith("_")}
            _PUBLIC_ATTRIBUTES[type(value)] = frozenset(attributes)
            return attributes
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, FrozenDate | FrozenDateTime):
        # The sandbox's own date classes (orjson writes only the real ones): as orjson writes those.
        return value.isoformat()
    if hasattr(value, "__dict__"):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


_NOT_BY_ATTRIBUTES = (set, frozenset, FrozenDate, FrozenDateTime)
"""Types written otherwise than by their attributes, even when a subclass gives them some."""


def exceeds(value: Any, budget: int) -> bool:
    """Whether a value's JSON would clearly exceed ``budget`` bytes (checked before serializing it: under a
    memory cap, orjson crashes instead of raising when a huge buffer cannot be allocated)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str | bytes):
            budget -= len(item)
        elif isinstance(item, dict):
            budget -= 2 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            budget -= len(item)
            stack.extend(item)
        else:
            budget -= 8
        if budget < 0:
            return True
    return False


def _strict_default(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"values of type {type(value).__name__} are not JSON")


_DUMP = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_json_default, option=_DUMP)


def snapshot(instance: Any) -> dict[str, bytes]:
    """The instance's non-dunder attributes, each serialized on its own (the unit of change detection)."""
    return {name: dumps(value) for name, value in vars(instance).items() if not name.startswith("__")}


def state_reply(parts: dict[str, bytes]) -> list[bytes]:
    """The reply to a state request as the pieces of its JSON: the parts are written from where they are, not
    copied into one text (for a 1.3 MB state, each copy is 330 fresh pages for the session process to fault in)."""
    pieces = [b'{"ok":true,"state":{']
    separator = b""
    for name, data in parts.items():
        pieces += (separator + orjson.dumps(name) + b":", data)
        separator = b","
    pieces.append(b"}}")
    return pieces


def diff_snapshots(before: dict[str, bytes], after: dict[str, bytes]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for name in before.keys() | after.keys():
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None:
            entries.append({"path": [name], "op": "add", "before": None, "after": orjson.loads(new or b"null")})
        elif new is None:
            entries.append({"path": [name], "op": "remove", "before": orjson.loads(old), "after": None})
        else:
            entries.extend(diff_values(orjson.loads(old), orjson.loads(new), [name]))
    entries.sort(key=lambda e: [str(p) for p in e["path"]])
    return entries


# ------------------------------------------------------------------------------------------------ worker


class Settings:
    """Limits a child enforces on itself (the harness enforces its own on top: the wall-clock backstop, frame sizes)."""

    def __init__(self, call_timeout: float, max_result_bytes: int, max_state_bytes: int):
        self.call_timeout = call_timeout
        self.max_result_bytes = max_result_bytes
        self.max_state_bytes = max_state_bytes


def guarded(clock: Clock, timeout: float, fn: Any, *args: Any) -> Any:
    """Run untrusted code under the session's clock and the call timer."""
    CONTEXT.current = clock
    # The process's CPU time (user and system), not the wall clock: a loaded machine does not make code time out.
    _overruns[0] = 0
    signal.setitimer(signal.ITIMER_PROF, timeout, CPU_GRACE_S)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def load_module(code: str | CodeType, label: str, *, sole_module: bool = False) -> dict[str, Any]:
    """Execute code (source, or an already compiled code object) as a fresh module with the restricted builtins;
    its namespace. The sole untrusted module of a process uses the builtins prepared before the fork."""
    module = type(sys)(label)
    namespace = _SHARED_BUILTINS if sole_module and _SHARED_BUILTINS else restricted_builtins()
    module.__dict__.update({"__builtins__": namespace, "__name__": label})
    sys.modules[label] = module  # dataclasses and typing look the module up by name
    compiled = code if isinstance(code, CodeType) else compile(code, f"<{label}>", "exec")
    exec(compiled, module.__dict__)
    return module.__dict__


class EnvironmentSession:
    """The one environment instance this child serves."""

    def __init__(self, settings: Settings, compiled_code: Mapping[str, CodeType] | None = None):
        self.settings = settings
        self.compiled_code = compiled_code or {}
        """Environment code the harness compiled, by source key, that the zygote holds and this process inherited
        (``zygote.Zygote.load_code``): a session opened with its key runs it without unmarshalling anything."""
        self.instance: Any = None
        self.clock = Clock(0)
        self.record_diffs = True
        self.last: dict[str, bytes] = {}
        self.code_ran = False
        """Whether the environment's code has run in this process: from then on, whatever fails here is its doing
        (it can reach and rewrite every module of the process)."""

    def op_open(self, request: dict[str, Any]) -> dict[str, Any]:
        self.clock = Clock(int(request.get("seed", 0)), float(request.get("epoch") or 0) or Clock(0).epoch)
        self.record_diffs = bool(request.get("diffs", True))
        init_config = request["state"]
        class_name = request["class_name"]
        timeout = self.settings.call_timeout
        compiled: list[str] = []
        code_key = request.get("code_key")
        preloaded = self.compiled_code.get(code_key) if isinstance(code_key, str) else None
        if code_key is not None and preloaded is None:
            return {"ok": False, "kind": "sandbox_error", "error": "the environment's compiled code is not here"}

        def instantiate() -> Any:
            # Compiling a 20 KB class costs more than the rest of a fork. So the code comes compiled: by the harness,
            # inherited from the zygote (compiled_code), or else as the bytecode the environment's first process
            # compiled (the harness keeps it for the next ones and never loads it itself).
            if preloaded is not None:
                code: str | CodeType = preloaded
            elif request.get("bytecode"):
                code = marshal.loads(base64.b64decode(request["bytecode"]))
            else:
                code = compile_environment(request["code"])
                compiled.append(base64.b64encode(marshal.dumps(code)).decode())
            namespace = load_module(code, "environment", sole_module=True)
            cls = namespace.get(class_name)
            if not isinstance(cls, type):
                raise LookupError(f"the code does not define a class named {class_name!r}")
            # The release's own runtime: one deep copy, given to the constructor (falling back to no arguments), whose
            # keys are then set as attributes: the instance's containers are the very objects of that copy. The
            # state just decoded from the request is such a copy already: nothing else in this process holds it.
            config = init_config
            try:
                instance = cls(config)
            except TypeError:
                instance = cls()
            for key, value in config.items():
                setattr(instance, key, value)
            return instance

        self.code_ran = True
        try:
            self.instance = guarded(self.clock, timeout, instantiate)
            self.last = snapshot(self.instance)
        except CallTimeout:
            return {
                "ok": False,
                "kind": "timeout",
                "error": f"loading the environment used up its CPU-time limit of {timeout:g} s",
            }
        except MemoryError:
            return {"ok": False, "kind": "resource_limit", "error": "loading the environment ran out of memory"}
        except RecursionError:
            return {"ok": False, "kind": "load_error", "error": "the code nests too deeply to compile or run"}
        except BaseException as exc:
            return {"ok": False, "kind": "load_error", "error": _describe(exc)}
        return {"ok": True, "bytecode": compiled[0]} if compiled else {"ok": True}

    def op_call(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.instance is None:
            return {"ok": False, "kind": "sandbox_error", "error": "the session is not open"}
        name = request["name"]
        method = getattr(self.instance, name, None)
        if name.startswith("_") or not callable(method):
            return {"ok": False, "kind": "unknown_tool", "error": f"no tool named {name!r}"}
        settings = self.settings
        self.clock.advance()
        try:
            result = guarded(self.clock, settings.call_timeout, lambda: method(**request["args"]))
            if exceeds(result, settings.max_result_bytes):
                raise BadResult(f"the tool returned more than the limit of {settings.max_result_bytes:,} bytes")
            try:
                payload = orjson.dumps(result, default=_strict_default, option=_DUMP)
            except orjson.JSONEncodeError as exc:  # a TypeError: kept apart from the tool's own TypeErrors
                raise BadResult(f"the tool returned a non-JSON value: {exc}") from None
        except CallTimeout:
            response: dict[str, Any] = {
                "ok": False,
                "kind": "timeout",
                "error": f"the tool used up its CPU-time limit of {settings.call_timeout:g} s",
            }
        except MemoryError:
            response = {"ok": False, "kind": "resource_limit", "error": "the tool ran out of memory"}
        except RecursionError:
            response = {"ok": False, "kind": "tool_exception", "error": "RecursionError: maximum recursion depth"}
        except PermissionError as exc:
            response = {"ok": False, "kind": "forbidden", "error": _describe(exc)}
        except BadResult as exc:
            response = {"ok": False, "kind": "bad_result", "error": str(exc)}
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, GeneratorExit, ...: the tool raised them
            response = {"ok": False, "kind": "tool_exception", "error": _describe(exc)}
        else:
            if len(payload) > settings.max_result_bytes:
                response = {
                    "ok": False,
                    "kind": "bad_result",
                    "error": f"the tool returned {len(payload):,} bytes; the limit is {settings.max_result_bytes:,}",
                }
            else:
                response = {"ok": True, "result": orjson.Fragment(payload)}
        try:
            after = snapshot(self.instance)
        except MemoryError:
            return {"ok": False, "kind": "resource_limit", "error": "the state ran out of memory"}
        except BaseException as exc:
            return {"ok": False, "kind": "bad_result", "error": f"the state is not JSON: {_describe(exc)}"}
        if self.record_diffs and after != self.last:
            response["diff"] = diff_snapshots(self.last, after)
        self.last = after
        state_size = sum(len(part) for part in after.values())
        if state_size > settings.max_state_bytes:
            response.update(
                ok=False,
                kind="resource_limit",
                error=f"the state grew to {state_size:,} bytes; the limit is {settings.max_state_bytes:,}",
            )
            response.pop("result", None)
        return response

    def op_state(self) -> list[bytes] | dict[str, Any]:
        if self.instance is None:
            return {"ok": False, "kind": "sandbox_error", "error": "the session is not open"}
        return state_reply(self.last)

    def handle(self, request: dict[str, Any]) -> dict[str, Any] | list[bytes]:
        op = request.get("op")
        if op == "call":
            return self.op_call(request)
        if op == "state":
            return self.op_state()
        if op == "open":
            return self.op_open(request)
        return {"ok": False, "kind": "sandbox_error", "error": f"unknown operation {op!r}"}


def _describe(exc: BaseException) -> str:
    """The exception's type, text and line in the code that raised it. Reading them runs the code's own methods
    (``__str__``, a metaclass's ``__name__``): whatever they raise is not let out."""
    try:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<")]
        where = f" (line {frames[-1].lineno} of {frames[-1].name})" if frames else ""
        text = str(exc)
        if len(text) > 500:
            text = text[:500] + "…"
        return f"{type(exc).__name__}: {text}{where}"
    except BaseException:
        return "an exception whose text could not be read"


# ------------------------------------------------------------------------------------------------ I/O


def _read_exact(fd: int, size: int) -> bytes | bytearray | None:
    first = os.read(fd, size)
    if len(first) == size or not first:
        return first if first or not size else None
    # The rest into one buffer of the known size: a megabyte request is neither read into pieces nor joined.
    buffer = bytearray(size)
    buffer[: len(first)] = first
    view = memoryview(buffer)[len(first) :]
    while view:
        count = os.readv(fd, [view])
        if not count:
            return None
        view = view[count:]
    return buffer


_JOINED_REPLY_BYTES = 64 << 10
"""A reply up to this size is copied into one frame (one write); a larger one is written from where it is."""


_MOST_PIECES = 512
"""Pieces handed to one ``writev`` (the kernel takes at most 1,024)."""


def _write_frame(fd: int, body: bytes | list[bytes], sequence: int) -> None:
    """A reply frame: body length and the sequence number of the request it answers, then the body, one text or
    its pieces in order (written from where they are, not copied into a frame)."""
    pieces = [body] if isinstance(body, bytes) else body
    size = sum(len(piece) for piece in pieces)
    header = size.to_bytes(4, "little") + sequence.to_bytes(4, "little")
    if size <= _JOINED_REPLY_BYTES:
        frame = memoryview(header + b"".join(pieces))
        while frame:
            frame = frame[os.write(fd, frame) :]
        return
    parts = [memoryview(header), *(memoryview(piece) for piece in pieces if piece)]
    first = 0
    while first < len(parts):
        written = os.writev(fd, parts[first : first + _MOST_PIECES])
        while first < len(parts) and written >= len(parts[first]):
            written -= len(parts[first])
            first += 1
        if written:
            parts[first] = parts[first][written:]


def _encode(response: dict[str, Any] | bytes | list[bytes]) -> bytes | list[bytes]:
    try:
        return response if isinstance(response, bytes | list) else orjson.dumps(response, default=_json_default)
    except Exception as exc:
        return orjson.dumps({"ok": False, "kind": "bad_result", "error": _describe(exc)})


def _read_frame(fd: int) -> tuple[int, bytes | bytearray] | None:
    header = _read_exact(fd, 8)
    if header is None:
        return None
    body = _read_exact(fd, int.from_bytes(header[:4], "little"))
    if body is None:
        return None
    return int.from_bytes(header[4:], "little"), body


def _read_request(fd: int) -> tuple[int, dict[str, Any]] | None:
    received = _read_frame(fd)
    if received is None:
        return None
    request: dict[str, Any] = orjson.loads(received[1])
    return received[0], request


def serve_session(
    fd: int, settings: Settings, *, own_process: bool = False, compiled_code: Mapping[str, CodeType] | None = None
) -> None:
    """Serve one environment session until the harness closes the channel.

    ``own_process``: this process serves this session alone and exits after it (a forked session child). Its first
    request, the open, then runs without the cyclic collector: decoding a large initial state and building the
    environment from it allocate hundreds of thousands of objects, and the collections on the way, which walk
    them all again and again, cost more than building them (a retail database: 24 ms against 18). What the open built
    lives as long as the session, so it is frozen out of the collector's view afterwards, and the collector runs
    as usual for every call. Cyclic garbage the constructor itself left is kept until the process exits (the
    memory limit bounds it). ``compiled_code``: the environment code the zygote holds (``EnvironmentSession``)."""
    session = EnvironmentSession(settings, compiled_code)
    opening = own_process
    if opening:
        gc.disable()
    while True:
        received = _read_request(fd)
        if received is None:
            return
        sequence, request = received
        if request.get("op") == "close":
            return
        try:
            response = session.handle(request)
        except MemoryError:
            response = {"ok": False, "kind": "resource_limit", "error": "the environment process ran out of memory"}
        except BaseException as exc:
            # Once the environment's code has run here, it can have rewritten anything on this path.
            kind = "tool_exception" if session.code_ran else "sandbox_error"
            response = {"ok": False, "kind": kind, "error": _describe(exc)}
        _write_frame(fd, _encode(response), sequence)
        if opening:
            opening = False
            gc.freeze()
            gc.enable()


class CheckBatchRunner(Protocol):
    """What runs a batch of checks in a check process (``harness.sandbox.check_runner.run_checks``, which builds on
    this module and so is handed in by the zygote rather than imported here)."""

    def __call__(
        self, request: dict[str, Any], inputs: list[ReceivedInputs], settings: Settings, *, isolated: bool = ...
    ) -> dict[str, Any]: ...


def serve_checks(fd: int, settings: Settings, run_checks: CheckBatchRunner, *, isolated: bool = True) -> None:
    """Run one batch of checks and return (``isolated=False`` only for the trusted warm-up, which runs before the
    zygote forks and must not leave the check guard installed there)."""
    received = _read_frame(fd)
    if received is None:
        return
    sequence, body = received
    try:
        request, inputs = read_check_request(body)
        response: dict[str, Any] = run_checks(request, inputs, settings, isolated=isolated)
    except MemoryError:
        response = {"ok": False, "kind": "resource_limit", "error": "the check process ran out of memory"}
    except BaseException as exc:
        response = {"ok": False, "kind": "sandbox_error", "error": _describe(exc)}
    _write_frame(fd, _encode(response), sequence)


def prepare_interpreter(optional_modules: Iterable[str] | None = None, jail_modules: Iterable[str] = ()) -> None:
    """What every child needs ready before it forks: the jail modules (third-party modules, by name) made
    importable, modules imported (of the jail modules, those named, or all when ``None``), the call timer's
    handler installed."""
    import importlib

    jail = frozenset(jail_modules)
    _IMPORTABLE.clear()
    _IMPORTABLE.update(importable_roots(jail))
    wanted = jail if optional_modules is None else jail.intersection(optional_modules)
    for module in sorted((ALLOWED_MODULES - {"__future__"}) | wanted):
        try:
            importlib.import_module(module)
        except ImportError:
            if module not in jail:
                raise
    sys.dont_write_bytecode = True
    sys.setrecursionlimit(3000)
    signal.signal(signal.SIGPROF, _on_alarm)
    _SHARED_BUILTINS.clear()
    _SHARED_BUILTINS.update(restricted_builtins())


def forget_attribute_names() -> None:
    """Forget the attribute names ``_json_default`` learned per class (the warm-up's classes: no child writes their
    objects)."""
    _PUBLIC_ATTRIBUTES.clear()
