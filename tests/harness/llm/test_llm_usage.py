"""Token usage and cost per call, summed per role."""

from __future__ import annotations

import pytest

from harness.llm import AliasTable, LLMClient, ModelSettings, register_python_model, unregister_python_model
from tests.doubles.mock_openai import MockOpenAIServer


@pytest.fixture
async def server():
    async with MockOpenAIServer() as running:
        yield running


@pytest.fixture
async def client():
    llm = LLMClient(aliases=AliasTable.load(include_user_file=False))
    yield llm
    await llm.aclose()


async def test_usage_comes_from_the_response_and_is_summed_per_role(server, client):
    settings = ModelSettings(model="hosted_vllm/echo", extra={"api_base": server.base_url})
    agent_results = [
        await client.chat(settings, [{"role": "user", "content": "a" * (40 * i)}], role="agent") for i in range(1, 4)
    ]
    user_result = await client.chat(settings, [{"role": "user", "content": "hello"}], role="user")
    by_role = client.usage_by_role()
    assert set(by_role) == {"agent", "user"}
    agent = by_role["agent"]
    assert agent.requests == 3
    assert agent.prompt_tokens == sum(r.usage.prompt_tokens for r in agent_results)
    assert agent.completion_tokens == sum(r.usage.completion_tokens for r in agent_results)
    # Longer prompts report more prompt tokens: the numbers are the server's, not constants.
    assert agent_results[0].usage.prompt_tokens < agent_results[2].usage.prompt_tokens
    assert by_role["user"].requests == 1 and by_role["user"].prompt_tokens == user_result.usage.prompt_tokens
    assert agent.cost_usd == 0.0  # a model without a known price costs 0
    assert agent.model_seconds > 0
    total = client.total_usage()
    assert total.requests == 4 and total.prompt_tokens == agent.prompt_tokens + user_result.usage.prompt_tokens


async def test_usage_by_role_is_a_copy(server, client):
    settings = ModelSettings(model="hosted_vllm/echo", extra={"api_base": server.base_url})
    await client.chat(settings, [{"role": "user", "content": "x"}], role="judge")
    snapshot = client.usage_by_role()
    snapshot["judge"].requests = 100
    assert client.usage_by_role()["judge"].requests == 1


async def test_cost_uses_the_price_of_a_known_model(server, client):
    settings = ModelSettings(model="openai/gpt-4o-mini", extra={"api_base": server.base_url})
    first = await client.chat(settings, [{"role": "user", "content": "price me " * 50}], role="teacher")
    second = await client.chat(settings, [{"role": "user", "content": "again"}], role="teacher")
    assert first.usage.cost_usd > 0
    assert first.usage.cost_usd > second.usage.cost_usd  # more prompt tokens cost more
    assert client.usage_by_role()["teacher"].cost_usd == pytest.approx(first.usage.cost_usd + second.usage.cost_usd)
    # The price per token of gpt-4o-mini is below a cent per thousand tokens.
    assert first.usage.cost_usd < first.usage.total_tokens * 1e-5


async def test_usage_reported_by_an_in_process_model(client):
    register_python_model(
        "counted", lambda request: {"content": "ok", "usage": {"prompt_tokens": 11, "completion_tokens": 4}}
    )
    try:
        for _ in range(2):
            await client.chat(ModelSettings(model="python/counted"), [{"role": "user", "content": "x"}], role="user")
    finally:
        unregister_python_model("counted")
    user = client.usage_by_role()["user"]
    assert (user.requests, user.prompt_tokens, user.completion_tokens, user.cost_usd) == (2, 22, 8, 0.0)
