"""MCP 2026-07-28 (sessionless) clients: the handle pattern with fastmcp's default client and the official SDK,
handles hidden from agents the harness drives, the served environment id, and state validation."""

from __future__ import annotations

import asyncio
import copy
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from mcp.shared.exceptions import MCPError

from harness.library import load_library
from harness.mcp import EnvironmentMismatch, check_served_environment
from harness.mcp.admin import (
    END_TOOL,
    HANDLE_ARGUMENT,
    START_TOOL,
    HandleParams,
    LoadStateParams,
    LoadStateRequest,
    LoadStateResult,
    ReadStateRequest,
    StateResult,
)
from harness.mcp.client import McpToolSession
from harness.mcp.server import EnvironmentServer, running_http_server
from harness.sandbox import JailSpec
from harness.schema import Environment, Scenario, ToolCall

ENV_ID = "airline_reservations"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def library_env() -> tuple[Environment, list[Scenario]]:
    library = load_library()
    return library.environments[ENV_ID], library.scenarios_for(ENV_ID)


@pytest.fixture
async def served(library_env: tuple[Environment, list[Scenario]]) -> AsyncIterator[tuple[EnvironmentServer, str]]:
    environment, scenarios = library_env
    async with JailSpec(workers=2).pool() as pool:
        server = EnvironmentServer(
            environment, initial_state=scenarios[0].initial_state, scenarios=scenarios, pool=pool
        )
        async with running_http_server(server) as url:
            yield server, url


async def start(client: Client[Any], **arguments: Any) -> str:
    result = await client.call_tool(START_TOOL, arguments)
    assert result.is_error is False
    assert result.structured_content is not None and result.structured_content["environment_id"] == ENV_ID
    handle = result.structured_content[HANDLE_ARGUMENT]
    assert isinstance(handle, str) and len(handle) >= 20
    return handle


async def test_fastmcp_default_client_runs_two_isolated_episodes_through_handles(
    served: tuple[EnvironmentServer, str], library_env: tuple[Environment, list[Scenario]]
) -> None:
    server, url = served
    environment, scenarios = library_env
    async with Client(url) as client:  # fastmcp's default: the sessionless 2026-07-28 protocol
        assert client.protocol_version == "2026-07-28"
        listed = {tool.name: tool for tool in await client.list_tools()}
        assert set(listed) == {*environment.tool_names, START_TOOL, END_TOOL}
        schema = listed["get_customer"].input_schema
        assert HANDLE_ARGUMENT in schema["properties"] and HANDLE_ARGUMENT not in schema.get("required", [])

        first, second = await asyncio.gather(start(client), start(client, scenario_id=scenarios[1].id))
        assert first != second

        async def episode(handle: str, phone: str) -> dict[str, Any]:
            changed = await client.call_tool(
                "update_contact_phone", {"customer_id": "C-101", "phone": phone, HANDLE_ARGUMENT: handle}
            )
            assert changed.is_error is False
            read = await client.call_tool("get_customer", {"customer_id": "C-101", HANDLE_ARGUMENT: handle})
            assert read.structured_content is not None
            return read.structured_content["data"]

        one, two = await asyncio.gather(episode(first, "+1-555-0001"), episode(second, "+1-555-0002"))
        assert (one["phone"], two["phone"]) == ("+1-555-0001", "+1-555-0002")
        state = await client.session.send_request(ReadStateRequest(params=HandleParams(handle=second)), StateResult)
        expected = copy.deepcopy(scenarios[1].initial_state["customers"]["C-101"])
        expected["phone"] = "+1-555-0002"
        assert state.state["customers"]["C-101"] == expected
        assert len(server.registry) == 2

        ended = await client.call_tool(END_TOOL, {HANDLE_ARGUMENT: first})
        assert ended.structured_content == {"closed": True}
        after = await client.call_tool_mcp("get_customer", {"customer_id": "C-101", HANDLE_ARGUMENT: first})
        assert after.is_error is True and START_TOOL in after.content[0].text
        forged = await client.call_tool_mcp("get_customer", {"customer_id": "C-101", HANDLE_ARGUMENT: "guess"})
        assert forged.is_error is True and "unknown or released" in forged.content[0].text
        assert len(server.registry) == 1


