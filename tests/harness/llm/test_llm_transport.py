"""Tool calls through litellm's OpenAI-compatible providers, the connection pool, and secrets hygiene."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from harness.llm import AliasTable, EndpointLimits, LLMClient, LLMError, ModelSettings, RetryPolicy
from tests.doubles.mock_openai import Fault, MockOpenAIServer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    },
]
TASK = "Cancel order O-9 after checking it."
ACTIONS = [
    {"name": "get_order", "arguments": {"order_id": "O-9"}},
    {"name": "cancel_order", "arguments": {"order_id": "O-9"}},
]


def make_client(**kwargs) -> LLMClient:
    return LLMClient(aliases=AliasTable.load(include_user_file=False), **kwargs)


@pytest.fixture(params=["harness", "direct", "sdk"])
def route(request, monkeypatch):
    """Our own OpenAI-compatible route (the default), litellm's direct HTTP route and its OpenAI SDK route."""
    if request.param != "harness":
        monkeypatch.setenv("HARNESS_LLM_ROUTE", "litellm")
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "False" if request.param == "sdk" else "True")
    return request.param


@pytest.mark.parametrize("provider", ["hosted_vllm", "openai"])
async def test_replayed_tool_calls_round_trip(route, provider):
    async with MockOpenAIServer() as server:
        server.register_replay(TASK, ACTIONS)
        client = make_client()
        settings = ModelSettings(model=f"{provider}/replay", temperature=0.0, extra={"api_base": server.base_url})
        messages: list[dict] = [
            {"role": "system", "content": "You run an order desk."},
            {"role": "user", "content": TASK},
        ]
        played = []
        for _ in range(4):
            result = await client.chat(settings, messages, tools=TOOLS)
            messages.append(result.message)
            if not result.message.get("tool_calls"):
                break
            for call in result.message["tool_calls"]:
                played.append(
                    {"name": call["function"]["name"], "arguments": orjson.loads(call["function"]["arguments"])}
                )
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": '{"success": true}'})
        await client.aclose()
        bodies = [r.body for r in server.chat_requests() if r.body is not None]
    assert played == ACTIONS
    assert messages[-1]["role"] == "assistant" and messages[-1]["content"]
    assert all(body["tools"] == TOOLS for body in bodies)
    # The assistant tool-call turns and tool results went back to the server as sent.
    assert bodies[-1]["messages"][2]["tool_calls"][0]["function"]["name"] == "get_order"
    assert bodies[-1]["messages"][3]["role"] == "tool"


async def test_reasoning_content_is_kept(route):
    async with MockOpenAIServer() as server:
        client = make_client()
        result = await client.chat(
            ModelSettings(model="hosted_vllm/think", extra={"api_base": server.base_url}),
            [{"role": "user", "content": "hi"}],
        )
        await client.aclose()
    assert result.message == {
        "role": "assistant",
        "content": "echo: hi",
        "reasoning_content": "Let me think about this.",
    }


async def test_broken_arguments_are_passed_through_verbatim(route):
    async with MockOpenAIServer() as server:
        client = make_client()
        result = await client.chat(
            ModelSettings(model="hosted_vllm/broken-args", extra={"api_base": server.base_url}),
            [{"role": "user", "content": "x"}],
            tools=TOOLS,
        )
        await client.aclose()
    assert result.message["tool_calls"][0]["function"]["arguments"] == '{"id": "O-1", '


async def test_the_pool_is_not_the_limit_at_high_concurrency():
    async with MockOpenAIServer(latency=0.2, record_bodies=False) as server:
        client = make_client(default_limits=EndpointLimits(concurrency=None))
        settings = ModelSettings(model="hosted_vllm/echo", extra={"api_base": server.base_url})
        for _wave in range(2):
            results = await asyncio.gather(
                *(client.chat(settings, [{"role": "user", "content": "x"}]) for _ in range(200))
            )
            assert len(results) == 200
        await client.aclose()
        assert server.max_in_flight == 200
        assert server.max_open_connections == 200
        # The second wave reused the first wave's connections.
        assert server.connections_total == 200


async def test_connections_are_reused_between_calls():
    async with MockOpenAIServer() as server:
        client = make_client()
        settings = ModelSettings(model="hosted_vllm/echo", extra={"api_base": server.base_url})
        for _ in range(20):
            await client.chat(settings, [{"role": "user", "content": "x"}])
        await client.aclose()
        assert server.connections_total == 1


def test_one_client_can_serve_successive_event_loops():
    server = MockOpenAIServer()
    with server.running_in_thread():
        client = make_client()
        settings = ModelSettings(model="hosted_vllm/echo", extra={"api_base": server.base_url})

        async def one(text: str) -> str:
            result = await client.chat(settings, [{"role": "user", "content": text}])
            return result.message["content"]

        assert asyncio.run(one("first")) == "echo: first"
        assert asyncio.run(one("second")) == "echo: second"
        asyncio.run(client.aclose())
    assert len(server.chat_requests()) == 2


async def test_secrets_stay_out_of_errors_logs_and_stdout(monkeypatch, caplog, capsys):
    secret = "sk-test-THIS-IS-A-SECRET-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    caplog.set_level(logging.DEBUG)
    async with MockOpenAIServer() as server:
        server.inject(Fault("server_error", times=1), Fault("unauthorized", times=1))
        client = make_client(retry=RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=0.0))
        with pytest.raises(LLMError) as caught:
            await client.chat(
                ModelSettings(model="openai/echo", extra={"api_base": server.base_url}),
                [{"role": "user", "content": "x"}],
            )
        await client.aclose()
        sent = server.chat_requests()[-1].headers
    assert sent is not None and sent["authorization"] == f"Bearer {secret}"  # the key was really used
    assert secret not in str(caught.value)
    assert secret not in caplog.text
    assert "retry" in caplog.text  # the retry after the 500 was logged
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    assert "Give Feedback" not in captured.out


async def test_an_api_key_in_settings_is_refused():
    client = make_client()
    with pytest.raises(ValueError, match="environment"):
        await client.chat(
            ModelSettings(model="openai/x", extra={"api_key": "sk-no"}), [{"role": "user", "content": "x"}]
        )
    await client.aclose()
