"""What one client may take from the MCP HTTP server: environment instances (``max_sessions``), request bodies
(``max_request_bytes``), and malformed requests, each answered with the protocol's own error while the server goes on
serving. Real servers on 127.0.0.1, raw requests and the real fastmcp client."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastmcp import Client
from mcp.shared.exceptions import MCPError

from harness.library import load_library
from harness.mcp.access import DEFAULT_MAX_REQUEST_BYTES, AccessPolicy
from harness.mcp.admin import (
    HANDLE_ARGUMENT,
    START_TOOL,
    LoadStateParams,
    LoadStateRequest,
    LoadStateResult,
)
from harness.mcp.client import McpAdminError, McpToolSession
from harness.mcp.credential import make_token
from harness.mcp.server import SERVER_AT_CAPACITY, EnvironmentServer, running_http_server
from harness.sandbox import JailSpec, SandboxLimits, SandboxPool
from harness.schema import Environment, Scenario
from tests.support.mcp_wire import ACCEPT, modern_call, result_of

ENV_ID = "airline_reservations"


@pytest.fixture(scope="module")
def library_env() -> tuple[Environment, list[Scenario]]:
    library = load_library()
    return library.environments[ENV_ID], library.scenarios_for(ENV_ID)


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with JailSpec(workers=1).pool() as sandbox_pool:
        yield sandbox_pool


def make_server(pool: SandboxPool, library_env: tuple[Environment, list[Scenario]], **kwargs: Any) -> EnvironmentServer:
    environment, scenarios = library_env
    return EnvironmentServer(
        environment, initial_state=scenarios[0].initial_state, scenarios=scenarios, pool=pool, **kwargs
    )


# ------------------------------------------------------------------------------------------ instances


async def test_environment_instances_are_bounded_and_a_client_over_the_bound_gets_an_error_not_a_hang(
    pool: SandboxPool, library_env: tuple[Environment, list[Scenario]]
) -> None:
    server = make_server(pool, library_env, max_sessions=2)
    async with running_http_server(server) as url, Client(url) as client:
        first = await client.call_tool(START_TOOL, {})
        second = await client.call_tool(START_TOOL, {})
        refused = await asyncio.wait_for(client.call_tool_mcp(START_TOOL, {}), timeout=60)
        assert refused.is_error is True
        assert "server at capacity: 2 of 2 environment instances in use" in refused.content[0].text
        assert len(server.registry) == 2  # no third jailed process was started

        # A tool used without a handle would make an instance for its session key: refused the same way.
        over = await client.call_tool_mcp(
            "get_customer", {"customer_id": "C-101"}, meta={"io.github.envharness/session": "third"}
        )
        assert over.is_error is True and "server at capacity" in over.content[0].text

        async with Client(url, mode="legacy") as legacy:
            with pytest.raises(MCPError) as capacity:
                await legacy.session.send_request(LoadStateRequest(params=LoadStateParams()), LoadStateResult)
            assert capacity.value.error.code == SERVER_AT_CAPACITY
            assert capacity.value.error.data == {"active": 2, "limit": 2}
        with pytest.raises(McpAdminError, match="server at capacity"):
            async with McpToolSession(url) as session:
                await session.load_state(library_env[1][0].initial_state)

        # Ending an episode frees its slot.
        handle = first.structured_content[HANDLE_ARGUMENT] if first.structured_content else None
        await client.call_tool("end_episode", {HANDLE_ARGUMENT: handle})
        again = await client.call_tool(START_TOOL, {})
        assert again.is_error is False
        assert second.is_error is False and len(server.registry) == 2


async def test_the_sdks_handshake_sessions_are_bounded_by_the_same_number(
    pool: SandboxPool, library_env: tuple[Environment, list[Scenario]]
) -> None:
    server = make_server(pool, library_env, max_sessions=1)
    async with running_http_server(server) as url, Client(url, mode="legacy") as first:
        assert (await first.call_tool("get_customer", {"customer_id": "C-101"})).is_error is False
        with pytest.raises(Exception, match="Too many open sessions"):
            async with Client(url, mode="legacy") as second:
                await second.list_tools()
        assert len(server.registry) == 1


# ------------------------------------------------------------------------------------------ bodies


async def raw_exchange(port: int, head: bytes, body: bytes = b"") -> bytes:
    """Send ``head`` (and ``body``) on a fresh connection and read the answer until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + body)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(1 << 16), timeout=60)
    writer.close()
    return answer


