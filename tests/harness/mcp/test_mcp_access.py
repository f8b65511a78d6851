"""The door of the MCP HTTP server (``harness.mcp.access``): Host, Origin and the credential checked before any
route runs. A real server on 127.0.0.1, raw requests as an attacker sends them, and the real fastmcp client; each
refusal is shown to have left no trace on the server (no environment instance, no MCP session, no tool run)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from harness.library import load_library
from harness.mcp.access import AccessError, AccessPolicy, split_host
from harness.mcp.admin import SESSION_META_KEY
from harness.mcp.client import McpToolSession
from harness.mcp.credential import make_token
from harness.mcp.server import EnvironmentServer, running_http_server
from harness.sandbox import JailSpec
from harness.schema import ToolCall
from tests.support.mcp_wire import ACCEPT, INTRUDER_PHONE, initialize_body, intruder_call, result_of

ENV_ID = "airline_reservations"
ORIGINAL_PHONE = "+1-212-555-0101"


@dataclass
class Served:
    server: EnvironmentServer
    url: str
    token: str

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def plain(self) -> str:
        """The endpoint without the credential."""
        return f"http://127.0.0.1:{self.port}/mcp"


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    library = load_library()
    environment = library.environments[ENV_ID]
    scenarios = library.scenarios_for(ENV_ID)
    token = make_token()
    async with JailSpec(workers=1).pool() as pool:
        server = EnvironmentServer(
            environment, initial_state=scenarios[0].initial_state, scenarios=scenarios, pool=pool
        )
        policy = AccessPolicy.for_bind("127.0.0.1", token=token, origins=["http://localhost:3000"])
        async with running_http_server(server, access=policy) as url:
            yield Served(server, url, token)


async def phone_in(served: Served, session_key: str) -> str:
    """C-101's phone in the session ``session_key``, read with the credential (a fresh instance if none was made)."""
    async with Client(served.url) as client:
        result = await client.call_tool_mcp(
            "get_customer", {"customer_id": "C-101"}, meta={SESSION_META_KEY: session_key}
        )
    assert result.structured_content is not None
    phone: str = result.structured_content["data"]["phone"]
    return phone


async def test_the_intruders_call_runs_when_it_carries_the_credential(served: Served) -> None:
    """The raw call the refusals below are made of really changes the state when the credential is there."""
    headers, body = intruder_call("with-token")
    async with httpx.AsyncClient(timeout=60) as http:
        answered = await http.post(served.url, content=body, headers=headers)
    assert answered.status_code == 200, answered.text
    assert result_of(answered.text)["result"]["isError"] is False
    assert "client:with-token" in served.server.registry
    assert await phone_in(served, "with-token") == INTRUDER_PHONE


@pytest.mark.parametrize(
    ("where", "extra_headers"),
    [
        ("no credential", {}),
        ("a wrong token in the path", {}),
        ("the token one character short in the path", {}),
        ("a wrong bearer token", {"authorization": "Bearer " + "x" * 43}),
        ("the token under another scheme", {"authorization": "Basic TOKEN"}),
        ("the token in the query string", {}),
    ],
)
async def test_a_request_without_the_credential_is_refused_and_runs_nothing(
    served: Served, where: str, extra_headers: dict[str, str]
) -> None:
    url = {
        "a wrong token in the path": f"http://127.0.0.1:{served.port}/{'y' * 43}/mcp",
        "the token one character short in the path": f"http://127.0.0.1:{served.port}/{served.token[:-1]}/mcp",
        "the token in the query string": f"{served.plain}?token={served.token}",
    }.get(where, served.plain)
    headers, body = intruder_call()
    headers.update({k: v.replace("TOKEN", served.token) for k, v in extra_headers.items()})
    async with httpx.AsyncClient(timeout=60) as http:
        refused = await http.post(url, content=body, headers=headers)
        handshake = await http.post(url, content=initialize_body(), headers={**headers, "mcp-protocol-version": ""})
    assert (refused.status_code, handshake.status_code) == (401, 401), where
    assert refused.headers["www-authenticate"] == "Bearer"
    assert "needs its credential" in refused.text
    assert served.token not in refused.text
    assert len(served.server.registry) == 0  # no environment instance was made, so no tool ran
    assert "mcp-session-id" not in handshake.headers
    assert await phone_in(served, "intruder") == ORIGINAL_PHONE


@pytest.mark.parametrize(
    "host",
    ["rebind.evil.example:{port}", "rebind.evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}", ""],
)
async def test_a_dns_rebinding_host_is_refused_even_with_the_credential(served: Served, host: str) -> None:
    headers, body = intruder_call()
    headers["host"] = host.format(port=served.port)
    async with httpx.AsyncClient(timeout=60) as http:
        refused = await http.post(served.url, content=body, headers=headers)
    assert refused.status_code == 403
    assert "is not a host this server answers" in refused.text or "no Host header" in refused.text
    assert len(served.server.registry) == 0
    assert await phone_in(served, "intruder") == ORIGINAL_PHONE


@pytest.mark.parametrize(
    "host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}", "[::1]", "127.0.0.1"]
)
async def test_the_loopback_names_are_answered_with_or_without_the_port(served: Served, host: str) -> None:
    headers, body = intruder_call(f"host-{host}")
    headers["host"] = host.format(port=served.port)
    async with httpx.AsyncClient(timeout=60) as http:
        answered = await http.post(served.url, content=body, headers=headers)
    assert answered.status_code == 200, answered.text


