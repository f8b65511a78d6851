"""``harness serve --transport stdio`` spawned as a real process and driven by a real fastmcp client."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import typer
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from typer.testing import CliRunner

from harness.cli.serve import register
from harness.library import load_library
from harness.mcp.admin import ReadStateRequest, StateResult
from harness.mcp.client import McpTarget, McpToolSession
from harness.mcp.server import server_instructions
from harness.sandbox import JailSpec, SandboxPool
from harness.schema import ObservationKind, ToolCall

ENV_ID = "retail_orders"


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with JailSpec(workers=1).pool() as sandbox_pool:
        yield sandbox_pool


def serve_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli.serve", ENV_ID, "--transport", "stdio", "--workers", "1", *extra]


def server_processes() -> list[int]:
    """Our child processes running the serve command (to prove none outlives its client)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"harness.cli.serve" in cmdline and int(stat[1]) == os.getpid():
            found.append(int(entry.name))
    return found


async def test_fastmcp_client_lists_and_calls_tools_over_stdio() -> None:
    library = load_library()
    environment = library.environments[ENV_ID]
    scenario = library.scenarios_for(ENV_ID)[1]
    command = serve_command("--scenario", scenario.id)
    transport = StdioTransport(command[0], command[1:], keep_alive=False)
    async with Client(transport) as client:
        assert client.instructions == server_instructions(environment)
        listed = {tool.name: tool for tool in await client.list_tools()}
        assert set(listed) == set(environment.tool_names)
        for spec in environment.tools:
            assert listed[spec.name].input_schema == spec.function.parameters
            assert listed[spec.name].description == spec.function.description

        action = scenario.reference_actions[0]
        result = await client.call_tool(action.name, action.arguments)
        assert result.is_error is False
        assert isinstance(result.structured_content, dict) and result.structured_content["success"] is True

        unknown = await client.call_tool_mcp("no_such_tool", {})
        assert unknown.is_error is True

        state = await client.session.send_request(ReadStateRequest(), StateResult)
        assert set(state.state) == set(scenario.initial_state)
    assert server_processes() == []


async def test_tool_session_over_stdio_matches_the_direct_runtime(pool: SandboxPool) -> None:
    library = load_library()
    environment = library.environments[ENV_ID]
    scenario = next(s for s in library.scenarios_for(ENV_ID) if len(s.reference_actions) >= 3)
    calls = [
        ToolCall(id=f"c{i}", name=a.name, arguments=dict(a.arguments)) for i, a in enumerate(scenario.reference_actions)
    ]
    calls.append(ToolCall(id="bad", name=calls[0].name, arguments=None, raw_arguments="{not json"))

    async with McpToolSession(McpTarget(command=tuple(serve_command()))) as session:
        assert [t.name for t in session.tools] == environment.tool_names
        await session.load_state(scenario.initial_state)
        over_mcp = [await session.call(call) for call in calls]
        final_over_mcp = await session.state()

    direct = await pool.open_session(environment, scenario.initial_state)
    try:
        expected = [await direct.call(call) for call in calls]
        final_direct = await direct.state()
    finally:
        await direct.close()

    assert final_over_mcp == final_direct != scenario.initial_state
    for (observation, diff), (want, want_diff) in zip(over_mcp, expected, strict=True):
        assert observation == want
        assert diff == want_diff
    assert over_mcp[-1][0].kind is ObservationKind.INVALID_ARGUMENTS
    assert server_processes() == []


def test_serve_refuses_an_unknown_environment_or_scenario() -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    unknown_env = runner.invoke(app, ["no_such_env"])
    assert unknown_env.exit_code == 2
    assert "retail_orders" in unknown_env.output  # lists the known ones
    unknown_scenario = runner.invoke(app, [ENV_ID, "--scenario", "nope"])
    assert unknown_scenario.exit_code == 2
    assert "no scenario 'nope'" in unknown_scenario.output
