"""The opt-in response cache: hits make no request; anything that changes the answer misses."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harness.llm import AliasTable, LLMClient, ModelSettings, RetryPolicy, cache_key
from tests.doubles.mock_openai import MockOpenAIServer

TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_order", "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}},
    }
]
MESSAGES = [{"role": "user", "content": "Find order O-1"}]


@pytest.fixture
async def server():
    async with MockOpenAIServer() as running:
        running.register_replay("Find order", [{"name": "get_order", "arguments": {"id": "O-1"}}])
        yield running


def make_client(cache_dir) -> LLMClient:
    return LLMClient(
        cache_dir=cache_dir,
        retry=RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=0.0),
        aliases=AliasTable.load(include_user_file=False),
    )


def replay(server: MockOpenAIServer, **fields) -> ModelSettings:
    return ModelSettings(model="hosted_vllm/replay", extra={"api_base": server.base_url}, **fields)


async def test_hit_returns_identical_message_without_a_request(server, tmp_path):
    client = make_client(tmp_path)
    first = await client.chat(replay(server, temperature=0.0, seed=1), MESSAGES, tools=TOOLS)
    assert not first.cached and len(server.chat_requests()) == 1
    second = await client.chat(replay(server, temperature=0.0, seed=1), MESSAGES, tools=TOOLS, role="teacher")
    assert second.cached
    assert second.message == first.message
    assert second.message["tool_calls"][0]["function"]["name"] == "get_order"
    assert len(server.chat_requests()) == 1
    assert second.attempts == 0 and second.usage.cached_requests == 1 and second.usage.cost_usd == 0.0
    assert client.usage_by_role()["teacher"].cached_requests == 1
    await client.aclose()


async def test_cache_survives_a_new_client(server, tmp_path):
    client = make_client(tmp_path)
    first = await client.chat(replay(server, temperature=0.0), MESSAGES, tools=TOOLS)
    await client.aclose()
    other = make_client(tmp_path)
    again = await other.chat(replay(server, temperature=0.0), MESSAGES, tools=TOOLS)
    await other.aclose()
    assert again.cached and again.message == first.message
    assert len(server.chat_requests()) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.7},
        {"seed": 2},
        {"max_tokens": 50},
        {"extra_body": {"top_k": 5}},
        {"messages": [{"role": "user", "content": "Find order O-2"}]},
        {"tools": []},
    ],
    ids=["temperature", "seed", "max_tokens", "extra_body", "messages", "tools"],
)
async def test_anything_that_changes_the_answer_misses(server, tmp_path, change):
    client = make_client(tmp_path)
    await client.chat(replay(server, temperature=0.0), MESSAGES, tools=TOOLS)
    extra = {"api_base": server.base_url}
    if "extra_body" in change:
        extra["extra_body"] = change["extra_body"]
    settings = ModelSettings(
        model="hosted_vllm/replay",
        temperature=change.get("temperature", 0.0),
        seed=change.get("seed"),
        max_tokens=change.get("max_tokens"),
        extra=extra,
    )
    result = await client.chat(settings, change.get("messages", MESSAGES), tools=change.get("tools", TOOLS))
    assert not result.cached
    assert len(server.chat_requests()) == 2
    await client.aclose()


async def test_a_different_endpoint_misses(tmp_path):
    client = make_client(tmp_path)
    async with MockOpenAIServer() as one, MockOpenAIServer() as two:
        await client.chat(ModelSettings(model="hosted_vllm/echo", extra={"api_base": one.base_url}), MESSAGES)
        result = await client.chat(ModelSettings(model="hosted_vllm/echo", extra={"api_base": two.base_url}), MESSAGES)
        assert not result.cached and len(two.chat_requests()) == 1
    await client.aclose()


async def test_concurrent_writers_leave_one_whole_entry(server, tmp_path):
    client = make_client(tmp_path)
    settings = replay(server, temperature=0.0)
    results = await asyncio.gather(*(client.chat(settings, MESSAGES, tools=TOOLS) for _ in range(16)))
    assert len({str(r.message) for r in results}) == 1
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 1 and files[0].suffix == ".json"  # no temporary files left behind
    before = len(server.chat_requests())
    assert (await client.chat(settings, MESSAGES, tools=TOOLS)).cached
    assert len(server.chat_requests()) == before
    await client.aclose()


async def test_a_corrupt_entry_is_a_miss(server, tmp_path):
    client = make_client(tmp_path)
    await client.chat(replay(server, temperature=0.0), MESSAGES, tools=TOOLS)
    (entry,) = [p for p in tmp_path.rglob("*.json")]
    entry.write_bytes(b"{not json")
    result = await client.chat(replay(server, temperature=0.0), MESSAGES, tools=TOOLS)
    assert not result.cached and len(server.chat_requests()) == 2
    await client.aclose()


def test_key_is_stable_under_dict_order_and_ignores_nothing_that_matters():
    base: dict[str, Any] = {
        "provider_model": "hosted_vllm/qwen3-8b",
        "api_base": "http://x/v1",
        "messages": [{"role": "user", "content": "a"}],
        "tools": None,
        "params": {"temperature": 0.0, "seed": 1},
    }
    reordered = dict(base, params={"seed": 1, "temperature": 0.0})
    assert cache_key(**base) == cache_key(**reordered)
    assert cache_key(**base) != cache_key(**dict(base, provider_model="hosted_vllm/qwen3-4b"))
    assert cache_key(**base) != cache_key(**dict(base, api_base="http://y/v1"))
