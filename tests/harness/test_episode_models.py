"""The episode loop with model-backed policies: through the mock OpenAI server over real HTTP, with scripted
in-process models, and with the embedded local model."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agents.factory import build_agent, build_user
from agents.prompted import PromptedAgent
from agents.user_simulator import UserSimulator
from harness.episode.config import EpisodeConfig
from harness.episode.loop import run_episode
from harness.library import load_library
from harness.llm import LLMClient, RetryPolicy, register_python_model
from harness.rules.protocols import STOP, AgentPolicyError
from harness.sandbox import JailSpec, SandboxPool
from harness.schema import ModelSettings, ObservationKind, Scenario, TerminationReason, Trajectory
from tests.doubles.mock_openai import Fault, MockOpenAIServer
from tests.harness.test_episode import assert_well_formed, shop_environment, shop_scenario

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    async with JailSpec(workers=2).pool() as sandbox_pool:
        yield sandbox_pool


@pytest.fixture
async def server() -> AsyncIterator[MockOpenAIServer]:
    async with MockOpenAIServer() as mock:
        yield mock


@pytest.fixture
async def client() -> AsyncIterator[LLMClient]:
    llm = LLMClient(retry=RetryPolicy(max_attempts=2, initial_backoff=0.0, jitter=0.0), timeout=30.0)
    try:
        yield llm
    finally:
        await llm.aclose()


def mock_model(server: MockOpenAIServer, name: str, **extra: Any) -> ModelSettings:
    """Settings that reach the mock server's policy ``name`` as an OpenAI-compatible endpoint."""
    return ModelSettings(model=f"openai/{name}", temperature=0.0, extra={"api_base": server.base_url, **extra})


def seed_scenario() -> tuple[Scenario, Any]:
    library = load_library("datasets/seed")
    for scenario in library.scenarios:
        if scenario.environment_id in library.environments and scenario.user_profile is not None:
            return scenario, library.environments[scenario.environment_id]
    raise AssertionError("the seed library has no conversational scenario")


# ------------------------------------------------------------------------- end to end through real HTTP


async def test_both_modes_through_the_mock_server_reach_success(
    pool: SandboxPool, server: MockOpenAIServer, client: LLMClient
) -> None:
    scenario, environment = seed_scenario()
    server.register_replay(scenario.id, [a.model_dump() for a in scenario.reference_actions])
    agent = build_agent("function_calling", mock_model(server, f"replay/{scenario.id}"), client)

    nonconv = await run_episode(
        scenario, environment, pool=pool, agent=agent, config=EpisodeConfig(mode="nonconv"), episode_id="n"
    )
    assert nonconv.termination is TerminationReason.AGENT_DONE, nonconv.errors
    assert nonconv.reward is not None and nonconv.reward.success, nonconv.check_results
    assert [s.call.name for s in nonconv.steps] == [a.name for a in scenario.reference_actions]
    assert [s.call.id for s in nonconv.steps][:2] == ["call_1", "call_2"]  # the model's ids are kept
    assert nonconv.usage["agent"].requests == len(scenario.reference_actions) + 1
    assert nonconv.usage["agent"].prompt_tokens > 0
    assert_well_formed(nonconv)
    sent = server.chat_requests(f"replay/{scenario.id}")[-1].body or {}
    assert [t["function"]["name"] for t in sent["tools"]] == [t.name for t in environment.tools]

    opening = "Hello, I need some help with my account."
    server.register_user(scenario.id, [opening])
    user = build_user(mock_model(server, f"user/{scenario.id}"), client)
    conv = await run_episode(
        scenario,
        environment,
        pool=pool,
        agent=agent,
        user=user,
        config=EpisodeConfig(mode="conv"),
        episode_id="c",
    )
    assert conv.termination is TerminationReason.USER_STOP and conv.termination_detail == STOP
    assert conv.reward is not None and conv.reward.success
    assert conv.messages[1] == {"role": "user", "content": opening}
    assert conv.usage["user"].requests == 2
    assert conv.user is not None and conv.user.kind == "simulated_user"
    assert_well_formed(conv)
    for record in server.chat_requests(f"user/{scenario.id}"):
        body = record.body or {}
        assert "tools" not in body or not body["tools"]
        assert all(m["role"] in ("system", "user", "assistant") for m in body["messages"])
        assert all(not m.get("tool_calls") for m in body["messages"])