async def test_legacy_clients_see_the_declared_tools_only(
    served: tuple[EnvironmentServer, str], library_env: tuple[Environment, list[Scenario]]
) -> None:
    _server, url = served
    environment, _ = library_env
    async with Client(url, mode="legacy") as client:
        listed = {tool.name: tool for tool in await client.list_tools()}
        assert set(listed) == set(environment.tool_names)
        for spec in environment.tools:
            assert listed[spec.name].input_schema == spec.function.parameters


async def test_official_sdk_client_uses_the_handle_pattern(served: tuple[EnvironmentServer, str]) -> None:
    from mcp import Client as SdkClient

    _server, url = served
    async with SdkClient(url) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert START_TOOL in names
        started = await client.call_tool(START_TOOL, {})
        handle = started.structured_content[HANDLE_ARGUMENT]
        changed = await client.call_tool(
            "update_contact_phone", {"customer_id": "C-101", "phone": "+1-555-0003", HANDLE_ARGUMENT: handle}
        )
        assert changed.is_error is False
        read = await client.call_tool("get_customer", {"customer_id": "C-101", HANDLE_ARGUMENT: handle})
        assert read.structured_content["data"]["phone"] == "+1-555-0003"
        fresh = await client.call_tool(START_TOOL, {})
        other = await client.call_tool(
            "get_customer", {"customer_id": "C-101", HANDLE_ARGUMENT: fresh.structured_content[HANDLE_ARGUMENT]}
        )
        assert other.structured_content["data"]["phone"] == "+1-212-555-0101"


async def test_the_harness_client_hides_the_handle_from_the_agent(
    served: tuple[EnvironmentServer, str], library_env: tuple[Environment, list[Scenario]]
) -> None:
    server, url = served
    environment, scenarios = library_env
    async with McpToolSession(url) as session:  # default mode: sessionless when the server is
        assert {spec.name for spec in session.tools} == set(environment.tool_names)
        for spec in session.tools:
            assert spec.function.parameters == environment.tool(spec.name).function.parameters
        assert await session.served_environment_id() == ENV_ID
        await session.load_state(scenarios[2].initial_state)
        observation, diff = await session.call(
            ToolCall(id="c1", name="update_contact_phone", arguments={"customer_id": "C-101", "phone": "+1-555-0004"})
        )
        assert observation.ok and diff
        assert (await session.state())["customers"]["C-101"]["phone"] == "+1-555-0004"
        assert len(server.registry) == 1
    assert len(server.registry) == 0  # released on close


async def test_loaded_states_are_validated_against_the_environment(
    served: tuple[EnvironmentServer, str], library_env: tuple[Environment, list[Scenario]]
) -> None:
    _server, url = served
    _, scenarios = library_env
    async with Client(url, mode="legacy") as client:
        for bad, message in (
            ({"orders": {}}, "unknown keys"),
            ({**scenarios[0].initial_state, "customers": ["not", "an", "object"]}, "'customers' is array"),
        ):
            with pytest.raises(MCPError, match=message):
                await client.session.send_request(LoadStateRequest(params=LoadStateParams(state=bad)), LoadStateResult)
        good = LoadStateParams(state=scenarios[3].initial_state)
        assert (await client.session.send_request(LoadStateRequest(params=good), LoadStateResult)).environment_id


async def test_scenarios_of_another_environment_are_refused(served: tuple[EnvironmentServer, str]) -> None:
    _server, url = served
    assert await check_served_environment(url, {ENV_ID}) == ENV_ID
    with pytest.raises(EnvironmentMismatch, match="banking"):
        await check_served_environment(url, {ENV_ID, "banking"})

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from harness.cli import main; main()", "run", "--agent", "oracle", "--model",
        "oracle", "--mcp", url, "--env", "banking", "--limit", "2", "--mode", "nonconv", "--out", "/nonexistent/x",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )  # fmt: skip
    _stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=300)
    assert process.returncode == 2
    text = stderr.decode()
    assert f"serves environment {ENV_ID!r}" in text and "--env airline_reservations" in text.replace("\n", " ")
    assert "Traceback" not in text