async def test_a_body_over_the_limit_is_refused_from_its_content_length_before_it_is_read(
    pool: SandboxPool, library_env: tuple[Environment, list[Scenario]]
) -> None:
    token = make_token()
    policy = AccessPolicy.for_bind("127.0.0.1", token=token, max_request_bytes=100_000)
    server = make_server(pool, library_env)
    async with running_http_server(server, access=policy) as url:
        port = int(url.split(":")[2].split("/")[0])
        head = (
            f"POST /{token}/mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: {ACCEPT}\r\nContent-Length: 300000000\r\n\r\n"
        ).encode()
        answer = await raw_exchange(port, head)  # the 300 MB are never sent: the answer comes first
        assert answer.startswith(b"HTTP/1.1 413 ")
        assert b"the body of 300,000,000 bytes is over this server's 100,000 bytes" in answer

        chunked = (
            f"POST /{token}/mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: {ACCEPT}\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode()
        chunk = b"x" * 30_000
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(4)) + b"0\r\n\r\n"
        answer = await raw_exchange(port, chunked, chunks)
        assert answer.startswith(b"HTTP/1.1 413 ")
        assert b"the body is over this server's 100,000 bytes" in answer
        assert len(server.registry) == 0

        # Under the limit, the same server answers.
        headers, body = modern_call("get_customer", {"customer_id": "C-101"}, "after")
        async with httpx.AsyncClient(timeout=60) as http:
            answered = await http.post(url, content=body, headers=headers)
        assert result_of(answered.text)["result"]["isError"] is False


async def test_the_default_limit_admits_a_state_as_large_as_the_jail_admits_and_no_more(
    pool: SandboxPool, library_env: tuple[Environment, list[Scenario]]
) -> None:
    assert SandboxLimits().max_state_bytes + (1 << 20) == DEFAULT_MAX_REQUEST_BYTES
    server = make_server(pool, library_env)
    async with running_http_server(server) as url:
        # A 6 MB state: over the MCP SDK's own 4 MiB default, which the server raises to its limit.
        state = copy.deepcopy(library_env[1][0].initial_state)
        for index in range(7):
            state["customers"]["C-101"][f"note_{index}"] = str(index) * 900_000
        async with McpToolSession(url) as session:
            await session.load_state(state)
            assert (await session.state())["customers"]["C-101"] == state["customers"]["C-101"]

        headers = {"content-type": "application/json", "accept": ACCEPT}
        async with httpx.AsyncClient(timeout=120) as http:
            at_limit = await http.post(url, content=b" " * (DEFAULT_MAX_REQUEST_BYTES - 2) + b"[]", headers=headers)
        # Admitted and read: the SDK answers what the body is (a JSON-RPC error), not the guard's 413.
        assert at_limit.status_code == 400 and result_of(at_limit.text)["error"]["code"] < 0
        port = int(url.split(":")[2].split("/")[0])
        path = url.split(str(port), 1)[1]
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: {ACCEPT}\r\nContent-Length: {DEFAULT_MAX_REQUEST_BYTES + 1}\r\n\r\n"
        ).encode()
        assert (await raw_exchange(port, head)).startswith(b"HTTP/1.1 413 ")


# ------------------------------------------------------------------------------------------ malformed


def call_body(params: Any, method: str = "tools/call", request_id: Any = 7) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


