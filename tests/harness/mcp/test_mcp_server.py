"""``harness serve`` over streamable HTTP: tools as MCP tools, one instance per MCP session, admin methods
outside the tool listing, idle eviction. Real servers on 127.0.0.1 and real fastmcp clients."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastmcp import Client
from mcp.shared.exceptions import MCPError

from harness.library import load_library
from harness.mcp.admin import (
    OBSERVATION_META_KEY,
    SESSION_META_KEY,
    LoadStateParams,
    LoadStateRequest,
    LoadStateResult,
    ReadStateRequest,
    StateResult,
)
from harness.mcp.client import McpToolSession
from harness.mcp.server import EnvironmentServer, running_http_server, server_instructions
from harness.mcp.sessions import SessionExpired, SessionRegistry
from harness.sandbox import JailSpec, SandboxPool
from harness.schema import Environment, Scenario, ToolCall

ENV_ID = "airline_reservations"


@pytest.fixture(scope="module")
def library_env() -> tuple[Environment, list[Scenario]]:
    library = load_library()
    return library.environments[ENV_ID], library.scenarios_for(ENV_ID)


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with JailSpec(workers=2).pool() as sandbox_pool:
        yield sandbox_pool


@pytest.fixture
async def served(
    pool: SandboxPool, library_env: tuple[Environment, list[Scenario]]
) -> AsyncIterator[tuple[EnvironmentServer, str]]:
    environment, scenarios = library_env
    server = EnvironmentServer(environment, initial_state=scenarios[0].initial_state, scenarios=scenarios, pool=pool)
    async with running_http_server(server) as url:
        yield server, url


def calls_of(scenario: Scenario, prefix: str) -> list[ToolCall]:
    return [
        ToolCall(id=f"{prefix}_{i}", name=action.name, arguments=dict(action.arguments))
        for i, action in enumerate(scenario.reference_actions)
    ]


async def direct_final_state(pool: SandboxPool, environment: Environment, state: dict[str, Any], calls: list[ToolCall]):
    session = await pool.open_session(environment, state)
    try:
        observations = [(await session.call(call))[0] for call in calls]
        return await session.state(), observations
    finally:
        await session.close()


async def test_two_concurrent_http_sessions_keep_their_own_state(
    served: tuple[EnvironmentServer, str], pool: SandboxPool, library_env: tuple[Environment, list[Scenario]]
) -> None:
    server, url = served
    environment, scenarios = library_env
    state_a = scenarios[0].initial_state
    state_b = copy.deepcopy(state_a)
    state_b["customers"]["C-101"]["phone"] = "+1-000-000-0000"
    state_b["customers"]["C-101"]["travel_credit"] = 75.0
    calls_a = calls_of(scenarios[0], "a")
    calls_b = [
        ToolCall(id="b_phone", name="get_customer", arguments={"customer_id": "C-101"}),
        *calls_of(scenarios[1], "b"),
    ]

    async with McpToolSession(url) as session_a, McpToolSession(url) as session_b:
        await asyncio.gather(session_a.load_state(state_a), session_b.load_state(state_b))
        seen_a: list[Any] = []
        seen_b: list[Any] = []
        for index in range(max(len(calls_a), len(calls_b))):
            pair = []
            if index < len(calls_a):
                pair.append((session_a, calls_a[index], seen_a))
            if index < len(calls_b):
                pair.append((session_b, calls_b[index], seen_b))
            results = await asyncio.gather(*(session.call(call) for session, call, _ in pair))
            for (_, _, seen), (observation, _diff) in zip(pair, results, strict=True):
                seen.append(observation)
        assert len(server.registry) == 2
        final_a, final_b = await asyncio.gather(session_a.state(), session_b.state())

    expected_a, direct_a = await direct_final_state(pool, environment, state_a, calls_a)
    expected_b, direct_b = await direct_final_state(pool, environment, state_b, calls_b)
    assert final_a == expected_a
    assert final_b == expected_b
    assert final_a != state_a and final_b != state_b  # both sessions really changed their instance
    assert final_a["customers"]["C-101"]["phone"] == "+1-212-555-0101"
    assert final_b["customers"]["C-101"]["phone"] == "+1-000-000-0000"
    assert seen_b[0].content["data"]["phone"] == "+1-000-000-0000"
    assert [(o.kind, o.content) for o in seen_a] == [(o.kind, o.content) for o in direct_a]
    assert [(o.kind, o.content) for o in seen_b] == [(o.kind, o.content) for o in direct_b]


async def test_fastmcp_client_lists_and_calls_tools_over_streamable_http(
    served: tuple[EnvironmentServer, str], pool: SandboxPool, library_env: tuple[Environment, list[Scenario]]
) -> None:
    _server, url = served
    environment, scenarios = library_env
    async with Client(url, mode="legacy") as client:
        assert client.instructions == server_instructions(environment)
        assert environment.rules[0] in (client.instructions or "")
        listed = {tool.name: tool for tool in await client.list_tools()}
        assert set(listed) == set(environment.tool_names)
        for spec in environment.tools:
            assert listed[spec.name].description == spec.function.description
            assert listed[spec.name].input_schema == spec.function.parameters

        result = await client.call_tool("get_customer", {"customer_id": "C-101"})
        assert result.is_error is False
        assert result.structured_content == {
            "success": True,
            "data": scenarios[0].initial_state["customers"]["C-101"],
        }

        bad = await client.call_tool_mcp("get_customer", {"customer": "C-101"})
        assert bad.is_error is True
        _, direct = await direct_final_state(
            pool,
            environment,
            scenarios[0].initial_state,
            [ToolCall(id="x", name="get_customer", arguments={"customer": "C-101"})],
        )
        assert bad.meta is not None
        assert bad.meta[OBSERVATION_META_KEY]["kind"] == direct[0].kind.value == "invalid_arguments"
        assert bad.meta[OBSERVATION_META_KEY]["error"] == direct[0].error
        assert direct[0].error in bad.content[0].text

        failed = await client.call_tool_mcp("get_customer", {"customer_id": "C-999"})
        assert failed.is_error is True
        assert failed.meta is not None and failed.meta[OBSERVATION_META_KEY]["kind"] == "tool_error"


async def test_admin_operations_are_not_tools(
    served: tuple[EnvironmentServer, str], library_env: tuple[Environment, list[Scenario]]
) -> None:
    _server, url = served
    environment, scenarios = library_env
    async with Client(url, mode="legacy") as client:
        names = {tool.name for tool in await client.list_tools()}
        assert names == set(environment.tool_names)
        assert not any("state" in name and ("load" in name or "read" in name) for name in names)
        assert await client.list_resources() == []
        refused = await client.call_tool_mcp("envharness/read_state", {})
        assert refused.is_error is True

        changed = copy.deepcopy(scenarios[0].initial_state)
        changed["customers"]["C-101"]["membership"] = "silver"
        params = LoadStateParams(state=changed)
        loaded = await client.session.send_request(LoadStateRequest(params=params), LoadStateResult)
        assert loaded.environment_id == ENV_ID
        state = await client.session.send_request(ReadStateRequest(), StateResult)
        assert state.state["customers"]["C-101"]["membership"] == "silver"

        by_id = LoadStateParams(scenario_id=scenarios[1].id)
        await client.session.send_request(LoadStateRequest(params=by_id), LoadStateResult)
        state = await client.session.send_request(ReadStateRequest(), StateResult)
        assert state.state == scenarios[1].initial_state

        with pytest.raises(MCPError, match="unknown scenario"):
            await client.session.send_request(
                LoadStateRequest(params=LoadStateParams(scenario_id="nope")), LoadStateResult
            )


async def test_sessionless_http_requests_need_a_session_key(served: tuple[EnvironmentServer, str]) -> None:
    server, url = served
    async with Client(url) as client:  # negotiates the sessionless 2026-07-28 protocol
        refused = await client.call_tool_mcp("get_customer", {"customer_id": "C-101"})
        assert refused.is_error is True
        assert "session" in refused.content[0].text
        assert len(server.registry) == 0

        first = await client.call_tool_mcp(
            "update_contact_phone",
            {"customer_id": "C-101", "phone": "+1-555-0000"},
            meta={SESSION_META_KEY: "key-one"},
        )
        assert first.is_error is False
        other = await client.call_tool_mcp("get_customer", {"customer_id": "C-101"}, meta={SESSION_META_KEY: "key-two"})
        same = await client.call_tool_mcp("get_customer", {"customer_id": "C-101"}, meta={SESSION_META_KEY: "key-one"})
        assert other.structured_content is not None and same.structured_content is not None
        assert other.structured_content["data"]["phone"] == "+1-212-555-0101"
        assert same.structured_content["data"]["phone"] == "+1-555-0000"
        assert len(server.registry) == 2


async def test_instance_is_released_when_its_mcp_session_ends(served: tuple[EnvironmentServer, str]) -> None:
    server, url = served
    async with Client(url, mode="legacy") as client:
        await client.call_tool("get_customer", {"customer_id": "C-101"})
        assert len(server.registry) == 1
    for _ in range(200):  # the session's teardown runs on the server after the client's DELETE
        if len(server.registry) == 0:
            break
        await asyncio.sleep(0.02)
    assert len(server.registry) == 0


async def test_idle_instances_are_evicted_and_then_refused(
    pool: SandboxPool, library_env: tuple[Environment, list[Scenario]]
) -> None:
    environment, scenarios = library_env
    registry = SessionRegistry(pool, environment, scenarios[0].initial_state, idle_timeout_s=30.0)
    async with registry:
        async with registry.use("busy") as session:
            await session.call(ToolCall(id="1", name="get_customer", arguments={"customer_id": "C-101"}))
            # an instance in use is never evicted, however long the call takes
            assert await registry.evict_idle(now=float("inf")) == []
        async with registry.use("fresh"):
            pass
        entry_time = registry._entries["fresh"].last_used
        assert await registry.evict_idle(now=entry_time + 10) == []
        assert sorted(await registry.evict_idle(now=entry_time + 3600)) == ["busy", "fresh"]
        assert len(registry) == 0
        with pytest.raises(SessionExpired, match="evicted after 30 s"):
            async with registry.use("fresh"):
                pass
        await registry.load("fresh", scenarios[0].initial_state)  # loading a state revives the key
        async with registry.use("fresh") as session:
            assert (await session.state())["customers"] == scenarios[0].initial_state["customers"]
    assert len(registry) == 0


async def test_an_evicted_session_gets_a_clear_tool_error(
    served: tuple[EnvironmentServer, str],
) -> None:
    server, url = served
    async with Client(url, mode="legacy") as client:
        await client.call_tool("get_customer", {"customer_id": "C-101"})
        [key] = list(server.registry._entries)
        await server.registry.evict_idle(now=server.registry._entries[key].last_used + 10_000)
        expired = await client.call_tool_mcp("get_customer", {"customer_id": "C-101"})
        assert expired.is_error is True
        assert "evicted" in expired.content[0].text
