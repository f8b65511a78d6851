"""Episodes through MCP: the oracle's reference actions reach the same reward, steps and transcript as the same
actions through the direct runtime; a server written elsewhere in EnvFactory's style is evaluated through its
hidden load/save tools; an unreachable server ends the episode as an infrastructure error."""

from __future__ import annotations

import asyncio
import copy
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from fastmcp import FastMCP

from agents.oracle import OracleAgent
from harness.episode.config import EpisodeConfig
from harness.episode.loop import run_episode
from harness.library import load_library
from harness.mcp.client import McpToolSession
from harness.mcp.evaluation import run_mcp_episode
from harness.mcp.server import EnvironmentServer, running_http_server
from harness.sandbox import JailSpec, SandboxPool
from harness.schema import Check, ReferenceAction, Scenario, TerminationReason, Trajectory


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with JailSpec(workers=2).pool() as sandbox_pool:
        yield sandbox_pool


def comparable(trajectory: Trajectory) -> dict[str, Any]:
    """Everything but the episode id and the clock readings."""
    return trajectory.model_dump(
        mode="json", exclude={"episode_id": True, "timings": True, "steps": {"__all__": {"duration_ms"}}}
    )


@pytest.mark.parametrize("scenario_id", ["banking-002", "airline_reservations-001"])
async def test_oracle_episode_over_mcp_matches_the_direct_runtime(pool: SandboxPool, scenario_id: str) -> None:
    library = load_library()
    scenario = next(s for s in library.scenarios if s.id == scenario_id)
    environment = library.environments[scenario.environment_id]
    config = EpisodeConfig(mode="nonconv", seed=0)

    direct = await run_episode(
        scenario, environment, pool=pool, agent=OracleAgent(scenario), config=config, episode_id="direct"
    )
    server = EnvironmentServer(environment, pool=pool)
    async with running_http_server(server) as url:
        over_mcp = await run_mcp_episode(
            scenario,
            url,
            pool=pool,
            agent=OracleAgent(scenario),
            config=config,
            episode_id="mcp",
            environment=environment,
        )
        assert len(server.registry) == 0  # the episode released its instance

    assert direct.reward is not None and direct.reward.success
    assert over_mcp.termination is TerminationReason.AGENT_DONE
    assert over_mcp.reward == direct.reward
    assert over_mcp.check_results == direct.check_results
    assert len(over_mcp.steps) == len(scenario.reference_actions)
    assert over_mcp.final_state_diff == direct.final_state_diff != []
    assert comparable(over_mcp) == comparable(direct)


async def test_environment_record_can_come_from_the_server(pool: SandboxPool) -> None:
    library = load_library()
    scenario = next(s for s in library.scenarios if s.id == "retail_orders-002")
    environment = library.environments[scenario.environment_id]
    server = EnvironmentServer(environment, pool=pool)
    async with running_http_server(server) as url:
        async with McpToolSession(url) as session:
            record = session.environment(scenario.environment_id)
        assert record.tool_names == environment.tool_names
        assert environment.introduction in record.introduction
        trajectory = await run_mcp_episode(
            scenario, url, pool=pool, agent=OracleAgent(scenario), config=EpisodeConfig(), episode_id="e1"
        )
    direct = await run_episode(
        scenario, environment, pool=pool, agent=OracleAgent(scenario), config=EpisodeConfig(), episode_id="e0"
    )
    assert trajectory.environment_id == scenario.environment_id
    assert trajectory.reward == direct.reward
    assert [step.observation for step in trajectory.steps] == [step.observation for step in direct.steps]


async def test_an_unreachable_server_ends_the_episode_as_an_infrastructure_error(pool: SandboxPool) -> None:
    library = load_library()
    scenario = library.scenarios[0]
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    trajectory = await run_mcp_episode(
        scenario,
        f"http://127.0.0.1:{port}/mcp",
        pool=pool,
        agent=OracleAgent(scenario),
        config=EpisodeConfig(),
        episode_id="down",
        timeout_s=5.0,
    )
    assert trajectory.termination is TerminationReason.INFRA_ERROR
    assert trajectory.reward is None
    assert trajectory.errors and "connect" in trajectory.errors[0]
    assert trajectory.failure is not None and trajectory.failure.at_fault == "harness"


