"""Alias resolution (bundled file, user file, environment) and the unreachable-endpoint error."""

from __future__ import annotations

import asyncio
import socket

import pytest

from harness.llm import (
    AliasTable,
    EndpointUnreachable,
    LLMClient,
    ModelSettings,
    RetryPolicy,
    env_name,
)
from tests.doubles.mock_openai import MockOpenAIServer

VLLM_COMMAND = (
    "vllm serve Qwen/Qwen3-8B --served-model-name qwen3-8b --enable-auto-tool-choice --tool-call-parser hermes"
)


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_bundled_qwen_aliases():
    table = AliasTable.load(include_user_file=False, environ={})
    resolved = table.resolve("qwen3-8b")
    assert resolved.alias == "qwen3-8b"
    assert resolved.provider_model == "hosted_vllm/qwen3-8b"
    assert resolved.api_base == "http://localhost:8000/v1"
    assert resolved.params == {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    assert resolved.serve_hint == VLLM_COMMAND
    thinking = table.resolve("qwen3-8b-thinking")
    assert thinking.provider_model == "hosted_vllm/qwen3-8b"
    assert thinking.params["extra_body"]["chat_template_kwargs"]["enable_thinking"] is True
    assert table.resolve("qwen3-0.6b").provider_model == "hosted_vllm/qwen3-0.6b"
    assert {"qwen3-4b", "qwen3-14b", "qwen3-32b"} <= set(table.names)


def test_local_alias_points_at_the_in_process_provider():
    resolved = AliasTable.load(include_user_file=False, environ={}).resolve("local")
    assert resolved.provider_model == "harness_local/gemma-3-270m"
    assert resolved.api_base is None and resolved.endpoint == "harness_local"


def test_other_strings_pass_through_unchanged():
    table = AliasTable.load(include_user_file=False, environ={})
    for model in ("openai/gpt-4o-mini", "anthropic/claude-3-5-sonnet", "gpt-4o", "hosted_vllm/qwen3-8b"):
        resolved = table.resolve(model)
        assert (resolved.alias, resolved.provider_model, resolved.api_base, resolved.params) == (None, model, None, {})


def test_environment_overrides_the_api_base():
    assert env_name("qwen3-0.6b") == "QWEN3_0_6B"
    table = AliasTable.load(
        include_user_file=False,
        environ={
            "HARNESS_API_BASE_QWEN3_8B": "http://gpu-1:8000/v1",
            "HARNESS_MODEL_QWEN3_0_6B_API_BASE": "http://gpu-2:9000/v1",
        },
    )
    assert table.resolve("qwen3-8b").api_base == "http://gpu-1:8000/v1"
    # The thinking variant is the same server, so it follows its base alias.
    assert table.resolve("qwen3-8b-thinking").api_base == "http://gpu-1:8000/v1"
    assert table.resolve("qwen3-0.6b").api_base == "http://gpu-2:9000/v1"
    assert table.resolve("qwen3-4b").api_base == "http://localhost:8000/v1"


def test_generic_variable_wins_over_the_short_one():
    table = AliasTable.load(
        include_user_file=False,
        environ={"HARNESS_API_BASE_QWEN3_8B": "http://a/v1", "HARNESS_MODEL_QWEN3_8B_API_BASE": "http://b/v1"},
    )
    assert table.resolve("qwen3-8b").api_base == "http://b/v1"


def test_user_file_adds_and_overrides(tmp_path, monkeypatch):
    user_file = tmp_path / "models.toml"
    user_file.write_text(
        """
[aliases.qwen3-8b]
api_base = "http://box:8001/v1"
params = { extra_body = { top_k = 20 } }

[aliases.mine]
model = "openai/my-model"
api_base = "http://box:9000/v1"
api_key_env = "MY_SERVER_KEY"
"""
    )
    monkeypatch.setenv("HARNESS_MODELS_FILE", str(user_file))
    table = AliasTable.load(environ={})
    qwen = table.resolve("qwen3-8b")
    assert qwen.api_base == "http://box:8001/v1"
    assert qwen.provider_model == "hosted_vllm/qwen3-8b"
    assert qwen.params["extra_body"] == {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20}
    mine = table.resolve("mine")
    assert (mine.provider_model, mine.api_key_env) == ("openai/my-model", "MY_SERVER_KEY")


def test_a_broken_user_file_is_reported_with_its_path(tmp_path):
    user_file = tmp_path / "models.toml"
    user_file.write_text("[aliases.x]\nmodel = 3\n")
    with pytest.raises(ValueError, match="'x'"):
        AliasTable.load(user_file=user_file, environ={})
    user_file.write_text("not = [valid")
    with pytest.raises(ValueError, match=r"models\.toml"):
        AliasTable.load(user_file=user_file, environ={})


async def test_alias_request_reaches_the_overridden_endpoint_with_its_parameters(monkeypatch):
    async with MockOpenAIServer() as server:
        monkeypatch.setenv("HARNESS_API_BASE_QWEN3_8B", server.base_url)
        client = LLMClient(aliases=AliasTable.load(include_user_file=False))
        result = await client.chat(
            ModelSettings(model="qwen3-8b", temperature=0.2, seed=7), [{"role": "user", "content": "hi"}]
        )
        thinking = await client.chat(ModelSettings(model="qwen3-8b-thinking"), [{"role": "user", "content": "hi"}])
        await client.aclose()
        first, second = server.chat_requests()
    assert first.body is not None and second.body is not None
    assert result.message["content"] == "echo: hi" and result.model == "hosted_vllm/qwen3-8b"
    assert thinking.message["content"] == "echo: hi"
    assert first.model == "qwen3-8b"
    assert first.body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (first.body["temperature"], first.body["seed"]) == (0.2, 7)
    assert second.body["chat_template_kwargs"] == {"enable_thinking": True}


async def test_unreachable_alias_names_endpoint_and_how_to_start_it(monkeypatch):
    url = closed_port_url()
    monkeypatch.setenv("HARNESS_MODEL_QWEN3_8B_API_BASE", url)
    client = LLMClient(
        retry=RetryPolicy(initial_backoff=0.01, jitter=0.0), aliases=AliasTable.load(include_user_file=False)
    )
    with pytest.raises(EndpointUnreachable) as caught:
        await client.chat(ModelSettings(model="qwen3-8b"), [{"role": "user", "content": "hi"}])
    await client.aclose()
    message = str(caught.value)
    assert url in message
    assert VLLM_COMMAND in message
    assert "HARNESS_MODEL_QWEN3_8B_API_BASE" in message
    assert caught.value.endpoint == url
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


async def test_unreachable_plain_model_string_gets_the_same_kind_of_error():
    url = closed_port_url()
    client = LLMClient(
        retry=RetryPolicy(initial_backoff=0.01, jitter=0.0), aliases=AliasTable.load(include_user_file=False)
    )
    with pytest.raises(EndpointUnreachable, match="vllm serve"):
        await client.chat(
            ModelSettings(model="hosted_vllm/my-model", extra={"api_base": url}), [{"role": "user", "content": "x"}]
        )
    await client.aclose()


async def test_endpoint_that_answered_before_gets_the_full_retry_budget():
    client = LLMClient(
        retry=RetryPolicy(max_attempts=5, unreachable_attempts=1, initial_backoff=0.01, jitter=0.0),
        aliases=AliasTable.load(include_user_file=False),
    )
    server = MockOpenAIServer()
    await server.start()
    settings = ModelSettings(model="hosted_vllm/echo", extra={"api_base": server.base_url})
    await client.chat(settings, [{"role": "user", "content": "x"}])
    port = server.port
    await server.stop()

    async def restart_soon() -> MockOpenAIServer:
        await asyncio.sleep(0.05)
        again = MockOpenAIServer(port=port)
        await again.start()
        return again

    restarter = asyncio.create_task(restart_soon())
    result = await client.chat(settings, [{"role": "user", "content": "after restart"}])
    restarted = await restarter
    assert result.message["content"] == "echo: after restart"
    assert result.attempts >= 2
    assert len(restarted.chat_requests()) == 1
    await restarted.stop()
    await client.aclose()
