"""Per-endpoint concurrency caps and rpm/tpm windows, observed from the server side."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from harness.llm import AliasTable, EndpointLimits, LLMClient, ModelSettings
from harness.llm.limits import TokenWindow
from tests.doubles.mock_openai import MockOpenAIServer

# The throttle stamps a request just before sending it; the server stamps it when the body has arrived. The
# two clocks are the same, but delivery can differ by a few milliseconds between requests.
DELIVERY_SLACK = 0.2  # server-side arrival jitter on a loaded two-core machine


def client_with(default: EndpointLimits, **kwargs) -> LLMClient:
    return LLMClient(default_limits=default, aliases=AliasTable.load(include_user_file=False), **kwargs)


def echo(server: MockOpenAIServer) -> ModelSettings:
    return ModelSettings(model="hosted_vllm/echo", extra={"api_base": server.base_url})


async def test_concurrency_cap_is_the_most_the_server_sees_in_flight():
    async with MockOpenAIServer(latency=0.05) as server:
        client = client_with(EndpointLimits(concurrency=3))
        results = await asyncio.gather(
            *(client.chat(echo(server), [{"role": "user", "content": str(i)}]) for i in range(15))
        )
        await client.aclose()
        assert [r.message["content"] for r in results] == [f"echo: {i}" for i in range(15)]
        assert server.max_in_flight == 3


async def test_without_a_cap_all_requests_overlap():
    async with MockOpenAIServer(latency=0.1) as server:
        client = client_with(EndpointLimits(concurrency=None))
        await asyncio.gather(*(client.chat(echo(server), [{"role": "user", "content": "x"}]) for _ in range(40)))
        await client.aclose()
        assert server.max_in_flight == 40


async def test_rpm_window_counted_on_the_server():
    limit, window = 3, 1.0
    async with MockOpenAIServer() as server:
        client = client_with(EndpointLimits(concurrency=None, rpm=limit, window_seconds=window))
        await asyncio.gather(*(client.chat(echo(server), [{"role": "user", "content": "x"}]) for _ in range(9)))
        await client.aclose()
        times = sorted(r.t for r in server.chat_requests())
    assert len(times) == 9
    # No window of `window` seconds holds more than `limit` requests.
    for first, later in zip(times, times[limit:], strict=False):
        assert later - first >= window - DELIVERY_SLACK


async def test_tpm_window_counted_on_the_server():
    window = 1.0
    async with MockOpenAIServer() as server:
        # Each request is about 40 tokens of prompt; a 60-token window admits one request at a time.
        client = client_with(EndpointLimits(concurrency=None, tpm=60, window_seconds=window))
        messages = [{"role": "user", "content": "x" * 120}]
        results = await asyncio.gather(*(client.chat(echo(server), messages) for _ in range(4)))
        await client.aclose()
        times = sorted(r.t for r in server.chat_requests())
    assert all(r.usage.total_tokens > 30 for r in results)
    for first, second in itertools.pairwise(times):
        assert second - first >= window - DELIVERY_SLACK


async def test_limits_are_per_endpoint_and_settable_by_alias(monkeypatch):
    async with MockOpenAIServer(latency=0.05) as slow, MockOpenAIServer(latency=0.05) as other:
        monkeypatch.setenv("HARNESS_API_BASE_QWEN3_8B", slow.base_url)
        client = client_with(EndpointLimits(concurrency=None))
        client.set_limits("qwen3-8b", EndpointLimits(concurrency=2))
        assert client.limits_for(slow.base_url).concurrency == 2
        await asyncio.gather(
            *(client.chat(ModelSettings(model="qwen3-8b"), [{"role": "user", "content": "x"}]) for _ in range(8)),
            *(client.chat(echo(other), [{"role": "user", "content": "x"}]) for _ in range(8)),
        )
        await client.aclose()
        assert slow.max_in_flight == 2
        assert other.max_in_flight == 8


async def test_token_window_settles_estimates_with_real_counts():
    window = TokenWindow(limit=100, period=60.0)
    entry = await window.acquire(90)
    window.settle(entry, 10)  # the answer was much smaller than estimated
    second = await asyncio.wait_for(window.acquire(80), timeout=1.0)
    assert second.tokens == 80
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(window.acquire(20), timeout=0.05)
