"""Tool calls per second through ``harness serve`` (streamable HTTP) against the direct sandbox runtime.

Opens S sessions at once, each loading a seed scenario's state and making C read-only calls in sequence, first
straight on the sandbox pool, then through one HTTP MCP server (one fastmcp client per session, as in
``harness run --mcp``). Server and clients share this process, so the figure includes both sides.

    python bench/mcp_throughput.py [--sessions 32] [--calls 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from harness.library import load_library
from harness.mcp.client import McpToolSession
from harness.mcp.server import EnvironmentServer, running_http_server
from harness.sandbox import JailSpec
from harness.schema import ToolCall

ENV_ID = "retail_orders"


async def main(sessions: int, calls: int, workers: int) -> None:
    library = load_library()
    environment = library.environments[ENV_ID]
    scenario = library.scenarios_for(ENV_ID)[0]
    action = scenario.reference_actions[0]
    call = ToolCall(id="c", name=action.name, arguments=dict(action.arguments))

    async with JailSpec(workers=workers).pool() as pool:

        async def direct_session() -> None:
            session = await pool.open_session(environment, scenario.initial_state)
            for _ in range(calls):
                await session.call(call)
            await session.state()
            await session.close()

        started = time.perf_counter()
        await asyncio.gather(*(direct_session() for _ in range(sessions)))
        direct_s = time.perf_counter() - started

        server = EnvironmentServer(environment, pool=pool)
        async with running_http_server(server) as url:

            async def mcp_session() -> None:
                async with McpToolSession(url) as session:
                    await session.load_state(scenario.initial_state)
                    for _ in range(calls):
                        await session.call(call)
                    await session.state()

            started = time.perf_counter()
            await asyncio.gather(*(mcp_session() for _ in range(sessions)))
            mcp_s = time.perf_counter() - started

    total = sessions * calls
    print(f"{sessions} sessions x {calls} calls ({ENV_ID}.{action.name}), {workers} sandbox workers")
    print(f"direct runtime : {direct_s:6.2f} s  {total / direct_s:8.1f} calls/s")
    print(f"MCP over HTTP  : {mcp_s:6.2f} s  {total / mcp_s:8.1f} calls/s  (includes connect, load, read-back)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.calls, args.workers))