# ------------------------------------------------------------------------ a server written elsewhere


def envfactory_style_server() -> FastMCP:
    """A shop served the way EnvFactory serves its environments: one state object for the process, with
    ``load_scenario`` / ``save_scenario`` tools that the evaluator hides from the agent."""
    server: FastMCP = FastMCP("shop")
    database: dict[str, Any] = {"orders": {}}

    @server.tool
    def load_scenario(scenario: dict[str, Any]) -> dict[str, Any]:
        """Replace the database."""
        database.clear()
        database.update(copy.deepcopy(scenario))
        return {"success": True}

    @server.tool
    def save_scenario() -> dict[str, Any]:
        """The database."""
        return copy.deepcopy(database)

    @server.tool
    def get_order(order_id: str) -> dict[str, Any]:
        """Look up one order."""
        order = database["orders"].get(order_id)
        if order is None:
            return {"success": False, "error": f"No order {order_id}."}
        return {"success": True, "data": order}

    @server.tool
    def cancel_order(order_id: str) -> dict[str, Any]:
        """Cancel a pending order."""
        order = database["orders"].get(order_id)
        if order is None or order["status"] != "pending":
            return {"success": False, "error": f"Order {order_id} cannot be cancelled."}
        order["status"] = "cancelled"
        return {"success": True, "message": f"Order {order_id} cancelled."}

    return server


@pytest.fixture
async def envfactory_url() -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        envfactory_style_server().http_app(), log_level="warning", lifespan="on", ws="none", access_log=False
    )
    http = uvicorn.Server(config)
    task = asyncio.create_task(http.serve(sockets=[sock]))
    try:
        while not http.started:
            assert not task.done()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        http.should_exit = True
        await task
        sock.close()


async def test_an_envfactory_style_server_is_evaluated_through_its_hidden_state_tools(
    pool: SandboxPool, envfactory_url: str
) -> None:
    scenario = Scenario(
        id="shop-001",
        environment_id="shop",
        initial_state={"orders": {"O-1": {"status": "pending"}, "O-2": {"status": "shipped"}}},
        task="Please cancel my order O-1.",
        checks=[
            Check(
                id="cancelled",
                description="O-1 is cancelled",
                source="def check(initial_state, final_state):\n"
                "    return final_state['orders']['O-1']['status'] == 'cancelled'\n",
            ),
            Check(
                id="untouched",
                description="O-2 is unchanged",
                source="def check(initial_state, final_state):\n"
                "    return final_state['orders']['O-2'] == initial_state['orders']['O-2']\n",
            ),
        ],
        reference_actions=[
            ReferenceAction(name="get_order", arguments={"order_id": "O-1"}),
            ReferenceAction(name="cancel_order", arguments={"order_id": "O-2"}),
            ReferenceAction(name="cancel_order", arguments={"order_id": "O-1"}),
        ],
    )
    trajectory = await run_mcp_episode(
        scenario, envfactory_url, pool=pool, agent=OracleAgent(scenario), config=EpisodeConfig(), episode_id="ef"
    )
    assert [tool.name for tool in trajectory.tools] == ["get_order", "cancel_order"]
    assert trajectory.termination is TerminationReason.AGENT_DONE
    assert trajectory.reward is not None and trajectory.reward.success
    assert trajectory.reward.delta_reward == 1.0  # "cancelled" was false at reset
    assert [step.observation.kind.value for step in trajectory.steps] == ["ok", "tool_error", "ok"]
    assert trajectory.steps[2].state_diff[0].path == ["orders", "O-1", "status"]
    assert trajectory.steps[1].state_diff == []
