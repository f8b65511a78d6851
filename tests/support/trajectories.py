"""A stored episode of one tool call, for tests of what reads and writes records (the result store, the Hub rows)."""

from __future__ import annotations

from typing import Any

from harness.schema import (
    AgentSettings,
    ModelSettings,
    Observation,
    Step,
    TerminationReason,
    ToolCall,
    Trajectory,
)


def one_call_trajectory(
    episode_id: str,
    observation: Observation,
    *,
    scenario_id: str = "s",
    environment_id: str = "e",
    termination: TerminationReason = TerminationReason.AGENT_DONE,
    **fields: Any,
) -> Trajectory:
    """An oracle's episode whose one step is the call ``observation`` answers (its id and tool name)."""
    call = ToolCall(id=observation.tool_call_id, name=observation.name, arguments={})
    return Trajectory(
        episode_id=episode_id,
        scenario_id=scenario_id,
        environment_id=environment_id,
        mode="nonconv",
        agent=AgentSettings(kind="oracle", model=ModelSettings(model="oracle")),
        steps=[Step(index=0, call=call, observation=observation)],
        termination=termination,
        **fields,
    )
