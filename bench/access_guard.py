"""What the access guard of ``harness serve`` (``harness/mcp/access.py``) costs per HTTP request, in this process.

A trivial ASGI app that reads the body and answers is called N times directly, then N times through
``AccessGuard`` with a request as fastmcp's client sends it (the credential as the path's first segment, a Host of
127.0.0.1, a JSON-RPC ``tools/call`` body). The difference is the guard's cost: the Host, Origin and credential
checks, the path rewrite and the bounded read of the body. ``bench/mcp_throughput.py`` shows it against a whole
tool call through the server.

    python bench/access_guard.py [--requests 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.mcp.access import AccessGuard, AccessPolicy
from harness.mcp.credential import make_token

BODY = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
    b'"params":{"name":"get_customer","arguments":{"customer_id":"C-101"}}}'
)


async def main(requests: int) -> None:
    token = make_token()
    policy = AccessPolicy.for_bind("127.0.0.1", token=token)

    async def app(_scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def scope() -> dict[str, Any]:
        return {
            "type": "http",
            "method": "POST",
            "path": f"/{token}/mcp",
            "raw_path": f"/{token}/mcp".encode(),
            "server": ("127.0.0.1", 8765),
            "client": ("127.0.0.1", 5555),
            "headers": [
                (b"host", b"127.0.0.1:8765"),
                (b"content-type", b"application/json"),
                (b"accept", b"application/json, text/event-stream"),
                (b"content-length", str(len(BODY)).encode()),
                (b"mcp-protocol-version", b"2026-07-28"),
                (b"user-agent", b"python-httpx/0.29"),
            ],
        }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(_message: Any) -> None:
        return None

    figures = {}
    for name, target in (("bare app", app), ("guarded", AccessGuard(app, policy))):
        for _ in range(min(requests, 1000)):
            await target(scope(), receive, send)
        started = time.perf_counter()
        for _ in range(requests):
            await target(scope(), receive, send)
        figures[name] = (time.perf_counter() - started) / requests * 1e6
        print(f"{name:9s}: {figures[name]:6.2f} µs per request")
    print(f"guard    : {figures['guarded'] - figures['bare app']:6.2f} µs per request")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200_000)
    asyncio.run(main(parser.parse_args().requests))
