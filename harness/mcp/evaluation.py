"""Episodes on environments served over MCP: the episode loop of :mod:`harness.episode.loop`, with the tool calls
and the state going to an MCP server, and the final state scored by the scenario's checks in the local
sandbox pool.
"""

from __future__ import annotations

import logging
from typing import Any

from harness.episode.config import EpisodeConfig
from harness.episode.loop import Episode, drive
from harness.mcp.client import AdminStyle, McpTarget, McpToolSession
from harness.rules.protocols import AgentPolicy, UserPolicy
from harness.sandbox import SandboxPool
from harness.schema import (
    Environment,
    Failure,
    FailureKind,
    FailureParty,
    Scenario,
    TerminationReason,
    Timings,
    Trajectory,
    Usage,
    utc_now,
)

logger = logging.getLogger(__name__)


class McpEpisode(Episode):
    """An :class:`~harness.episode.loop.Episode` whose tool calls and state go through an MCP session.

    Everything but the session is the episode loop's own code: the transcript, steps, limits, termination and
    scoring (``score_final_state`` on the state read back over MCP, in the local pool).
    """

    def __init__(self, scenario: Scenario, environment: Environment, *, session: McpToolSession, **kwargs: Any):
        async def open_loaded(_environment: Environment, initial_state: dict[str, Any], seed: int) -> McpToolSession:
            await session.load_state(initial_state, seed=seed)
            return session

        super().__init__(scenario, environment, session_opener=open_loaded, **kwargs)
        self.mcp_session = session

    async def close(self) -> None:
        await super().close()
        await self.mcp_session.close()  # idempotent; covers a start that failed before the hand-over


def environment_for(session: McpToolSession, scenario: Scenario, environment: Environment | None) -> Environment:
    """The record the agent is shown: the library's record when there is one (its introduction and rules),
    always with the tools the server lists; otherwise a record made from the server."""
    if environment is None:
        return session.environment(scenario.environment_id)
    return environment.model_copy(update={"tools": list(session.tools)})


async def run_mcp_episode(
    scenario: Scenario,
    target: McpTarget | str,
    *,
    pool: SandboxPool,
    agent: AgentPolicy,
    config: EpisodeConfig,
    episode_id: str,
    user: UserPolicy | None = None,
    environment: Environment | None = None,
    mode: str = "auto",
    admin: AdminStyle = "auto",
    timeout_s: float = 60.0,
) -> Trajectory:
    """Run one episode against the environment served at ``target`` (a URL or a stdio command).

    The scenario's initial state is loaded through the administrative operation, the agent uses the tools
    the server lists, and the final state read back is scored with the scenario's checks in ``pool``. Like
    :func:`harness.episode.loop.run_episode`, per-episode failures never raise: a server that cannot be reached
    ends the episode as ``infra_error``.
    """
    session = McpToolSession(target, mode=mode, admin=admin, timeout_s=timeout_s)
    try:
        await session.connect()
        served = await session.served_environment_id()
        if served is not None and served != scenario.environment_id:
            raise EnvironmentMismatch(
                f"{session.target} serves environment {served!r}, not {scenario.environment_id!r}"
            )
        record = environment_for(session, scenario, environment)
    except Exception as exc:
        logger.warning("episode %s: MCP server %s unusable: %s", episode_id, session.target, exc)
        await session.close()
        return _unreachable(scenario, agent, user, config, episode_id, f"sandbox: {type(exc).__name__}: {exc}")
    episode = McpEpisode(
        scenario,
        record,
        session=session,
        pool=pool,
        config=config,
        episode_id=episode_id,
        agent_settings=agent.settings,
        user=user,
    )
    return await drive(episode, agent)


class EnvironmentMismatch(ValueError):
    """Scenarios of one environment sent to a server of another."""


async def check_served_environment(
    target: McpTarget | str, environment_ids: set[str], *, timeout_s: float = 60.0
) -> str | None:
    """The environment id the server at TARGET serves, after checking that every scenario's environment is it.

    Raises :class:`EnvironmentMismatch` naming both when they differ; returns None (nothing to check) for a
    server that does not say what it serves. A server that cannot be reached raises ``McpConnectionError``.
    """
    session = McpToolSession(target, timeout_s=timeout_s)
    try:
        await session.connect()
        served = await session.served_environment_id()
    finally:
        await session.close()
    others = sorted(environment_ids - {served}) if served is not None else []
    if others:
        raise EnvironmentMismatch(
            f"{session.target} serves environment {served!r}, but the selected scenarios are of "
            f"{', '.join(map(repr, others))}: select its scenarios with --env {served}"
        )
    return served


def _unreachable(
    scenario: Scenario,
    agent: AgentPolicy,
    user: UserPolicy | None,
    config: EpisodeConfig,
    episode_id: str,
    detail: str,
) -> Trajectory:
    usage = {"agent": Usage()}
    if config.mode == "conv" and user is not None:
        usage["user"] = Usage()
    return Trajectory(
        episode_id=episode_id,
        run_id=config.run_id,
        scenario_id=scenario.id,
        environment_id=scenario.environment_id,
        mode=config.mode,
        trial=config.trial,
        agent=agent.settings,
        user=user.settings if config.mode == "conv" and user is not None else None,
        termination=TerminationReason.INFRA_ERROR,
        termination_detail=detail,
        failure=Failure(at_fault=FailureParty.HARNESS, detail=detail, kind=FailureKind.HARNESS),
        usage=usage,
        timings=Timings(ended_at=utc_now()),
        errors=[detail],
    )
