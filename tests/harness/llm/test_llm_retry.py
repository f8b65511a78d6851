"""Retries against faults injected by the mock server, counted on the server side."""

from __future__ import annotations

import email.utils
import time

import pytest

from harness.llm import (
    AliasTable,
    ContextWindowExceeded,
    LLMClient,
    ModelSettings,
    RequestRejected,
    RetriesExhausted,
    RetryPolicy,
)
from harness.llm.redact import redact
from harness.llm.retry import parse_retry_after
from tests.doubles.mock_openai import Fault, MockOpenAIServer

MESSAGES = [{"role": "user", "content": "Where is order O-1?"}]
FAST = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.05, jitter=0.01)


@pytest.fixture
async def server():
    async with MockOpenAIServer() as running:
        yield running


@pytest.fixture
async def client():
    llm = LLMClient(retry=FAST, timeout=5, aliases=AliasTable.load(include_user_file=False))
    yield llm
    await llm.aclose()


def settings(server: MockOpenAIServer, model: str = "hosted_vllm/echo") -> ModelSettings:
    return ModelSettings(model=model, temperature=0.0, extra={"api_base": server.base_url})


async def test_rate_limit_waits_for_retry_after_seen_by_the_server(server, client):
    server.inject(Fault("rate_limit", times=2, retry_after=0.25))
    result = await client.chat(settings(server), MESSAGES)
    assert result.message["content"] == "echo: Where is order O-1?"
    assert result.attempts == 3
    records = server.chat_requests()
    assert [r.status for r in records] == [429, 429, 200]
    # The server's own clock shows each retry came at least Retry-After after the 429 it answered.
    assert records[1].t - records[0].t >= 0.25
    assert records[2].t - records[1].t >= 0.25


async def test_retry_after_is_honoured_with_the_sdk_route_too(server, client, monkeypatch):
    monkeypatch.setenv("HARNESS_LLM_ROUTE", "litellm")
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "False")
    server.inject(Fault("rate_limit", times=1, retry_after=0.2))
    result = await client.chat(settings(server, "openai/echo"), MESSAGES)
    assert result.attempts == 2
    records = server.chat_requests()
    assert [r.status for r in records] == [429, 200]
    assert records[1].t - records[0].t >= 0.2


@pytest.mark.parametrize("kind", ["server_error", "drop"])
async def test_transient_failures_are_retried(server, client, kind):
    server.inject(Fault(kind, times=2))
    result = await client.chat(settings(server), MESSAGES)
    assert result.attempts == 3
    assert [r.outcome for r in server.chat_requests()] == [kind, kind, "ok"]


async def test_a_hung_request_times_out_and_is_retried(server):
    llm = LLMClient(retry=FAST, timeout=0.3, aliases=AliasTable.load(include_user_file=False))
    server.inject(Fault("hang", times=1, hang_seconds=30))
    try:
        result = await llm.chat(settings(server), MESSAGES)
    finally:
        await llm.aclose()
    assert result.attempts == 2
    assert [r.outcome for r in server.chat_requests()] == ["hang", "ok"]


async def test_a_request_that_keeps_hanging_is_tried_twice_then_reported_with_its_timeout(server):
    llm = LLMClient(retry=FAST, timeout=0.3, aliases=AliasTable.load(include_user_file=False))
    server.inject(Fault("hang", times=4, hang_seconds=30))
    try:
        with pytest.raises(RetriesExhausted) as caught:
            await llm.chat(settings(server), MESSAGES)
    finally:
        await llm.aclose()
    assert caught.value.attempts == 2
    assert "timed out after 0.3 s" in str(caught.value)
    assert server.base_url in str(caught.value)
    assert [r.outcome for r in server.chat_requests()] == ["hang", "hang"]


@pytest.mark.parametrize(("kind", "status"), [("bad_request", 400), ("unauthorized", 401)])
async def test_no_retry_on_client_errors(server, client, kind, status):
    server.inject(Fault(kind, times=3))
    with pytest.raises(RequestRejected) as caught:
        await client.chat(settings(server), MESSAGES)
    assert caught.value.status_code == status
    assert caught.value.endpoint == server.base_url
    assert len(server.chat_requests()) == 1


async def test_context_overflow_is_typed_and_not_retried(server, client):
    server.inject(Fault("context_overflow", times=3))
    with pytest.raises(ContextWindowExceeded):
        await client.chat(settings(server), MESSAGES)
    assert len(server.chat_requests()) == 1


async def test_context_limit_of_the_server_gives_the_same_error(client):
    async with MockOpenAIServer(context_limit=20) as small:
        with pytest.raises(ContextWindowExceeded):
            await client.chat(settings(small), [{"role": "user", "content": "word " * 200}])


async def test_retries_exhausted_is_typed_with_attempt_count(server, client):
    server.inject(Fault("server_error", times=None))
    with pytest.raises(RetriesExhausted) as caught:
        await client.chat(settings(server), MESSAGES)
    assert caught.value.attempts == FAST.max_attempts
    assert "500" in str(caught.value)
    assert len(server.chat_requests()) == FAST.max_attempts


async def test_random_faults_are_absorbed(server):
    server.inject(Fault("server_error", times=None, probability=0.3))
    llm = LLMClient(
        retry=RetryPolicy(max_attempts=12, initial_backoff=0.001, max_backoff=0.005, jitter=0.001),
        aliases=AliasTable.load(include_user_file=False),
    )
    try:
        results = [await llm.chat(settings(server), [{"role": "user", "content": f"n{i}"}]) for i in range(20)]
    finally:
        await llm.aclose()
    failures = sum(1 for r in server.chat_requests() if r.status == 500)
    assert [r.message["content"] for r in results] == [f"echo: n{i}" for i in range(20)]
    assert failures > 0
    assert sum(r.attempts for r in results) == 20 + failures


def test_retry_after_forms():
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    in_ten_seconds = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8.0 <= (parse_retry_after({"retry-after": in_ten_seconds}) or 0.0) <= 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_redaction_of_keys_and_secret_variables(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-abcdefgh12345")
    text = redact(
        "auth failed for sk-abcdefghijklmnop with api_key=hunter2hunter2 and tok-abcdefgh12345 (hf_ABCDEFGHIJKL)"
    )
    for secret in ("sk-abcdefghijklmnop", "hunter2hunter2", "tok-abcdefgh12345", "hf_ABCDEFGHIJKL"):
        assert secret not in text
    assert redact("prompt_tokens: 1234, completion_tokens=56") == "prompt_tokens: 1234, completion_tokens=56"
