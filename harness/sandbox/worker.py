"""The sandbox worker process: runs model-written environment code and check functions.

Started by ``harness.sandbox.pool`` as ``python -m harness.sandbox.worker``. It speaks length-prefixed orjson
frames on stdin/stdout, one request at a time, in order. Before it reads a request it pre-imports the allowed
modules, caps its memory, points stdout away from the protocol pipe, and installs an audit hook that refuses
sockets, subprocesses and file writes. Only the standard library and orjson are imported here.
"""

from __future__ import annotations

import builtins
import copy
import hashlib
import importlib
import os
import resource
import signal
import sys
import traceback
from collections import OrderedDict
from typing import Any

import orjson

from harness.sandbox.policy import ALLOWED_MODULES, REMOVED_BUILTINS, is_forbidden_attribute
from harness.sandbox.shims import CONTEXT, SHIM_MODULES, Clock
from harness.statediff import diff_values

_CLASS_CACHE_SIZE = 128
_CODE_CACHE_SIZE = 4096


class CallTimeout(BaseException):
    """Raised by the alarm when a call overruns. BaseException so `except Exception` cannot swallow it."""


class BadResult(Exception):
    pass


# ------------------------------------------------------------------------------------------- restrictions


def _guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    top = name.split(".")[0]
    if level or top not in ALLOWED_MODULES:
        raise ImportError(f"import of {name!r} is not allowed in the sandbox")
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
    names = {k: v for k, v in vars(builtins).items() if k not in REMOVED_BUILTINS}
    names.update(
        __import__=_guarded_import,
        getattr=_guarded_getattr,
        setattr=_guarded_setattr,
        delattr=_guarded_delattr,
        hasattr=_guarded_hasattr,
        print=_discard_print,
    )
    return names


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_REFUSED_EVENTS = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "os.remove",
    "os.unlink",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.truncate",
    "os.chmod",
    "os.chown",
    "os.symlink",
    "os.link",
    "os.putenv",
    "os.startfile",
    "shutil.",
    "ctypes.",
    "pty.",
    "webbrowser.",
    "urllib.",
    "http.client.",
    "ftplib.",
    "smtplib.",
    "sqlite3.",
)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        mode = args[1] if len(args) > 1 else "r"
        flags = args[2] if len(args) > 2 else 0
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        ):
            raise PermissionError(f"the sandbox refuses to open {args[0]!r} for writing")
        return
    if event.startswith(_REFUSED_EVENTS):
        raise PermissionError(f"the sandbox refuses {event}")


def _on_alarm(_signum: int, _frame: Any) -> None:
    raise CallTimeout()


# ------------------------------------------------------------------------------------------------ state


def _json_default(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if hasattr(value, "__dict__"):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


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


def fresh_copy(value: Any) -> Any:
    """A deep copy of a JSON value (what ``copy.deepcopy`` gives for one, several times faster)."""
    try:
        return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError):
        return copy.deepcopy(value)


def snapshot(instance: Any) -> dict[str, bytes]:
    """The instance's non-dunder attributes, each serialized on its own (the unit of change detection)."""
    return {name: dumps(value) for name, value in vars(instance).items() if not name.startswith("__")}


def encode_state(parts: dict[str, bytes]) -> bytes:
    return b"{" + b",".join(orjson.dumps(name) + b":" + data for name, data in parts.items()) + b"}"


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


class Session:
    def __init__(self, instance: Any, clock: Clock, record_diffs: bool):
        self.instance = instance
        self.clock = clock
        self.record_diffs = record_diffs
        self.last = snapshot(instance)