async def test_bad_tool_names_and_broken_arguments_from_the_model_are_observations(
    pool: SandboxPool, server: MockOpenAIServer, client: LLMClient
) -> None:
    for policy, kind in (
        ("bad-tool", ObservationKind.UNKNOWN_TOOL),
        ("broken-args", ObservationKind.INVALID_ARGUMENTS),
    ):
        agent = build_agent("function_calling", mock_model(server, policy), client)
        trajectory = await run_episode(
            shop_scenario(), shop_environment(), pool=pool, agent=agent, config=EpisodeConfig(), episode_id=policy
        )
        assert trajectory.termination is TerminationReason.AGENT_DONE
        assert [s.observation.kind for s in trajectory.steps] == [kind]
        assert json.loads(trajectory.messages[3]["content"])["error_type"] == kind.value
        assert trajectory.reward is not None and not trajectory.reward.success
        assert_well_formed(trajectory)


async def test_context_overflow_ends_the_episode_and_is_scored(
    pool: SandboxPool, server: MockOpenAIServer, client: LLMClient
) -> None:
    scenario = shop_scenario()
    server.register_replay(scenario.id, [a.model_dump() for a in scenario.reference_actions])
    model = mock_model(server, f"replay/{scenario.id}")
    server.inject(Fault(kind="context_overflow", model=model.model.removeprefix("openai/")))
    trajectory = await run_episode(
        scenario,
        shop_environment(),
        pool=pool,
        agent=build_agent("function_calling", model, client),
        config=EpisodeConfig(),
        episode_id="overflow",
    )
    assert trajectory.termination is TerminationReason.CONTEXT_OVERFLOW
    assert trajectory.reward is not None and trajectory.reward.checks_total == 2
    assert trajectory.messages[-1]["role"] == "user"


async def test_reasoning_is_recorded_but_not_replayed_or_shown_to_the_user(
    pool: SandboxPool, server: MockOpenAIServer, client: LLMClient
) -> None:
    key = unique("thinking-user")
    server.register_user(key, [f"{key}: hello", "And one more thing."])
    trajectory = await run_episode(
        shop_scenario(),
        shop_environment(),
        pool=pool,
        agent=build_agent("function_calling", mock_model(server, "think"), client),
        user=build_user(mock_model(server, f"user/{key}"), client),
        config=EpisodeConfig(mode="conv"),
        episode_id="think",
    )
    assert trajectory.termination is TerminationReason.USER_STOP
    replies = [m for m in trajectory.messages if m["role"] == "assistant"]
    assert [m["content"] for m in replies] == [f"echo: {key}: hello", "echo: And one more thing."]
    assert all(m["reasoning_content"] == "Let me think about this." for m in replies)
    second_request = server.chat_requests("think")[1].body or {}
    assert "reasoning_content" not in json.dumps(second_request["messages"])
    for record in server.chat_requests(f"user/{key}"):
        assert "Let me think" not in json.dumps(record.body)


@pytest.mark.parametrize(
    ("fault", "error", "requests"),
    [
        ("bad_request", "RequestRejected", 1),
        ("server_error", "RetriesExhausted", 2),
        ("rate_limit", "RetriesExhausted", 2),
    ],
)
async def test_an_endpoint_error_is_an_infra_error_and_not_scored(
    pool: SandboxPool, server: MockOpenAIServer, client: LLMClient, fault: str, error: str, requests: int
) -> None:
    scenario = shop_scenario()
    model = mock_model(server, "text")
    server.inject(Fault(kind=fault, times=None, model="text", retry_after=0.0))  # type: ignore[arg-type]
    trajectory = await run_episode(
        scenario,
        shop_environment(),
        pool=pool,
        agent=build_agent("function_calling", model, client),
        config=EpisodeConfig(),
        episode_id="infra",
    )
    assert trajectory.termination is TerminationReason.INFRA_ERROR
    assert trajectory.infra_error and trajectory.reward is None and trajectory.check_results == []
    assert error in (trajectory.termination_detail or "")
    assert len(server.chat_requests("text")) == requests  # client retries: 2 attempts in this test
    assert trajectory.errors and trajectory.errors[0].startswith("agent:")


# ------------------------------------------------------------------------------ scripted in-process models


def _last_text(messages: list[dict[str, Any]], role: str) -> str:
    for message in reversed(messages):
        if message.get("role") == role:
            return str(message.get("content") or "")
    return ""


