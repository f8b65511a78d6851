"""What an environment raises that is not an ``Exception`` (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``,
a ``BaseException`` of its own) is its own failure, never the sandbox's.

Through ``harness run`` in a subprocess: a tool that raises one is a tool error the agent sees and the episode goes
on in the same process (its state kept); under ``envscaler`` rules it ends the episode with reward 0 as any raising
tool does; a constructor that raises one is an environment that cannot be loaded (``environment_error``, not
retryable); a check that raises one counts as failed with its error. No episode is an infrastructure error, and
``--retry-errors`` runs nothing again. Through ``harness serve`` (MCP over stdio, a real fastmcp client): each is a
tool error and the session goes on. The sandbox's own call timer (a ``BaseException`` too) still means a timeout.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import orjson
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from harness.mcp.admin import ReadStateRequest, StateResult
from harness.sandbox import JailSpec, SandboxLimits
from harness.schema import Environment, ObservationKind, TerminationReason, ToolCall, Trajectory
from harness.toolspec import derive_tools
from tests.support.cli_process import cli_environment, harness
from tests.support.raising_library import (
    ENV_ID,
    LOADS,
    RAISING_CHECKS,
    RAISING_TOOLS,
    TOOLS_SCENARIO,
    write_raising_library,
)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_raising_library(tmp_path_factory.mktemp("raising") / "library")


def results(run_dir: Path) -> dict[str, Trajectory]:
    lines = (run_dir / "results.jsonl").read_bytes().splitlines()
    return {t.scenario_id: t for t in (Trajectory.model_validate_json(line) for line in lines)}


def test_harness_run_blames_every_base_exception_on_the_environment(library: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = ["run", "--envs", str(library), "--agent", "oracle", "--include-invalid", "--out", str(out)]
    first = harness(run)
    assert first.code == 0, first.stdout + first.stderr
    assert "Traceback" not in first.stderr
    trajectories = results(out)

    tools = trajectories[TOOLS_SCENARIO]
    assert tools.termination is TerminationReason.AGENT_DONE and tools.failure is None
    assert [step.call.name for step in tools.steps] == [*RAISING_TOOLS, "complete"]
    for step, error in zip(tools.steps, RAISING_TOOLS.values(), strict=False):
        observation = step.observation
        assert observation.kind is ObservationKind.TOOL_EXCEPTION, observation
        assert (observation.error or "").startswith(error) and not observation.process_ended, observation
    assert tools.steps[-1].observation.content == {"success": True, "data": 4}  # one process, its state kept
    checks = {result.check_id: result for result in tools.check_results}
    assert checks["done"].passed and checks["calls"].passed
    for check_id, (_, error) in RAISING_CHECKS.items():
        assert not checks[check_id].passed and (checks[check_id].error or "").startswith(error), checks[check_id]
    assert tools.reward is not None and (tools.reward.checks_passed, tools.reward.checks_total) == (2, 6)

    for what, error in LOADS.items():
        loaded = trajectories[f"raises-on-load-{what.replace('_', '-')}"]
        assert loaded.termination is TerminationReason.ENVIRONMENT_ERROR, loaded.termination_detail
        assert loaded.failure is not None and loaded.failure.at_fault == "environment"
        assert (loaded.failure.kind, loaded.failure.retryable) == ("environment", False)
        assert "could not be instantiated" in loaded.failure.detail and error in loaded.failure.detail
        assert loaded.reward is not None and loaded.reward.state_reward == 0.0

    summary = orjson.loads((out / "summary.json").read_bytes())
    assert (summary["overall"]["infra_errors"], summary["overall"]["environment_errors"]) == (0, len(LOADS))
    recorded = (out / "results.jsonl").read_bytes()
    again = harness([*run, "--resume", "--retry-errors"])
    assert again.code == 0 and "0 to run" in again.stdout, again.stdout + again.stderr
    assert (out / "results.jsonl").read_bytes() == recorded


def test_under_envscaler_rules_a_base_exception_ends_the_episode_as_a_raising_tool_does(
    library: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    run = ["run", "--envs", str(library), "--scenario", TOOLS_SCENARIO, "--agent", "oracle", "--include-invalid"]
    finished = harness([*run, "--rules", "envscaler", "--out", str(out)])
    assert finished.code == 0, finished.stdout + finished.stderr
    (trajectory,) = results(out).values()
    assert trajectory.termination is TerminationReason.TOOL_EXCEPTION and trajectory.failure is None
    assert [step.call.name for step in trajectory.steps] == ["exit_now"]
    assert trajectory.reward is not None and trajectory.reward.state_reward == 0.0


async def test_harness_serve_answers_every_base_exception_as_a_tool_error(library: Path) -> None:
    command = [sys.executable, "-m", "harness.cli", "serve", "raising", "--envs", str(library)]
    command += ["--transport", "stdio", "--workers", "1", "--scenario", TOOLS_SCENARIO, "--include-invalid"]
    transport = StdioTransport(command[0], command[1:], env=cli_environment(), keep_alive=False)
    async with Client(transport) as client:
        for name, error in RAISING_TOOLS.items():
            answer = await client.call_tool_mcp(name, {})
            assert answer.is_error is True, name
            text = " ".join(getattr(part, "text", "") for part in answer.content)
            assert error in text and "sandbox" not in text, text
        finished = await client.call_tool("complete", {})
        assert finished.structured_content == {"success": True, "data": 4}
        state = await client.session.send_request(ReadStateRequest(), StateResult)
        assert (state.state["calls"], state.state["done"]) == (4, True)


SWALLOWS = '''
class Swallows:
    def __init__(self, init_config: dict):
        self.spins = 0

    def spin(self) -> dict:
        """Loop until the call timer interrupts it."""
        while True:
            self.spins += 1
'''


async def test_the_call_timer_is_still_a_timeout() -> None:
    environment = Environment(
        id="swallows", name="Swallows", class_name="Swallows", code=SWALLOWS, tools=derive_tools(SWALLOWS, "Swallows")
    )
    async with JailSpec(limits=SandboxLimits(call_timeout_s=0.5, kill_grace_s=1.0)).pool() as pool:
        session = await pool.open_session(environment, {})
        observation, _ = await session.call(ToolCall(id="c", name="spin", arguments={}))
        await session.close()
    assert observation.kind is ObservationKind.TIMEOUT, observation
    assert observation.error == "the tool used up its CPU-time limit of 0.5 s" and not observation.process_ended


def test_harness_run_through_harness_serve_blames_the_environment_too(library: Path, tmp_path: Path) -> None:
    # The same episodes through an MCP server: a raising tool is a tool error, a constructor that raises is the
    # environment's failure (never an infrastructure error the client would re-run).
    server = shlex.join(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "serve",
            ENV_ID,
            "--envs",
            str(library),
            "--transport",
            "stdio",
            "--workers",
            "1",
            "--include-invalid",
        ]
    )
    out = tmp_path / "run"
    run = ["run", "--envs", str(library), "--mcp", server, "--agent", "oracle", "--include-invalid"]
    finished = harness([*run, "--out", str(out)])
    assert finished.code == 0, finished.stdout + finished.stderr
    trajectories = results(out)
    tools = trajectories[TOOLS_SCENARIO]
    assert tools.termination is TerminationReason.AGENT_DONE and tools.failure is None
    for step, error in zip(tools.steps, RAISING_TOOLS.values(), strict=False):
        assert step.observation.kind is ObservationKind.TOOL_EXCEPTION and error in (step.observation.error or "")
    for what in LOADS:
        loaded = trajectories[f"raises-on-load-{what.replace('_', '-')}"]
        assert loaded.termination is TerminationReason.ENVIRONMENT_ERROR, loaded.termination_detail
        assert loaded.failure is not None and (loaded.failure.kind, loaded.failure.retryable) == ("environment", False)
    again = harness([*run, "--out", str(out), "--resume", "--retry-errors"])
    assert again.code == 0 and "0 to run" in again.stdout, again.stdout + again.stderr
