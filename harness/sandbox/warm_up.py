"""The zygote's warm-up: trusted sessions and check batches served in the zygote itself, before it forks.

Lazy caches are filled and the bytecode of the serving path (``runtime.serve_session``, ``runtime.serve_checks``)
is specialized once, here, instead of being rewritten in every child, which would make those pages private to each
session (and cost each one the CPU to redo it). Standard library and orjson only: the zygote imports it.
"""

from __future__ import annotations

import socket
import sys
from functools import partial
from typing import Any

import orjson

from harness.sandbox.check_inputs import check_request
from harness.sandbox.runtime import (
    CheckBatchRunner,
    Settings,
    forget_attribute_names,
    serve_checks,
    serve_session,
)
from harness.sandbox.shims import CONTEXT, Clock

_ENVIRONMENT = """
import datetime
import uuid


class Counter:
    def __init__(self, init_config):
        self.items = {}
        self.log = []

    def get_item(self, item_id: str) -> dict:
        if item_id not in self.items:
            return {"success": False, "error": f"no item {item_id}"}
        return {"success": True, "data": dict(self.items[item_id])}

    def add_item(self, item_id: str, count: int = 1) -> dict:
        entry = self.items.setdefault(item_id, {"count": 0, "tags": []})
        entry["count"] += count
        entry["tags"].append(str(uuid.uuid4())[:8])
        self.log.append({"at": datetime.datetime.now().isoformat(), "item": item_id})
        return {"success": True, "count": entry["count"]}

    def fail(self) -> dict:
        raise ValueError("a tool that raises")
"""

_CHECK = "def check(initial, final):\n    return final['items']['a']['count'] >= 1\n"
_CALLS = 12
"""Pairs of calls in the first warm-up session (its replies wait in a socket buffer until it ends)."""
_ROUNDS = 64
"""Enough runs for the interpreter to specialize the hot paths' bytecode (it rewrites a function's bytecode in
place after its first few runs)."""


_PYDANTIC_MODEL = """
import pydantic


class WarmUp(pydantic.BaseModel):
    name: str
    count: int = 0
    tags: list[str] = pydantic.Field(default_factory=list, description="Tags.")
    extra: dict[str, float] | None = None


WarmUp.model_validate({"name": "a", "count": "1", "tags": ["b"]}).model_dump(mode="json")
WarmUp.model_json_schema()
"""


def warm_up(settings: Settings, run_checks: CheckBatchRunner) -> None:
    """Serve trusted sessions and check batches in this process, before the zygote forks: lazy caches are filled
    and the bytecode of the serving path is specialized once here instead of being rewritten in every child,
    which would make those pages private to each session (and cost each one the CPU to redo it). The caller then
    prepares the check processes' restore snapshot (``check_runner.prepare_check_restore``)."""
    opening: dict[str, Any] = {"op": "open", "class_name": "Counter", "code": _ENVIRONMENT, "state": {}}
    calls: list[dict[str, Any]] = []
    for index in range(_CALLS):
        calls.append({"op": "call", "name": "add_item", "args": {"item_id": "a", "count": index}})
        calls.append({"op": "call", "name": "get_item", "args": {"item_id": "a" if index % 2 else "b"}})
    ending: list[dict[str, Any]] = [{"op": "call", "name": "fail", "args": {}}, {"op": "state"}, {"op": "close"}]
    # A request as the pool sends it (``check_batches.encode_inputs``).
    checks = check_request(
        {"checks": [{"source": _CHECK}]},
        [(b'{"items":{}}', b'{"items":{"a":{"count":1}}}', b"[]")],
    )
    trusted_checks = partial(serve_checks, run_checks=run_checks, isolated=False)
    replies = _serve_locally(serve_session, [opening, *calls, *ending], settings)
    bytecode = replies[0].get("bytecode") if replies else None
    if bytecode:
        opening = {**opening, "code": None, "bytecode": bytecode}
    for _ in range(_ROUNDS):
        _serve_locally(serve_session, [opening, *calls[:2], *ending], settings)
        _serve_locally(trusted_checks, [checks], settings)
    for label in [name for name in sys.modules if name == "environment" or name.startswith("check_")]:
        del sys.modules[label]
    if "pydantic" in sys.modules:
        # The first model pydantic builds in a process fills its schema machinery's caches (pydantic 2.10: about
        # 25 ms of CPU; the next model about 1 ms): built here once, never again in each child.
        exec(compile(_PYDANTIC_MODEL, "<warm-up>", "exec"), {"__name__": "warm_up_models"})
    forget_attribute_names()
    CONTEXT.current = Clock(0)


def _serve_locally(serve: Any, requests: list[dict[str, Any] | bytes], settings: Settings) -> list[dict[str, Any]]:
    """Run ``serve`` on a socket pair preloaded with ``requests`` (messages, or bodies already encoded); the
    replies, decoded."""
    bodies = [request if isinstance(request, bytes) else orjson.dumps(request) for request in requests]
    ours, theirs = socket.socketpair()
    with ours, theirs:
        headers = [len(body).to_bytes(4, "little") + n.to_bytes(4, "little") for n, body in enumerate(bodies)]
        ours.sendall(b"".join(header + body for header, body in zip(headers, bodies, strict=True)))
        ours.shutdown(socket.SHUT_WR)
        serve(theirs.fileno(), settings)
        theirs.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := ours.recv(1 << 20):
            data += chunk
    replies = []
    while len(data) >= 8:
        size = int.from_bytes(data[:4], "little")
        replies.append(orjson.loads(data[8 : 8 + size]))
        data = data[8 + size :]
    return replies