MALFORMED: list[tuple[str, bytes]] = [
    ("not JSON", b"{oops"),
    ("empty", b""),
    ("deep JSON", b"[" * 100_000 + b"]" * 100_000),
    ("a huge integer", b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":1' + b"0" * 5000 + b"}}"),
    (
        "a number JSON cannot carry",
        call_body({"name": "add_checked_bags", "arguments": {"reservation_id": "R-1", "bags": 1e999}}),
    ),
    (
        "an integer over 64 bits",
        call_body({"name": "add_checked_bags", "arguments": {"reservation_id": "R-1", "bags": 10**30}}),
    ),
    ("bad UTF-8", b'{"jsonrpc":"2.0","id":1,"method":"tools/\xff\xfe"}'),
    ("an array", b"[1, 2]"),
    ("a string", b'"hello"'),
    ("null", b"null"),
    ("no method", b'{"jsonrpc":"2.0","id":1}'),
    ("a method that is a number", b'{"jsonrpc":"2.0","id":1,"method":5}'),
    ("params a string", call_body("x")),
    ("a tool name that is a number", call_body({"name": 5, "arguments": {}})),
    ("arguments an array", call_body({"name": "get_customer", "arguments": [1]})),
    (
        "arguments deep",
        call_body({"name": "get_customer", "arguments": {"customer_id": json.loads("[" * 150 + "]" * 150)}}),
    ),
    ("an argument of the wrong type", call_body({"name": "get_customer", "arguments": {"customer_id": 101}})),
    ("an unknown tool", call_body({"name": "no_such_tool", "arguments": {}})),
    ("an unknown method", call_body({}, method="no/such")),
    ("load_state with a state that is an array", call_body({"state": [1]}, method="envharness/load_state")),
    ("load_state with a seed that is a string", call_body({"seed": "x"}, method="envharness/load_state")),
    ("load_state with a seed over 64 bits", call_body({"seed": 2**70}, method="envharness/load_state")),
    ("start_episode with a seed over 64 bits", call_body({"name": "start_episode", "arguments": {"seed": 2**64}})),
    ("load_state with an unknown scenario", call_body({"scenarioId": "nope"}, method="envharness/load_state")),
    ("read_state with a handle that is a number", call_body({"handle": 5}, method="envharness/read_state")),
    ("an id that is an object", b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}'),
]


async def test_malformed_requests_get_json_rpc_errors_and_the_server_goes_on_serving(
    pool: SandboxPool, library_env: tuple[Environment, list[Scenario]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    server = make_server(pool, library_env)
    async with running_http_server(server) as url, httpx.AsyncClient(timeout=120) as http:
        headers = {"content-type": "application/json", "accept": ACCEPT}
        opened = await http.post(
            url,
            content=call_body(
                {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
                "initialize",
                0,
            ),
            headers=headers,
        )
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        await http.post(url, content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}', headers=session)
        good_headers, good_body = modern_call("get_customer", {"customer_id": "C-101"}, "good")
        deep_state = copy.deepcopy(library_env[1][0].initial_state)
        deep_state["customers"]["C-deep"] = json.loads('{"a":' * 150 + "{}" + "}" * 150)
        too_deep = (
            "load_state with a state too deep for the jail",
            call_body({"state": deep_state}, "envharness/load_state"),
        )
        for name, body in [*MALFORMED, too_deep]:
            answered = await http.post(url, content=body, headers=session)
            assert answered.status_code in (200, 202, 400), (name, answered.status_code, answered.text[:300])
            if answered.status_code != 202:  # an id that is not a request id: taken for a notification, no reply
                reply = result_of(answered.text)
                error = reply.get("error") or (reply["result"] if reply["result"].get("isError") else None)
                assert error, (name, reply)
            after = await http.post(url, content=good_body, headers=good_headers)
            assert result_of(after.text)["result"]["isError"] is False, name
    problems = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert problems == [], [r.getMessage() for r in problems]
    assert not [r for r in caplog.records if "Traceback" in r.getMessage() or "Exception in ASGI" in r.getMessage()]
