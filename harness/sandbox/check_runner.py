"""Running one batch of checks in a check process: each check in a fresh module, none able to change how another
is evaluated (``harness.sandbox.check_isolation``). Standard library and orjson only; imported by the zygote."""

from __future__ import annotations

import dis
import gc
import inspect
import sys
import types
from typing import Any

import orjson

from harness.sandbox.check_inputs import ReceivedInputs
from harness.sandbox.check_isolation import capture_shared_state, install_check_guard, traceback_locator
from harness.sandbox.runtime import CallTimeout, Settings, guarded, load_module
from harness.sandbox.shims import SHIM_MODULES, Clock

_LEFT_ALIVE: list[Any] = []
"""What a check process must never free (see the end of ``run_checks``)."""
_PREPARED_RESTORE: list[Any] = []
"""The shared-state restore of check processes, captured once before the zygote forks; a check process takes it
out before its first check runs."""


def run_checks(
    request: dict[str, Any], inputs: list[ReceivedInputs], settings: Settings, *, isolated: bool = False
) -> dict[str, Any]:
    """Each check on fresh copies of (initial, final[, transcript]) of each episode. Only an exact True passes.

    ``inputs`` holds each episode's parts as the bytes of their JSON (``check_inputs``), the episodes of one
    scenario; the reply's ``results`` hold every check's result, episode after episode. ``isolated`` (a check
    process's batch) installs the check guard and, after each check, puts back the state the process's checks
    share (``harness.sandbox.check_isolation``): no check changes how another is evaluated, whether the next one
    belongs to the same episode or to the next. The loop uses only locals bound before the first check runs."""
    timeout = float(request.get("timeout", settings.call_timeout))
    checks = list(request["checks"])
    running: list[Any] = install_check_guard() if isolated else [None, False]
    restore = None
    if isolated:
        restore = _PREPARED_RESTORE.pop() if _PREPARED_RESTORE else capture_shared_state(list(SHIM_MODULES.values()))
        gc.freeze()  # the collection after each check then visits only what the checks made
    evaluate, locate, encode, decode = _run_check, traceback_locator(), orjson.dumps, orjson.loads
    collect, enable_gc, disable_gc = gc.collect, gc.enable, gc.disable
    forget_module, keep = sys.modules.pop, list.append
    graveyard: list[Any] = []  # what the checks left behind, kept alive so that none of their finalizers runs later
    compiled: dict[int, types.CodeType] = {}  # each check's code, compiled for its first episode
    readings: dict[types.CodeType, tuple[bool, bool, bool]] = {}  # what a check function's code reads (_readings)
    encoded: list[bytes] = []
    last = len(checks) * len(inputs) - 1
    turn = 0
    for initial, final, transcript in inputs:
        for index, check in enumerate(checks):
            running[0], running[1] = f"check_{index}", False
            enable_gc()
            outcome: tuple[dict[str, Any], BaseException | None] | None = None
            try:
                outcome = evaluate(check, initial, final, transcript, timeout, index, compiled, readings)
                answer = encode(outcome[0])  # plain JSON now: nothing of the check's survives into the reply
            except BaseException:
                answer = b'{"passed":false,"value":null,"error":"the check broke out of its evaluation"}'
            if outcome is not None and outcome[1] is not None:
                running[0] = None  # the locator runs no code of the check
                reply = decode(answer)
                reply["error"] += locate(outcome[1])
                running[0] = f"check_{index}"
                answer = encode(reply)
            outcome = None
            if restore is not None:
                collect()  # the check's own finalizers run now, while it is still the one guarded
                disable_gc()
                # A check that imported nothing reached nothing shared: there is nothing to put back.
                if running[1]:
                    restore(graveyard, turn == last)
                # Out of the next checks' reach (those of the next episode too), yet never freed.
                keep(graveyard, forget_module(f"check_{index}", None))
            running[0] = None
            encoded.append(answer)
            turn += 1
    if restore is not None:
        # Never freed: freeing the snapshot would write to every page it shares with the zygote, and freeing what
        # the checks left would run their finalizers unguarded. The process exits right after its reply.
        _LEFT_ALIVE.extend((restore, graveyard))
    return {"ok": True, "results": [decode(answer) for answer in encoded]}


