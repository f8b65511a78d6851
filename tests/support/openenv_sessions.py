"""Runs under the OpenEnv 0.10 client venv (not the project's): drives several sessions of
``harness serve --protocol openenv`` at once, each with its own async ``MCPToolClient`` over the WebSocket ``/ws``,
the way a trainer's generation batch does, and prints what it saw and how long each operation took.

Usage: ``python openenv_sessions.py BASE_URL < PROGRAMS_JSON``. The programs (on standard input) are a list with
one program per session; a program is a list of operations, run in order within its session:

- ``{"op": "reset", "kwargs": {...}}``: ``reset(**kwargs)``, answered by the observation envelope;
- ``{"op": "step", "name": ..., "arguments": {...}}``: ``step(CallToolAction(...))``, a frame on ``/ws`` (not
  ``call_tool``, which production-mode clients send as HTTP ``POST /mcp``);
- ``{"op": "state"}``: ``state()``.

Every session connects and runs its first operation; once all of them have (a barrier, so all are open at once),
the rest of every program runs concurrently (``asyncio.gather``). A failing operation is recorded as
``{"error": ...}`` and its session goes on. The output is one JSON document:
``{"sessions": [[{"result"|"error": ..., "seconds": s}, ...], ...], "max_in_flight": n, "wall_seconds": s}``:
``max_in_flight`` is the most operations awaiting the server at one time, ``wall_seconds`` the time from the
barrier to the last session's end.
"""

import asyncio
import contextlib
import json
import sys
import time

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.mcp_client import MCPToolClient


class Flight:
    def __init__(self):
        self.now = 0
        self.most = 0

    def enter(self):
        self.now += 1
        self.most = max(self.most, self.now)

    def leave(self):
        self.now -= 1


def envelope(result):
    return {
        "observation": result.observation.model_dump(mode="json"),
        "reward": result.reward,
        "done": result.done,
    }


async def run(client, operation):
    kind = operation["op"]
    if kind == "reset":
        return envelope(await client.reset(**operation.get("kwargs", {})))
    if kind == "step":
        action = CallToolAction(tool_name=operation["name"], arguments=operation.get("arguments", {}))
        return envelope(await client.step(action))
    if kind == "state":
        return (await client.state()).model_dump(mode="json")
    raise ValueError(f"unknown operation {kind!r}")


async def timed(client, operation, flight):
    flight.enter()
    started = time.perf_counter()
    try:
        entry = {"result": await run(client, operation)}
    except Exception as exc:
        entry = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        flight.leave()
    entry["seconds"] = time.perf_counter() - started
    return entry


async def session(base_url, program, barrier, flight, clock):
    report = []
    client = MCPToolClient(base_url=base_url, message_timeout_s=300)
    try:
        try:
            await client.connect()
        except Exception as exc:
            report.append({"error": f"connect: {type(exc).__name__}: {exc}", "seconds": 0.0})
        if not report and program:
            report.append(await timed(client, program[0], flight))
        await barrier.wait()
        clock.setdefault("started", time.perf_counter())
        if report and "error" not in report[0]:
            for operation in program[1:]:
                report.append(await timed(client, operation, flight))
    finally:
        with contextlib.suppress(Exception):
            await client.close()
    return report


async def main():
    base_url, programs = sys.argv[1], json.loads(sys.stdin.read())
    barrier = asyncio.Barrier(len(programs))
    flight = Flight()
    clock = {}
    reports = await asyncio.gather(*(session(base_url, p, barrier, flight, clock) for p in programs))
    wall = time.perf_counter() - clock["started"]
    print(json.dumps({"sessions": reports, "max_in_flight": flight.most, "wall_seconds": wall}))


if __name__ == "__main__":
    asyncio.run(main())