async def test_simulated_user_reveals_on_request_and_stops(pool: SandboxPool, client: LLMClient) -> None:
    """A scripted user model: opens vaguely, gives the order id only when asked, stops when it is done."""
    seen: list[list[dict[str, Any]]] = []

    def user_model(request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        seen.append(messages)
        agent_said = _last_text(messages, "user").lower()
        if "cancelled" in agent_said:
            return {"role": "assistant", "content": f"Perfect, thank you! {STOP}"}
        if "which order" in agent_said:
            return {"role": "assistant", "content": "It's order O-1."}
        return {
            "role": "assistant",
            "content": "Hi, I'd like to cancel an order.",
            "usage": {"prompt_tokens": 11, "completion_tokens": 3},
        }

    def agent_model(request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        last = messages[-1]
        if last["role"] == "tool":
            if any(m.get("role") == "tool" and "cancelled" in m["content"] for m in messages):
                return {"role": "assistant", "content": "Your order O-1 has been cancelled."}
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "x2",
                        "type": "function",
                        "function": {"name": "cancel_order", "arguments": '{"order_id": "O-1"}'},
                    }
                ],
            }
        if "O-1" in last["content"]:
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "x1",
                        "type": "function",
                        "function": {"name": "get_order", "arguments": '{"order_id": "O-1"}'},
                    }
                ],
            }
        return {"role": "assistant", "content": "Sure. Which order is it?"}

    user_name, agent_name = unique("user"), unique("agent")
    register_python_model(user_name, user_model)
    register_python_model(agent_name, agent_model)
    user = UserSimulator(ModelSettings(model=f"python/{user_name}"), client)
    agent = build_agent("function_calling", ModelSettings(model=f"python/{agent_name}"), client)
    trajectory = await run_episode(
        shop_scenario(),
        shop_environment(),
        pool=pool,
        agent=agent,
        user=user,
        config=EpisodeConfig(mode="conv"),
        episode_id="scripted-user",
    )
    assert trajectory.termination is TerminationReason.USER_STOP
    assert trajectory.termination_detail == STOP
    assert trajectory.reward is not None and trajectory.reward.success
    assert [m["content"] for m in trajectory.messages if m["role"] == "user"] == [
        "Hi, I'd like to cancel an order.",
        "It's order O-1.",
        f"Perfect, thank you! {STOP}",
    ]
    assert trajectory.usage["user"].requests == 3
    assert trajectory.usage["user"].prompt_tokens >= 11
    first_view = seen[0]
    assert first_view[0]["role"] == "system"
    assert "Have order O-1 cancelled." in first_view[0]["content"]
    assert "The order id is O-1." in first_view[0]["content"]  # withheld, to reveal only when asked
    assert [m["role"] for m in seen[-1][1:]] == ["user", "assistant", "user", "assistant", "user"]


async def test_function_calling_agent_runs_several_calls_per_turn(pool: SandboxPool, client: LLMClient) -> None:
    def model(request: dict[str, Any]) -> dict[str, Any]:
        if request["messages"][-1]["role"] == "tool":
            return {"role": "assistant", "content": "Both done."}
        return {
            "role": "assistant",
            "content": "Checking, then cancelling.",
            "tool_calls": [
                {
                    "id": "first",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": '{"order_id": "O-1"}'},
                },
                {
                    "id": "second",
                    "type": "function",
                    "function": {"name": "cancel_order", "arguments": '{"order_id": "O-1"}'},
                },
            ],
        }

    name = unique("multi")
    register_python_model(name, model)
    agent = build_agent("function_calling", ModelSettings(model=f"python/{name}"), client, role="teacher")
    trajectory = await run_episode(
        shop_scenario(), shop_environment(), pool=pool, agent=agent, config=EpisodeConfig(), episode_id="multi"
    )
    assert trajectory.termination is TerminationReason.AGENT_DONE
    assert trajectory.reward is not None and trajectory.reward.success
    assert [(s.call.id, s.turn) for s in trajectory.steps] == [("first", 0), ("second", 0)]
    assert trajectory.messages[2]["content"] == "Checking, then cancelling."
    assert trajectory.agent.role == "teacher"
    assert trajectory.usage["agent"].requests == 2
    assert client.usage_by_role()["teacher"].requests == 2
    assert_well_formed(trajectory)