def _run_check(
    check: dict[str, Any],
    initial_json: memoryview,
    final_json: memoryview,
    transcript_json: memoryview,
    timeout: float,
    index: int,
    compiled: dict[int, types.CodeType],
    readings: dict[types.CodeType, tuple[bool, bool, bool]],
) -> tuple[dict[str, Any], BaseException | None]:
    """The check's result, and the exception it raised (whose traceback the caller locates). ``compiled`` and
    ``readings`` keep, for the batch's next episodes, the check's compiled code (each episode still runs it as a
    fresh module) and what its function reads."""
    clock = Clock(index)
    try:
        code = compiled.get(index)
        if code is None:
            code = compiled[index] = guarded(clock, timeout, compile, check["source"], f"<check_{index}>", "exec")
        namespace = guarded(clock, timeout, load_module, code, f"check_{index}")
        function = namespace.get("check")
        if callable(function):
            reads_initial, reads_final, takes_transcript = _readings(function, readings)
            initial = orjson.loads(initial_json) if reads_initial else None
            final = orjson.loads(final_json) if reads_final else None
            if takes_transcript:
                value = guarded(clock, timeout, function, initial, final, orjson.loads(transcript_json))
            else:
                value = guarded(clock, timeout, function, initial, final)
        else:
            function = namespace.get("check_func")
            if not callable(function):
                return {"passed": False, "value": None, "error": "defines neither check() nor check_func()"}, None
            namespace["initial_state"] = orjson.loads(initial_json)
            value = guarded(clock, timeout, function, orjson.loads(final_json))
    except CallTimeout:
        return {"passed": False, "value": None, "error": f"the check used up its CPU-time limit of {timeout:g} s"}, None
    except BaseException as exc:
        return {"passed": False, "value": None, "error": _name_and_text(exc)}, exc
    passed = value is True
    return {"passed": passed, "value": None if passed else _short_repr(value), "error": None}, None


def _readings(function: Any, known: dict[types.CodeType, tuple[bool, bool, bool]]) -> tuple[bool, bool, bool]:
    """Whether ``function`` reads the initial state, the final state, and takes the transcript. For a plain
    function these depend on its code alone, so ``known`` answers for code already read."""
    plain = type(function) is types.FunctionType and not function.__dict__
    found = known.get(function.__code__) if plain else None
    if found is None:
        found = (reads_parameter(function, 0), reads_parameter(function, 1), _takes_transcript(function))
        if plain:
            known[function.__code__] = found
    return found


_LOCALS_READERS = frozenset({"locals", "vars", "eval", "exec", "getattr", "f_locals"})
"""Names through which a function's code could read its own parameters without naming them."""


def reads_parameter(function: Any, position: int) -> bool:
    """Whether ``function`` can read its positional parameter at ``position``; False only when that is certain.

    A large state is decoded for a check only when the check can read it: most state checks never read the
    initial state, transcript checks never read either state, and decoding one is most of such a check's cost.
    Certain means: a plain function whose own code never names the parameter (no load, store or delete of it, no
    inner function capturing it) and names none of the ways to a frame's locals. Anything else (a callable
    object, a wrapper taking ``*args``) gets the value.
    """
    code = function.__code__ if type(function) is types.FunctionType else None
    if code is None or position >= code.co_argcount:
        return True
    name = code.co_varnames[position]
    if name in code.co_cellvars or not _LOCALS_READERS.isdisjoint(code.co_names):
        return True
    for instruction in dis.get_instructions(code):
        value = instruction.argval
        if value == name or (type(value) is tuple and name in value):
            return True
    return False


def _takes_transcript(function: Any) -> bool:
    """Whether ``check`` declares a third positional parameter (``check(initial, final, transcript)``)."""
    if type(function) is types.FunctionType and not function.__dict__:
        # What inspect.signature would find, read from the code (no __wrapped__ or __signature__ to follow).
        code = function.__code__
        return code.co_argcount >= 3 or bool(code.co_flags & inspect.CO_VARARGS)
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def _name_and_text(exc: BaseException) -> str:
    text = str(exc)
    if len(text) > 500:
        text = text[:500] + "…"
    return f"{type(exc).__name__}: {text}"


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


def prepare_check_restore() -> None:
    """Capture the shared state check processes put back after each check, once, before the zygote forks. Captured
    while the list that holds it is empty: each restore puts the list back empty, out of every check's reach."""
    _PREPARED_RESTORE.clear()
    prepared = capture_shared_state(list(SHIM_MODULES.values()))
    _PREPARED_RESTORE.append(prepared)