class Worker:
    def __init__(self, call_timeout: float, max_result_bytes: int, max_state_bytes: int):
        self.call_timeout = call_timeout
        self.max_result_bytes = max_result_bytes
        self.max_state_bytes = max_state_bytes
        self.sessions: dict[str, Session] = {}
        self.classes: OrderedDict[str, Any] = OrderedDict()
        self.code_objects: OrderedDict[str, Any] = OrderedDict()
        self.builtins = restricted_builtins()

    # -- running untrusted code under the alarm

    def _guarded(self, clock: Clock, timeout: float, fn: Any, *args: Any) -> Any:
        CONTEXT.current = clock
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _load_module(self, code: str, label: str) -> dict[str, Any]:
        namespace: dict[str, Any] = {"__builtins__": self.builtins, "__name__": label}
        module = type(sys)(label)
        module.__dict__.update(namespace)
        sys.modules[label] = module  # dataclasses and typing look the module up by name
        exec(self._compiled(code, label), module.__dict__)
        return module.__dict__

    def _compiled(self, code: str, label: str) -> Any:
        compiled = self.code_objects.get(code)
        if compiled is None:
            compiled = compile(code, f"<{label}>", "exec")
            self.code_objects[code] = compiled
            if len(self.code_objects) > _CODE_CACHE_SIZE:
                self.code_objects.popitem(last=False)
        return compiled

    def _environment_class(self, code: str, class_name: str, clock: Clock) -> Any:
        key = hashlib.sha256(f"{class_name}\0{code}".encode()).hexdigest()
        cls = self.classes.get(key)
        if cls is None:
            namespace = self._guarded(clock, self.call_timeout, self._load_module, code, f"env_{key[:16]}")
            cls = namespace.get(class_name)
            if not isinstance(cls, type):
                raise LookupError(f"the code does not define a class named {class_name!r}")
            self.classes[key] = cls
            if len(self.classes) > _CLASS_CACHE_SIZE:
                evicted, _ = self.classes.popitem(last=False)
                sys.modules.pop(f"env_{evicted[:16]}", None)
        else:
            self.classes.move_to_end(key)
        return cls

    # -- operations

    def op_open(self, request: dict[str, Any]) -> dict[str, Any]:
        clock = Clock(int(request.get("seed", 0)), float(request.get("epoch") or 0) or Clock(0).epoch)
        init_config = request["state"]
        try:
            cls = self._environment_class(request["code"], request["class_name"], clock)

            def instantiate() -> Any:
                # EnvScaler's runtime: constructor with a deep copy, fall back to no arguments, then setattr.
                try:
                    instance = cls(fresh_copy(init_config))
                except TypeError:
                    instance = cls()
                for key, value in init_config.items():
                    setattr(instance, key, value)
                return instance

            instance = self._guarded(clock, self.call_timeout, instantiate)
        except CallTimeout:
            return {"ok": False, "kind": "timeout", "error": "loading the environment timed out"}
        except MemoryError:
            return {"ok": False, "kind": "resource_limit", "error": "loading the environment ran out of memory"}
        except BaseException as exc:
            return {"ok": False, "kind": "load_error", "error": _describe(exc)}
        self.sessions[request["sid"]] = Session(instance, clock, bool(request.get("diffs", True)))
        return {"ok": True}

    def op_call(self, request: dict[str, Any]) -> dict[str, Any] | bytes:
        session = self.sessions.get(request["sid"])
        if session is None:
            return {"ok": False, "kind": "sandbox_error", "error": "unknown session"}
        method = getattr(session.instance, request["name"], None)
        if request["name"].startswith("_") or not callable(method):
            return {"ok": False, "kind": "unknown_tool", "error": f"no tool named {request['name']!r}"}
        session.clock.advance()
        try:
            result = self._guarded(session.clock, self.call_timeout, lambda: method(**request["args"]))
            if exceeds(result, self.max_result_bytes):
                raise BadResult(f"the tool returned more than the limit of {self.max_result_bytes:,} bytes")
            payload = orjson.dumps(result, default=_strict_default, option=_DUMP)
        except CallTimeout:
            response: dict[str, Any] = {
                "ok": False,
                "kind": "timeout",
                "error": f"the tool did not finish within {self.call_timeout:g} s",
            }
        except MemoryError:
            response = {"ok": False, "kind": "resource_limit", "error": "the tool ran out of memory"}
        except RecursionError:
            response = {"ok": False, "kind": "tool_exception", "error": "RecursionError: maximum recursion depth"}
        except PermissionError as exc:
            response = {"ok": False, "kind": "forbidden", "error": str(exc)}
        except BadResult as exc:
            response = {"ok": False, "kind": "bad_result", "error": str(exc)}
        except orjson.JSONEncodeError as exc:
            response = {"ok": False, "kind": "bad_result", "error": f"the tool returned a non-JSON value: {exc}"}
        except Exception as exc:
            response = {"ok": False, "kind": "tool_exception", "error": _describe(exc)}
        else:
            if len(payload) > self.max_result_bytes:
                response = {
                    "ok": False,
                    "kind": "bad_result",
                    "error": f"the tool returned {len(payload):,} bytes; the limit is {self.max_result_bytes:,}",
                }
            else:
                response = {"ok": True, "result": orjson.Fragment(payload)}
        try:
            after = snapshot(session.instance)
        except Exception as exc:
            return {"ok": False, "kind": "bad_result", "error": f"the state is not JSON: {_describe(exc)}"}
        if session.record_diffs and after != session.last:
            response["diff"] = diff_snapshots(session.last, after)
        session.last = after
        state_size = sum(len(part) for part in after.values())
        if state_size > self.max_state_bytes:
            response.update(
                ok=False,
                kind="resource_limit",
                error=f"the state grew to {state_size:,} bytes; the limit is {self.max_state_bytes:,}",
            )
            response.pop("result", None)
        return response

    def op_state(self, request: dict[str, Any]) -> bytes | dict[str, Any]:
        session = self.sessions.get(request["sid"])
        if session is None:
            return {"ok": False, "kind": "sandbox_error", "error": "unknown session"}
        return b'{"ok":true,"state":' + encode_state(session.last) + b"}"

    def op_close(self, request: dict[str, Any]) -> dict[str, Any]:
        self.sessions.pop(request["sid"], None)
        return {"ok": True}

    def op_checks(self, request: dict[str, Any]) -> dict[str, Any]:
        timeout = float(request.get("timeout", self.call_timeout))
        # Each check gets its own copy of both states (a check may mutate what it is given); decoding JSON
        # again is several times cheaper than copy.deepcopy.
        initial, final = orjson.dumps(request["initial"]), orjson.dumps(request["final"])
        transcript = orjson.dumps(request.get("transcript") or [])
        results = [
            self._run_check(check, initial, final, transcript, timeout, index)
            for index, check in enumerate(request["checks"])
        ]
        return {"ok": True, "results": results}

    def _run_check(
        self,
        check: dict[str, Any],
        initial_json: bytes,
        final_json: bytes,
        transcript_json: bytes,
        timeout: float,
        index: int,
    ) -> dict[str, Any]:
        clock = Clock(index)
        initial, final = orjson.loads(initial_json), orjson.loads(final_json)
        try:
            namespace = self._guarded(clock, timeout, self._load_module, check["source"], f"check_{index}")
            function = namespace.get("check")
            if callable(function):
                if _takes_transcript(function):
                    transcript = orjson.loads(transcript_json)
                    value = self._guarded(clock, timeout, function, initial, final, transcript)
                else:
                    value = self._guarded(clock, timeout, function, initial, final)
            else:
                function = namespace.get("check_func")
                if not callable(function):
                    return {"passed": False, "value": None, "error": "defines neither check() nor check_func()"}
                namespace["initial_state"] = initial
                value = self._guarded(clock, timeout, function, final)
        except CallTimeout:
            return {"passed": False, "value": None, "error": f"the check did not finish within {timeout:g} s"}
        except BaseException as exc:
            return {"passed": False, "value": None, "error": _describe(exc)}
        passed = value is True
        return {"passed": passed, "value": None if passed else _short_repr(value), "error": None}

    def handle(self, request: dict[str, Any]) -> dict[str, Any] | bytes:
        op = request.get("op")
        if op == "call":
            return self.op_call(request)
        if op == "state":
            return self.op_state(request)
        if op == "open":
            return self.op_open(request)
        if op == "close":
            return self.op_close(request)
        if op == "checks":
            return self.op_checks(request)
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        return {"ok": False, "kind": "sandbox_error", "error": f"unknown operation {op!r}"}