async def test_a_user_model_that_says_nothing_is_an_infra_error(pool: SandboxPool, client: LLMClient) -> None:
    name = unique("mute")
    register_python_model(name, lambda request: {"role": "assistant", "content": "  "})
    user = UserSimulator(ModelSettings(model=f"python/{name}"), client, attempts=2)
    with pytest.raises(AgentPolicyError, match="empty message 2 times"):
        await user.respond([{"role": "system", "content": "x"}, {"role": "user", "content": "Hi"}])
    trajectory = await run_episode(
        shop_scenario(),
        shop_environment(),
        pool=pool,
        agent=build_agent("oracle", None, None, scenario=shop_scenario()),
        user=user,
        config=EpisodeConfig(mode="conv"),
        episode_id="mute",
    )
    assert trajectory.termination is TerminationReason.INFRA_ERROR
    assert trajectory.reward is None


async def test_prompted_agent_parses_text_calls_recovers_from_errors_and_records_openai_form(
    pool: SandboxPool, client: LLMClient
) -> None:
    requests: list[dict[str, Any]] = []

    def text_model(request: dict[str, Any]) -> dict[str, Any]:
        requests.append(request)
        messages = request["messages"]
        turn = sum(1 for m in messages if m["role"] == "assistant")
        replies = [
            '<tool_call>{"name": "get_order", "arguments": {"order_id": "O-1"</tool_call>',
            "<think>Need both.</think>Looking it up.\n"
            '<tool_call>{"name": "get_order", "arguments": {"order_id": "O-1"}}</tool_call>\n'
            '<tool_call>{"name": "cancel_order", "arguments": {"order_id": "O-1"}}</tool_call>',
            "Order O-1 is cancelled.",
        ]
        return {"role": "assistant", "content": replies[min(turn, 2)]}

    name = unique("text")
    register_python_model(name, text_model)
    agent = PromptedAgent(ModelSettings(model=f"python/{name}"), client)
    trajectory = await run_episode(
        shop_scenario(), shop_environment(), pool=pool, agent=agent, config=EpisodeConfig(), episode_id="prompted"
    )
    assert trajectory.termination is TerminationReason.AGENT_DONE
    assert trajectory.reward is not None and trajectory.reward.success
    assert trajectory.agent.kind == "prompted"
    assert [m["role"] for m in trajectory.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert "could not be read as tool calls" in trajectory.messages[3]["content"]
    calls_message = trajectory.messages[4]
    assert calls_message["content"] == "Looking it up."
    assert calls_message["reasoning_content"] == "Need both."
    assert [c["id"] for c in calls_message["tool_calls"]] == ["call_1_0", "call_1_1"]
    assert [s.observation.kind for s in trajectory.steps] == [ObservationKind.OK, ObservationKind.OK]
    assert len(trajectory.errors) == 1
    assert_well_formed(trajectory)
    # the model saw tools in its system prompt, no native tools, and its own calls rendered back as text
    assert not requests[0].get("tools")
    assert "<tool_call>" in requests[0]["messages"][0]["content"]
    final_prompt = requests[-1]["messages"]
    assert all(m["role"] in ("system", "user", "assistant") for m in final_prompt)
    assert "<tool_response" in final_prompt[-1]["content"]


# -------------------------------------------------------------------------------- the embedded local model


@pytest.mark.local_model
async def test_local_model_completes_a_real_episode(pool: SandboxPool, client: LLMClient) -> None:
    library = load_library("datasets/seed")
    candidates = [s for s in library.scenarios if s.environment_id in library.environments]
    # the smallest prompt keeps this fast on two cores
    scenario = min(candidates, key=lambda s: (len(library.environments[s.environment_id].tools), len(s.task)))
    environment = library.environments[scenario.environment_id]
    agent = build_agent("function_calling", ModelSettings(model="local", max_tokens=48, seed=0), client)
    trajectory: Trajectory = await run_episode(
        scenario,
        environment,
        pool=pool,
        agent=agent,
        config=EpisodeConfig(mode="nonconv", max_steps=1),
        episode_id="local",
    )
    assert trajectory.termination in (TerminationReason.AGENT_DONE, TerminationReason.MAX_STEPS), trajectory.errors
    assert trajectory.reward is not None
    assert len(trajectory.check_results) == len(scenario.checks)
    assert trajectory.usage["agent"].requests >= 1
    assert trajectory.usage["agent"].completion_tokens > 0
    assert trajectory.messages[0]["role"] == "system" and trajectory.messages[1]["content"] == scenario.task
    assistant_turns = [m for m in trajectory.messages if m["role"] == "assistant"]
    assert len(assistant_turns) == 1
    assert trajectory.timings.model_seconds > 0
    assert_well_formed(trajectory)
