"""The episode loop on the real sandbox, driven by policies that need no model (the oracle, scripted turns)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.oracle import ORACLE_FINAL_MESSAGE, OracleAgent
from harness.episode.config import EpisodeConfig
from harness.episode.dispatch import open_tool_session
from harness.episode.loop import Episode, classify_failure, drive, run_episode
from harness.episode.tool_messages import observation_content
from harness.library import load_library
from harness.rules.protocols import AgentPolicyError, AgentTurn, UserTurn, find_stop_token
from harness.sandbox import EnvironmentFailed, EnvironmentLoadError, JailSpec, SandboxError, SandboxLimits, SandboxPool
from harness.schema import (
    AgentSettings,
    Check,
    Environment,
    Failure,
    FailureKind,
    FailureParty,
    ModelSettings,
    Observation,
    ObservationKind,
    ReferenceAction,
    Scenario,
    TerminationReason,
    ToolCall,
    Trajectory,
    UserProfile,
)
from harness.toolspec import derive_tools

SHOP_CODE = '''
class Shop:
    def __init__(self, init_config: dict):
        self.orders: dict = init_config.get("orders", {})

    def get_order(self, order_id: str) -> dict:
        """Look up one order.

        Args:
            order_id: The order id, e.g. "O-1".
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order {order_id}."}
        return {"success": True, "data": order}

    def cancel_order(self, order_id: str) -> dict:
        """Cancel a pending order.

        Args:
            order_id: The order to cancel.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"No order {order_id}."}
        if order["status"] != "pending":
            return {"success": False, "error": f"Order {order_id} is {order['status']}."}
        order["status"] = "cancelled"
        return {"success": True, "message": f"Order {order_id} cancelled."}
'''


def shop_environment(code: str = SHOP_CODE) -> Environment:
    return Environment(
        id="shop",
        name="Shop",
        introduction="You are the assistant of a small web shop.",
        rules=["Only pending orders can be cancelled."],
        class_name="Shop",
        code=code,
        tools=derive_tools(code, "Shop"),
    )


def shop_scenario() -> Scenario:
    return Scenario(
        id="shop-001",
        environment_id="shop",
        initial_state={"orders": {"O-1": {"status": "pending"}, "O-2": {"status": "shipped"}}},
        task="Please cancel my order O-1.",
        user_profile=UserProfile(
            persona="Ana, a customer.", goal="Have order O-1 cancelled.", withheld_info=["The order id is O-1."]
        ),
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
            ReferenceAction(name="cancel_order", arguments={"order_id": "O-1"}),
        ],
    )


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with JailSpec(workers=2).pool() as sandbox_pool:
        yield sandbox_pool


def assert_well_formed(trajectory: Trajectory) -> None:
    """Every assistant tool call is answered by a tool message with its id, in order, and steps match."""
    Trajectory.model_validate_json(trajectory.model_dump_json())
    pending: list[str] = []
    answered: list[str] = []
    for message in trajectory.messages:
        if message["role"] == "assistant":
            assert not pending, f"tool calls left unanswered: {pending}"
            pending = [call["id"] for call in message.get("tool_calls") or []]
            assert len(set(pending)) == len(pending)
        elif message["role"] == "tool":
            assert pending and message["tool_call_id"] == pending.pop(0)
            json.loads(message["content"])
            answered.append(message["tool_call_id"])
    assert answered == [step.call.id for step in trajectory.steps]
    assert [step.index for step in trajectory.steps] == list(range(len(trajectory.steps)))
    assert len(set(answered)) == len(answered)


class ScriptedAgent:
    """An agent policy that plays fixed turns (test double of the protocol, no model)."""

    def __init__(self, turns: list[AgentTurn]) -> None:
        self.turns = turns
        self.settings = AgentSettings(kind="scripted", model=ModelSettings(model="scripted"))

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        if not self.turns:
            raise AgentPolicyError("script exhausted")
        return self.turns.pop(0)


class ScriptedUser:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.views: list[list[dict[str, Any]]] = []
        self.settings = AgentSettings(kind="scripted_user", role="user", model=ModelSettings(model="scripted"))

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn:
        self.views.append([dict(m) for m in messages])
        text = self.lines.pop(0)
        return UserTurn(text=text, stop_token=find_stop_token(text))


class RaisingAgent:
    settings = AgentSettings(kind="raising", model=ModelSettings(model="raising"))

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        raise KeyError("a bug in the policy")


def call_turn(*calls: ToolCall) -> AgentTurn:
    return AgentTurn(message={"role": "assistant", "content": None}, tool_calls=list(calls))


def text_turn(text: str) -> AgentTurn:
    return AgentTurn(message={"role": "assistant", "content": text})


# ---------------------------------------------------------------------------------------------- the oracle


async def test_oracle_nonconv_reaches_success_and_records_everything(pool: SandboxPool) -> None:
    scenario = shop_scenario()
    trajectory = await run_episode(
        scenario,
        shop_environment(),
        pool=pool,
        agent=OracleAgent(scenario),
        config=EpisodeConfig(mode="nonconv", seed=3, trial=2, run_id="r1"),
        episode_id="ep-1",
    )
    assert trajectory.termination is TerminationReason.AGENT_DONE
    assert trajectory.reward is not None and trajectory.reward.success
    assert [r.check_id for r in trajectory.check_results] == ["cancelled", "untouched"]
    assert [m["role"] for m in trajectory.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert "You are the assistant of a small web shop." in trajectory.messages[0]["content"]
    assert "Only pending orders can be cancelled." in trajectory.messages[0]["content"]
    assert trajectory.messages[1]["content"] == scenario.task
    assert trajectory.messages[-1]["content"] == ORACLE_FINAL_MESSAGE
    assert [s.call.name for s in trajectory.steps] == ["get_order", "cancel_order"]
    assert [s.turn for s in trajectory.steps] == [0, 1]
    assert trajectory.steps[0].state_diff == []
    assert trajectory.steps[1].state_diff[0].path == ["orders", "O-1", "status"]
    assert trajectory.steps[1].observation.content == {"success": True, "message": "Order O-1 cancelled."}
    assert [(d.path, d.before, d.after) for d in trajectory.final_state_diff] == [
        (["orders", "O-1", "status"], "pending", "cancelled")
    ]
    assert (trajectory.episode_id, trajectory.run_id, trajectory.trial) == ("ep-1", "r1", 2)
    assert trajectory.agent.kind == "oracle" and trajectory.user is None
    assert [t.name for t in trajectory.tools] == ["get_order", "cancel_order"]
    assert set(trajectory.usage) == {"agent"} and trajectory.usage["agent"].requests == 0
    assert trajectory.timings.ended_at is not None
    assert trajectory.timings.wall_seconds >= trajectory.timings.tool_seconds > 0
    assert trajectory.timings.scoring_seconds > 0
    assert trajectory.errors == []
    assert_well_formed(trajectory)


async def test_oracle_reaches_success_on_seed_scenarios_in_both_modes(pool: SandboxPool) -> None:
    library = load_library("datasets/seed")
    per_environment: dict[str, Scenario] = {}
    for scenario in library.scenarios:
        if scenario.environment_id in library.environments:
            per_environment.setdefault(scenario.environment_id, scenario)
    assert per_environment, "the seed library has no scenarios"
    for scenario in per_environment.values():
        environment = library.environments[scenario.environment_id]
        nonconv = await run_episode(
            scenario,
            environment,
            pool=pool,
            agent=OracleAgent(scenario),
            config=EpisodeConfig(mode="nonconv"),
            episode_id=f"{scenario.id}-n",
        )
        assert nonconv.termination is TerminationReason.AGENT_DONE, nonconv.errors
        assert nonconv.reward is not None and nonconv.reward.success, nonconv.check_results
        assert len(nonconv.steps) == len(scenario.reference_actions)
        user = ScriptedUser(["Hello, I need help.", "Thanks! ###STOP###"])
        conv = await run_episode(
            scenario,
            environment,
            pool=pool,
            agent=OracleAgent(scenario),
            user=user,
            config=EpisodeConfig(mode="conv"),
            episode_id=f"{scenario.id}-c",
        )
        assert conv.termination is TerminationReason.USER_STOP
        assert conv.reward is not None and conv.reward.success
        assert_well_formed(conv)


async def test_max_steps_ends_the_episode_and_it_is_still_scored(pool: SandboxPool) -> None:
    scenario = shop_scenario()
    trajectory = await run_episode(
        scenario,
        shop_environment(),
        pool=pool,
        agent=OracleAgent(scenario),
        config=EpisodeConfig(mode="nonconv", max_steps=1),
        episode_id="ep-max",
    )
    assert trajectory.termination is TerminationReason.MAX_STEPS
    assert trajectory.termination_detail == "step limit 1 reached"
    assert len(trajectory.steps) == 1
    assert trajectory.reward is not None and not trajectory.reward.success
    assert trajectory.reward.checks_passed == 1
    assert EpisodeConfig(mode="conv").step_limit == 40 and EpisodeConfig().step_limit == 30


# ------------------------------------------------------------------------------------- conversational mode


async def test_conv_user_opens_sees_only_text_and_stop_token_ends(pool: SandboxPool) -> None:
    scenario = shop_scenario()
    user = ScriptedUser(["Hi, I want to cancel an order.", "It is O-1.", "Great, thanks! ###STOP###"])
    agent = ScriptedAgent(
        [
            text_turn("Sure. Which order?"),
            call_turn(ToolCall(id="", name="get_order", arguments={"order_id": "O-1"})),
            call_turn(ToolCall(id="", name="cancel_order", arguments={"order_id": "O-1"})),
            text_turn("Order O-1 is cancelled."),
        ]
    )
    trajectory = await run_episode(
        scenario,
        shop_environment(),
        pool=pool,
        agent=agent,
        user=user,
        config=EpisodeConfig(mode="conv"),
        episode_id="ep-conv",
    )
    assert trajectory.termination is TerminationReason.USER_STOP
    assert trajectory.termination_detail == "###STOP###"
    assert trajectory.reward is not None and trajectory.reward.success
    assert trajectory.messages[1] == {"role": "user", "content": "Hi, I want to cancel an order."}
    assert trajectory.messages[-1] == {"role": "user", "content": "Great, thanks! ###STOP###"}
    assert [s.call.id for s in trajectory.steps] == ["call_1_0", "call_2_0"]
    assert trajectory.user is not None and trajectory.user.kind == "scripted_user"
    assert set(trajectory.usage) == {"agent", "user"}
    last_view = user.views[-1]
    assert last_view[0]["role"] == "system" and "Have order O-1 cancelled." in last_view[0]["content"]
    assert [m["role"] for m in last_view[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert last_view[-1]["content"] == "Order O-1 is cancelled."
    assert all("tool_calls" not in m and m["role"] != "tool" for m in last_view)
    assert_well_formed(trajectory)


@pytest.mark.parametrize("token", ["###TRANSFER###", "###OUT-OF-SCOPE###"])
async def test_transfer_and_out_of_scope_are_stops(pool: SandboxPool, token: str) -> None:
    scenario = shop_scenario()
    trajectory = await run_episode(
        scenario,
        shop_environment(),
        pool=pool,
        agent=ScriptedAgent([text_turn("I cannot help with that.")]),
        user=ScriptedUser(["Can you fix my fridge?", token]),
        config=EpisodeConfig(mode="conv"),
        episode_id="ep-stop",
    )
    assert trajectory.termination is TerminationReason.USER_STOP
    assert trajectory.termination_detail == token
    assert trajectory.reward is not None and not trajectory.reward.success


async def test_conv_max_steps_when_the_user_never_stops(pool: SandboxPool) -> None:
    trajectory = await run_episode(
        shop_scenario(),
        shop_environment(),
        pool=pool,
        agent=ScriptedAgent([text_turn("Hello?"), text_turn("Anything else?"), text_turn("Still there?")]),
        user=ScriptedUser(["Hi.", "Hmm.", "Well.", "So."]),
        config=EpisodeConfig(mode="conv", max_steps=3),
        episode_id="ep-conv-max",
    )
    assert trajectory.termination is TerminationReason.MAX_STEPS
    assert [m["role"] for m in trajectory.messages][1:] == ["user", "assistant"] * 3 + ["user"]


# ------------------------------------------------------------------------------- errors are observations


async def test_unknown_tools_and_bad_arguments_become_observations(pool: SandboxPool) -> None:
    agent = ScriptedAgent(
        [
            call_turn(
                ToolCall(id="a", name="teleport_order", arguments={}),
                ToolCall(id="a", name="get_order", arguments=None, raw_arguments='{"order_id": "O-1"'),
                ToolCall(id="", name="get_order", arguments={"order_id": 7}),
                ToolCall(id="d", name="get_order", arguments={"order_id": "O-404"}),
            ),
            call_turn(ToolCall(id="e", name="cancel_order", arguments={"order_id": "O-1"})),
            text_turn("Done."),
        ]
    )
    trajectory = await run_episode(
        shop_scenario(),
        shop_environment(),
        pool=pool,
        agent=agent,
        config=EpisodeConfig(),
        episode_id="ep-errors",
    )
    assert trajectory.termination is TerminationReason.AGENT_DONE
    kinds = [s.observation.kind for s in trajectory.steps]
    assert kinds == [
        ObservationKind.UNKNOWN_TOOL,
        ObservationKind.INVALID_ARGUMENTS,
        ObservationKind.INVALID_ARGUMENTS,
        ObservationKind.TOOL_ERROR,
        ObservationKind.OK,
    ]
    # the repeated id "a" and the missing id were replaced, and the recorded message agrees
    assert [s.call.id for s in trajectory.steps] == ["a", "call_0_1", "call_0_2", "d", "e"]
    assert trajectory.steps[1].call.raw_arguments == '{"order_id": "O-1"'
    unknown = json.loads(trajectory.messages[3]["content"])
    assert unknown["success"] is False and unknown["error_type"] == "unknown_tool"
    assert "teleport_order" in unknown["error"]
    assert json.loads(trajectory.messages[6]["content"]) == {"success": False, "error": "No order O-404."}
    assert trajectory.reward is not None and trajectory.reward.success
    assert_well_formed(trajectory)


async def test_unreadable_turns_are_fed_back_then_end_as_agent_error(pool: SandboxPool) -> None:
    def unreadable(n: int) -> AgentTurn:
        return AgentTurn(
            message={"role": "assistant", "content": f"<tool_call>{{broken {n}</tool_call>"},
            parse_error="tool_call block 1: not valid JSON",
            feedback={"role": "user", "content": f"Error {n}: write valid JSON."},
        )

    recovering = ScriptedAgent(
        [
            unreadable(1),
            call_turn(ToolCall(id="x", name="cancel_order", arguments={"order_id": "O-1"})),
            unreadable(2),
            unreadable(3),
            text_turn("Done."),
        ]
    )
    trajectory = await run_episode(
        shop_scenario(),
        shop_environment(),
        pool=pool,
        agent=recovering,
        config=EpisodeConfig(max_consecutive_parse_errors=3),
        episode_id="ep-parse-ok",
    )
    assert trajectory.termination is TerminationReason.AGENT_DONE
    assert {"role": "user", "content": "Error 1: write valid JSON."} in trajectory.messages
    assert len(trajectory.errors) == 3

    failing = ScriptedAgent([unreadable(1), unreadable(2), unreadable(3)])
    trajectory = await run_episode(
        shop_scenario(),
        shop_environment(),
        pool=pool,
        agent=failing,
        config=EpisodeConfig(max_consecutive_parse_errors=3),
        episode_id="ep-parse-fail",
    )
    assert trajectory.termination is TerminationReason.AGENT_ERROR
    assert trajectory.termination_detail is not None and "3 unreadable turns" in trajectory.termination_detail
    assert trajectory.reward is not None and not trajectory.reward.success


async def test_a_raising_policy_ends_as_agent_error_and_is_scored(pool: SandboxPool) -> None:
    trajectory = await run_episode(
        shop_scenario(),
        shop_environment(),
        pool=pool,
        agent=RaisingAgent(),
        config=EpisodeConfig(),
        episode_id="ep-bug",
    )
    assert trajectory.termination is TerminationReason.AGENT_ERROR
    assert "KeyError" in (trajectory.termination_detail or "")
    assert trajectory.reward is not None and trajectory.reward.checks_total == 2


@pytest.mark.parametrize(("rules", "scored"), [("harness", True), ("envscaler", False)])
async def test_an_environment_that_cannot_load_fails_its_episode(pool: SandboxPool, rules: str, scored: bool) -> None:
    broken = SHOP_CODE.replace('self.orders: dict = init_config.get("orders", {})', "self.orders = 1 / 0")
    trajectory = await run_episode(
        shop_scenario(),
        shop_environment(broken),
        pool=pool,
        agent=OracleAgent(shop_scenario()),
        config=EpisodeConfig(rules=rules),
        episode_id="ep-load",
    )
    assert trajectory.termination is TerminationReason.ENVIRONMENT_ERROR
    assert trajectory.failure is not None and trajectory.failure.at_fault is FailureParty.ENVIRONMENT
    assert "ZeroDivisionError" in trajectory.failure.detail
    assert not trajectory.infra_error and trajectory.check_results == []
    if scored:  # the harness's rules: a failed episode
        assert trajectory.reward is not None and (trajectory.reward.state_reward, trajectory.reward.success) == (
            0,
            False,
        )
    else:  # upstream EnvScaler's reset raises: no reward
        assert trajectory.reward is None
    assert trajectory.errors and "sandbox" in trajectory.errors[0]


def sandbox_worker_pids() -> set[int]:
    """Child processes of this test process (the sandbox workers), read from /proc."""
    pids: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):
            pids.update(int(pid) for pid in (task / "children").read_text().split())
    return pids


async def test_a_sandbox_that_keeps_failing_is_an_infra_error() -> None:
    before = sandbox_worker_pids()
    async with JailSpec(workers=1, limits=SandboxLimits(max_recoveries=0)).pool() as pool:
        scenario = shop_scenario()
        episode = Episode(
            scenario,
            shop_environment(),
            pool=pool,
            config=EpisodeConfig(),
            episode_id="ep-killed",
            agent_settings=OracleAgent(scenario).settings,
        )
        await episode.start()
        await episode.apply(call_turn(ToolCall(id="a", name="cancel_order", arguments={"order_id": "O-1"})))
        workers = sandbox_worker_pids() - before
        assert workers
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        while sandbox_worker_pids() & workers:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        try:
            await episode.apply(call_turn(ToolCall(id="b", name="get_order", arguments={"order_id": "O-1"})))
        except Exception as exc:
            episode.fail(exc)
        trajectory = await episode.finish()
    assert trajectory.termination is TerminationReason.INFRA_ERROR
    assert "SandboxError" in (trajectory.termination_detail or "")
    assert trajectory.failure is not None and trajectory.failure.at_fault is FailureParty.HARNESS
    assert trajectory.reward is None and trajectory.check_results == []
    assert [s.call.id for s in trajectory.steps] == ["a"]


def test_failure_classification() -> None:
    assert classify_failure(SandboxError("x"), "sandbox")[0] is TerminationReason.INFRA_ERROR
    assert classify_failure(AgentPolicyError("x"), "agent")[0] is TerminationReason.AGENT_ERROR
    assert classify_failure(ValueError("x"), "agent")[0] is TerminationReason.AGENT_ERROR
    assert classify_failure(ValueError("x"), "user")[0] is TerminationReason.INFRA_ERROR
    assert classify_failure(EnvironmentLoadError("x"), "sandbox")[0] is TerminationReason.ENVIRONMENT_ERROR
    assert classify_failure(EnvironmentFailed("x"), "sandbox").failure == Failure(
        at_fault=FailureParty.ENVIRONMENT,
        detail="sandbox: EnvironmentFailed: x",
        kind=FailureKind.ENVIRONMENT,
        retryable=False,
    )


def test_observation_content_is_json_for_every_kind() -> None:
    ok = Observation(tool_call_id="a", name="t", content={"success": True, "data": [1]})
    assert json.loads(observation_content(ok)) == {"success": True, "data": [1]}
    timeout = Observation(tool_call_id="a", name="t", kind=ObservationKind.TIMEOUT, error="took too long")
    assert json.loads(observation_content(timeout)) == {
        "success": False,
        "error": "took too long",
        "error_type": "timeout",
    }


# ------------------------------------------------------------------------------------ the episode object


async def test_episode_can_be_driven_turn_by_turn(pool: SandboxPool) -> None:
    scenario = shop_scenario()
    episode = Episode(
        scenario,
        shop_environment(),
        pool=pool,
        config=EpisodeConfig(seed=1),
        episode_id="ep-manual",
        agent_settings=AgentSettings(kind="external", model=ModelSettings(model="trainer")),
    )
    await episode.start()
    assert [m["role"] for m in episode.messages] == ["system", "user"]
    observations = await episode.apply(call_turn(ToolCall(id="t1", name="cancel_order", arguments={"order_id": "O-1"})))
    assert observations[0].ok and not episode.done
    await episode.apply(text_turn("Cancelled."))
    assert episode.done
    with pytest.raises(RuntimeError, match="already ended"):
        await episode.apply(text_turn("again"))
    trajectory = await episode.finish()
    assert trajectory.reward is not None and trajectory.reward.success
    assert trajectory.messages[2]["tool_calls"][0]["id"] == "t1"


async def test_conv_mode_needs_a_user(pool: SandboxPool) -> None:
    with pytest.raises(ValueError, match="user policy"):
        Episode(
            shop_scenario(),
            shop_environment(),
            pool=pool,
            config=EpisodeConfig(mode="conv"),
            episode_id="x",
            agent_settings=OracleAgent(shop_scenario()).settings,
        )


async def test_every_trajectory_carries_the_composite_reward():
    from agents.oracle import OracleAgent
    from harness.episode.config import EpisodeConfig
    from harness.episode.loop import run_episode
    from harness.library import load_library
    from harness.sandbox import JailSpec

    library = load_library()
    scenario = library.scenarios[0]
    async with JailSpec(workers=1).pool() as pool:
        trajectory = await run_episode(
            scenario,
            library.environments[scenario.environment_id],
            pool=pool,
            agent=OracleAgent(scenario),
            config=EpisodeConfig(mode="nonconv"),
            episode_id="composite",
        )
    reward = trajectory.reward
    assert reward is not None and reward.success
    assert reward.trajectory_reward == 1.0 and reward.length_penalty == 0.0 and reward.composite == 1.0


# ------------------------------------------------------------------- the session opens while the models speak


class SignallingUser(ScriptedUser):
    """A scripted user that says when it is first asked; ``fails`` makes its first answer an error."""

    def __init__(self, lines: list[str], fails: bool = False) -> None:
        super().__init__(lines)
        self.asked = asyncio.Event()
        self.fails = fails

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn:
        self.asked.set()
        if self.fails:
            raise ConnectionError("the user simulator's endpoint is down")
        return await super().respond(messages)


class SignallingAgent(ScriptedAgent):
    def __init__(self, turns: list[AgentTurn]) -> None:
        super().__init__(turns)
        self.asked = asyncio.Event()

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AgentTurn:
        self.asked.set()
        return await super().act(messages, tools)


class GatedSessions:
    """A session opener that opens only once ``gate`` is set (a test that would otherwise wait forever fails after
    30 s), and remembers the sessions it opened and whether they were closed."""

    def __init__(self, pool: SandboxPool, gate: asyncio.Event, fails: bool = False) -> None:
        self.pool, self.gate, self.fails = pool, gate, fails
        self.opened: list[Any] = []
        self.closed = 0

    async def __call__(self, environment: Environment, initial_state: dict[str, Any], seed: int) -> Any:
        await asyncio.wait_for(self.gate.wait(), 30)
        if self.fails:
            raise EnvironmentLoadError("environment 'shop' could not be instantiated: boom")
        session = await open_tool_session(self.pool, environment, initial_state, seed=seed)
        real_close = session.close

        async def close() -> None:
            self.closed += 1
            await real_close()

        session.close = close  # type: ignore[method-assign]
        self.opened.append(session)
        return session


def conversation(pool: SandboxPool, user: ScriptedUser, opener: GatedSessions) -> Episode:
    scenario = shop_scenario()
    return Episode(
        scenario,
        shop_environment(),
        pool=pool,
        config=EpisodeConfig(mode="conv"),
        episode_id="ep-overlap",
        agent_settings=AgentSettings(kind="scripted", model=ModelSettings(model="scripted")),
        user=user,
        session_opener=opener,
    )


async def test_a_run_episode_opens_its_session_while_the_user_and_the_agent_are_first_asked(
    pool: SandboxPool,
) -> None:
    """The session opens only after the agent's first turn was asked for: the episode still plays and scores
    as before (without the overlap it would wait for the session before asking anyone, and fail after 30 s)."""
    user = SignallingUser(["Please cancel O-1.", "Thanks! ###STOP###"])
    agent = SignallingAgent(
        [
            call_turn(ToolCall(id="", name="cancel_order", arguments={"order_id": "O-1"})),
            text_turn("Order O-1 is cancelled."),
        ]
    )
    opener = GatedSessions(pool, agent.asked)
    trajectory = await drive(conversation(pool, user, opener), agent)
    assert trajectory.termination is TerminationReason.USER_STOP, trajectory.termination_detail
    assert trajectory.reward is not None and trajectory.reward.success
    assert [m["role"] for m in trajectory.messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert len(opener.opened) == 1 and opener.closed >= 1
    assert_well_formed(trajectory)


async def test_start_returns_with_the_session_open_after_asking_the_user_meanwhile(pool: SandboxPool) -> None:
    user = SignallingUser(["Please cancel O-1."])
    opener = GatedSessions(pool, user.asked)
    episode = conversation(pool, user, opener)
    await episode.start()
    assert len(opener.opened) == 1 and episode.messages[-1] == {"role": "user", "content": "Please cancel O-1."}
    observations = await episode.apply(call_turn(ToolCall(id="c", name="get_order", arguments={"order_id": "O-1"})))
    assert observations[0].ok
    await episode.close()
    assert opener.closed == 1


async def test_an_environment_that_fails_while_the_models_speak_ends_the_episode_as_its_failure(
    pool: SandboxPool,
) -> None:
    """The open fails after the user's opening line and the agent's first turn were asked for: the episode ends
    as the environment's failure, with those two turns recorded, and no tool runs."""
    user = SignallingUser(["Please cancel O-1.", "Thanks! ###STOP###"])
    agent = SignallingAgent([call_turn(ToolCall(id="", name="cancel_order", arguments={"order_id": "O-1"}))])
    opener = GatedSessions(pool, agent.asked, fails=True)
    trajectory = await drive(conversation(pool, user, opener), agent)
    assert trajectory.termination is TerminationReason.ENVIRONMENT_ERROR
    assert "boom" in (trajectory.termination_detail or "")
    assert [m["role"] for m in trajectory.messages] == ["system", "user", "assistant"]
    assert trajectory.steps == [] and opener.opened == []


async def test_a_user_that_fails_while_the_session_opens_leaves_no_session_open(pool: SandboxPool) -> None:
    user = SignallingUser(["never said"], fails=True)
    opener = GatedSessions(pool, user.asked)
    trajectory = await drive(conversation(pool, user, opener), SignallingAgent([]))
    assert trajectory.termination is TerminationReason.INFRA_ERROR
    assert "endpoint is down" in (trajectory.termination_detail or "")
    assert len(opener.opened) == 1 and opener.closed == 1
