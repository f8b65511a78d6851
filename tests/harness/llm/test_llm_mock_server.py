"""The mock OpenAI-compatible server itself, spoken to with a plain HTTP client."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from tests.doubles.mock_openai import (
    STOP_TOKEN,
    Fault,
    MockOpenAIServer,
    ReplayPolicy,
    SimulatedUserPolicy,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
]


async def post(session: aiohttp.ClientSession, base_url: str, body: dict) -> tuple[int, dict, dict]:
    async with session.post(f"{base_url}/chat/completions", data=orjson.dumps(body)) as response:
        return response.status, orjson.loads(await response.read()), dict(response.headers)


@pytest.fixture
async def server():
    async with MockOpenAIServer() as running:
        yield running


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as client_session:
        yield client_session


async def test_echo_reply_has_openai_shape_and_usage(server, session):
    status, data, headers = await post(
        session, server.base_url, {"model": "echo", "messages": [{"role": "user", "content": "hello"}]}
    )
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    choice = data["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "echo: hello"}
    assert choice["finish_reason"] == "stop"
    usage = data["usage"]
    assert usage["prompt_tokens"] > 0 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_models_endpoint_lists_policies(server, session):
    async with session.get(f"{server.base_url}/models") as response:
        data = orjson.loads(await response.read())
    ids = {entry["id"] for entry in data["data"]}
    assert {"echo", "replay", "user", "bad-tool", "broken-args"} <= ids


async def test_replay_plays_one_call_per_assistant_turn_by_key(server, session):
    server.register_replay(
        "Cancel order O-7",
        [{"name": "get_order", "arguments": {"order_id": "O-7"}}, {"name": "cancel", "arguments": {"id": "O-7"}}],
    )
    messages: list[dict] = [{"role": "user", "content": "Please: Cancel order O-7 now."}]
    names = []
    for _ in range(3):
        _, data, _ = await post(session, server.base_url, {"model": "replay", "messages": messages, "tools": TOOLS})
        message = data["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            break
        call = message["tool_calls"][0]
        assert call["type"] == "function"
        names.append((call["function"]["name"], orjson.loads(call["function"]["arguments"])))
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": "{}"})
    assert names == [("get_order", {"order_id": "O-7"}), ("cancel", {"id": "O-7"})]
    assert messages[-1]["content"] == ReplayPolicy().final_text


async def test_replay_key_in_model_name_and_missing_key_is_a_400(server, session):
    server.register_replay("k1", [{"name": "get_order", "arguments": {}}])
    _, data, _ = await post(
        session, server.base_url, {"model": "replay/k1", "messages": [{"role": "user", "content": "x"}]}
    )
    assert data["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_order"
    status, data, _ = await post(
        session, server.base_url, {"model": "replay", "messages": [{"role": "user", "content": "unknown"}]}
    )
    assert status == 400 and "no registered script" in data["error"]["message"]


async def test_simulated_user_opens_then_stops(server, session):
    server.register_user("SCENARIO-12", ["Hi, I need to change my booking.", "It is booking B-1."])
    messages = [{"role": "system", "content": "You are a customer. SCENARIO-12"}]
    replies = []
    for agent_reply in ["What is the booking id?", "Done, changed it.", "Anything else?"]:
        _, data, _ = await post(session, server.base_url, {"model": "user", "messages": messages})
        reply = data["choices"][0]["message"]["content"]
        replies.append(reply)
        # The user simulator sees its own turns as assistant and the agent as user.
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": agent_reply}]
    assert replies == ["Hi, I need to change my booking.", "It is booking B-1.", STOP_TOKEN]


async def test_bad_tool_and_broken_arguments(server, session):
    body = {"model": "bad-tool", "messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
    _, data, _ = await post(session, server.base_url, body)
    assert data["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "no_such_tool"
    body["model"] = "broken-args"
    _, data, _ = await post(session, server.base_url, body)
    call = data["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_order"
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(call["arguments"])


async def test_faults_by_count_and_records(server, session):
    server.inject(Fault("rate_limit", times=1, retry_after=2), Fault("server_error", times=1))
    body = {"model": "echo", "messages": [{"role": "user", "content": "x"}]}
    first = await post(session, server.base_url, body)
    second = await post(session, server.base_url, body)
    third = await post(session, server.base_url, body)
    assert (first[0], first[2]["Retry-After"]) == (429, "2")
    assert second[0] == 500 and third[0] == 200
    records = server.chat_requests()
    assert [r.outcome for r in records] == ["rate_limit", "server_error", "ok"]
    assert records[0].t <= records[1].t <= records[2].t


async def test_dropped_connection_is_a_client_error(server, session):
    server.inject(Fault("drop"))
    with pytest.raises(aiohttp.ClientError):
        await post(session, server.base_url, {"model": "echo", "messages": []})
    status, _, _ = await post(session, server.base_url, {"model": "echo", "messages": []})
    assert status == 200


async def test_latency_lets_requests_overlap_and_is_counted():
    async with MockOpenAIServer(latency=0.05) as server, aiohttp.ClientSession() as session:
        body = {"model": "echo", "messages": [{"role": "user", "content": "x"}]}
        results = await asyncio.gather(*(post(session, server.base_url, body) for _ in range(8)))
        assert all(status == 200 for status, _, _ in results)
        assert server.max_in_flight == 8
        assert server.max_open_connections == 8
        assert server.stats()["chat_requests"] == 8


def test_runs_in_a_background_thread_for_sync_callers():
    import json
    import urllib.request

    server = MockOpenAIServer(policies={"fixed": SimulatedUserPolicy(turns=["hello"])})
    with server.running_in_thread():
        request = urllib.request.Request(
            f"{server.base_url}/chat/completions",
            data=json.dumps({"model": "fixed", "messages": []}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            data = json.loads(response.read())
    assert data["choices"][0]["message"]["content"] == "hello"
    assert len(server.chat_requests()) == 1