@pytest.mark.parametrize(
    ("origin", "admitted"),
    [
        (None, True),  # a client that is not a browser
        ("http://127.0.0.1:{port}", True),  # a page of the server's own origin
        ("http://localhost:{port}", True),
        ("https://127.0.0.1:{port}", True),
        ("http://localhost:3000", True),  # named by --allow-origin
        ("http://127.0.0.1:3000", False),  # another port of this machine, not named
        ("http://localhost:3001", False),
        ("http://evil.example", False),
        ("http://evil.example:{port}", False),
        ("https://rebind.evil.example:{port}", False),
        ("null", False),  # a sandboxed frame or a file:// page
        ("file://", False),
        ("http://127.0.0.1:{port}/path", False),
        ("chrome-extension://abcdef", False),
    ],
)
async def test_browser_origins_are_admitted_only_from_the_servers_own_origin_or_allowed_ones(
    served: Served, origin: str | None, admitted: bool
) -> None:
    headers, body = intruder_call("from-a-page")
    if origin is not None:
        headers["origin"] = origin.format(port=served.port)
    async with httpx.AsyncClient(timeout=60) as http:
        answered = await http.post(served.url, content=body, headers=headers)
    if admitted:
        assert answered.status_code == 200, answered.text
        assert await phone_in(served, "from-a-page") == INTRUDER_PHONE
    else:
        assert answered.status_code == 403
        assert "may not use this server" in answered.text
        assert len(served.server.registry) == 0
        assert await phone_in(served, "from-a-page") == ORIGINAL_PHONE


async def test_refusals_are_logged_at_warning_level_without_the_credential(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="harness.mcp.access")
    headers, body = intruder_call()
    async with httpx.AsyncClient(timeout=60) as http:
        await http.post(served.url, content=body, headers={**headers, "host": "rebind.evil.example"})
        await http.post(served.plain, content=body, headers=headers)
    refusals = [r for r in caplog.records if r.name == "harness.mcp.access"]
    assert [r.levelname for r in refusals] == ["WARNING", "WARNING"]
    messages = [r.getMessage() for r in refusals]
    assert "rebind.evil.example" in messages[0] and "needs its credential" in messages[1]
    assert all("\n" not in m and served.token not in m for m in messages)


async def test_fastmcp_clients_connect_with_the_credential_in_the_path_or_in_the_header(served: Served) -> None:
    async with Client(served.url) as modern, Client(served.url, mode="legacy") as legacy:
        assert {t.name for t in await modern.list_tools()} >= {"get_customer", "start_episode"}
        assert (await legacy.call_tool("get_customer", {"customer_id": "C-101"})).is_error is False
    header = StreamableHttpTransport(served.plain, headers={"Authorization": f"Bearer {served.token}"})
    async with Client(header, mode="legacy") as client:
        assert (await client.call_tool("get_customer", {"customer_id": "C-101"})).is_error is False
    async with McpToolSession(served.url) as session:
        observation, _ = await session.call(ToolCall(id="c", name="get_customer", arguments={"customer_id": "C-101"}))
        assert observation.content is not None
    with pytest.raises(Exception, match="needs its credential"):
        async with Client(served.plain) as client:
            await client.list_tools()


def test_policy_parts() -> None:
    assert split_host("LocalHost:8765") == ("localhost", 8765)
    assert split_host("[::1]:80") == ("::1", 80)
    assert split_host("::1") == ("::1", None)
    assert split_host("a b") is None and split_host("host:port") is None and split_host("[::1") is None
    policy = AccessPolicy.for_bind("127.0.0.1", token="t" * 43, hosts=["box.lan", "[fe80::1]:9"])
    assert policy.allowed_hosts == {"127.0.0.1", "localhost", "::1", "box.lan", "fe80::1"}
    assert "t" * 43 not in repr(policy)
    assert AccessPolicy.for_bind("10.1.2.3", token=None).allowed_hosts >= {"10.1.2.3"}
    assert "0.0.0.0" not in AccessPolicy.for_bind("0.0.0.0", token=None).allowed_hosts
    with pytest.raises(AccessError, match="--allow-host"):
        AccessPolicy.for_bind("127.0.0.1", token=None, hosts=["evil host"])
    with pytest.raises(AccessError, match="--allow-origin"):
        AccessPolicy.for_bind("127.0.0.1", token=None, origins=["localhost:3000"])
    assert policy.credential_path("/" + "t" * 43 + "/mcp", None) == "/mcp"
    assert policy.credential_path("/" + "t" * 43, None) == "/"
    assert policy.credential_path("/mcp", "bearer " + "t" * 43) == "/mcp"
    assert policy.credential_path("/mcp", None) is None
    assert AccessPolicy(token=None).credential_path("/mcp", None) == "/mcp"


async def test_the_guard_sits_in_front_of_every_route(served: Served) -> None:
    """Even a path no route serves is refused before routing: nothing tells an intruder what exists."""
    async with httpx.AsyncClient(timeout=60) as http:
        unknown = await http.get(f"http://127.0.0.1:{served.port}/nothing-here")
        known = await http.get(f"http://127.0.0.1:{served.port}/{served.token}/nothing-here")
        delete = await http.delete(served.plain, headers={"accept": ACCEPT})
    assert unknown.status_code == 401 and delete.status_code == 401
    assert known.status_code == 404
