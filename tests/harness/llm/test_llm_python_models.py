"""``python/<name>`` models: scripted handlers served in-process through litellm."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from harness.llm import (
    AliasTable,
    LLMClient,
    ModelHandlerError,
    ModelSettings,
    register_python_model,
    registered_python_models,
    unregister_python_model,
)

TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_order", "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}},
    }
]


@pytest.fixture
async def client():
    llm = LLMClient(aliases=AliasTable.load(include_user_file=False))
    yield llm
    await llm.aclose()


@pytest.fixture
def scripted():
    names: list[str] = []

    def register(name, handler):
        names.append(name)
        return register_python_model(name, handler)

    yield register
    for name in names:
        unregister_python_model(name)


async def test_handler_sees_the_request_and_its_tool_calls_come_back_in_openai_shape(client, scripted):
    seen: list[dict] = []

    def handler(request: dict) -> dict:
        seen.append(request)
        return {"content": None, "tool_calls": [{"name": "get_order", "arguments": {"id": "O-1"}}]}

    model = scripted("orders", handler)
    assert model == "python/orders" and "orders" in registered_python_models()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Find O-1"}]
    result = await client.chat(
        ModelSettings(model=model, temperature=0.3, seed=5, max_tokens=64), messages, tools=TOOLS
    )
    (request,) = seen
    assert request["messages"] == messages
    assert request["tools"] == TOOLS
    assert (request["temperature"], request["seed"], request["max_tokens"]) == (0.3, 5, 64)
    (call,) = result.message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_order"
    assert orjson.loads(call["function"]["arguments"]) == {"id": "O-1"}
    assert result.finish_reason == "tool_calls"
    assert result.model == "python/orders"


async def test_a_script_of_turns(client, scripted):
    def handler(request: dict) -> dict:
        done = sum(1 for m in request["messages"] if m["role"] == "tool")
        if done < 2:
            return {"tool_calls": [{"id": f"c{done}", "name": "get_order", "arguments": f'{{"id": "O-{done}"}}'}]}
        return {"content": "All done.", "reasoning_content": "Both orders were found."}

    model = scripted("two-steps", handler)
    messages: list[dict] = [{"role": "user", "content": "go"}]
    for _ in range(3):
        result = await client.chat(ModelSettings(model=model), messages, tools=TOOLS)
        messages.append(result.message)
        for call in result.message.get("tool_calls", []):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "{}"})
    assert [m["tool_calls"][0]["id"] for m in messages if m.get("tool_calls")] == ["c0", "c1"]
    assert messages[-1] == {
        "role": "assistant",
        "content": "All done.",
        "reasoning_content": "Both orders were found.",
    }


async def test_async_handlers_and_concurrency(client, scripted):
    async def handler(request: dict) -> dict:
        await asyncio.sleep(0.01)
        return {"content": request["messages"][-1]["content"].upper()}

    model = scripted("upper", handler)
    results = await asyncio.gather(
        *(client.chat(ModelSettings(model=model), [{"role": "user", "content": f"m{i}"}]) for i in range(20))
    )
    assert [r.message["content"] for r in results] == [f"M{i}" for i in range(20)]


async def test_a_raising_handler_is_a_typed_error_and_not_retried(client, scripted):
    calls = []

    def handler(request: dict) -> dict:
        calls.append(1)
        raise RuntimeError("script ran out")

    model = scripted("broken", handler)
    with pytest.raises(ModelHandlerError, match="script ran out") as caught:
        await client.chat(ModelSettings(model=model), [{"role": "user", "content": "x"}])
    assert len(calls) == 1
    assert isinstance(caught.value.__cause__, RuntimeError)


async def test_unknown_python_model_is_a_typed_error(client):
    with pytest.raises(ModelHandlerError, match="no python model is registered"):
        await client.chat(ModelSettings(model="python/never-registered"), [{"role": "user", "content": "x"}])


def test_names_with_a_slash_are_refused():
    with pytest.raises(ValueError):
        register_python_model("a/b", lambda request: {"content": ""})