def _takes_transcript(function: Any) -> bool:
    """Whether ``check`` declares a third positional parameter (``check(initial, final, transcript)``)."""
    import inspect

    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def _describe(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<")]
    where = f" (line {frames[-1].lineno} of {frames[-1].name})" if frames else ""
    text = str(exc)
    if len(text) > 500:
        text = text[:500] + "…"
    return f"{type(exc).__name__}: {text}{where}"


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


# ------------------------------------------------------------------------------------------------ I/O


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def main() -> None:
    call_timeout = float(os.environ.get("HARNESS_SANDBOX_CALL_TIMEOUT", "5"))
    memory_mb = int(os.environ.get("HARNESS_SANDBOX_MEMORY_MB", "1024"))
    max_result = int(os.environ.get("HARNESS_SANDBOX_MAX_RESULT_BYTES", "1000000"))
    max_state = int(os.environ.get("HARNESS_SANDBOX_MAX_STATE_BYTES", "64000000"))

    # The protocol keeps private copies of stdin/stdout; fd 1 then goes to /dev/null so stray writes are lost.
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)

    for module in sorted(ALLOWED_MODULES - {"__future__"}):
        importlib.import_module(module)
    sys.dont_write_bytecode = True
    sys.setrecursionlimit(3000)
    signal.signal(signal.SIGALRM, _on_alarm)
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    worker = Worker(call_timeout, max_result, max_state)
    sys.addaudithook(_audit)

    while True:
        header = _read_exact(proto_in, 8)
        if header is None:
            return
        request_id = int.from_bytes(header[:4], "little")
        body = _read_exact(proto_in, int.from_bytes(header[4:], "little"))
        if body is None:
            return
        try:
            response = worker.handle(orjson.loads(body))
        except MemoryError:
            response = {"ok": False, "kind": "resource_limit", "error": "the worker ran out of memory"}
        except BaseException as exc:
            response = {"ok": False, "kind": "sandbox_error", "error": _describe(exc)}
        try:
            data = response if isinstance(response, bytes) else orjson.dumps(response, default=_json_default)
        except Exception as exc:
            data = orjson.dumps({"ok": False, "kind": "bad_result", "error": _describe(exc)})
        _write_all(proto_out, request_id.to_bytes(4, "little") + len(data).to_bytes(4, "little") + data)


if __name__ == "__main__":
    main()
