"""How the ``local`` alias drives the embedded model: in a worker thread, one call at a time.

The model itself is replaced by a stand-in with the same ``complete`` signature, so these tests check the
provider's wiring (litellm custom provider, threads, lock, error translation) in milliseconds; the real
model has its own tests.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

import harness.llm.local as local_module
from harness.llm import AliasTable, ContextWindowExceeded, LLMClient, ModelHandlerError, ModelSettings


@dataclass
class Completion:
    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int


class StandInModel:
    def __init__(self, seconds: float = 0.05) -> None:
        self.seconds = seconds
        self.calls: list[dict[str, Any]] = []
        self.running = 0
        self.most_running = 0
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def complete(self, messages, tools, *, temperature=None, max_tokens=None, seed=None) -> Completion:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        self.threads.add(threading.get_ident())
        time.sleep(self.seconds)  # CPU-bound generation blocks its thread
        self.calls.append({"tools": tools, "temperature": temperature, "max_tokens": max_tokens, "seed": seed})
        with self._lock:
            self.running -= 1
        if tools:
            call = {
                "id": "call_x",
                "type": "function",
                "function": {"name": tools[0]["function"]["name"], "arguments": "{}"},
            }
            return Completion({"role": "assistant", "content": None, "tool_calls": [call]}, 30, 9)
        return Completion({"role": "assistant", "content": f"reply to {messages[-1]['content']}"}, 20, 5)


@pytest.fixture
def model(monkeypatch) -> StandInModel:
    stand_in = StandInModel()
    monkeypatch.setattr(local_module, "get_local_model", lambda: stand_in)
    return stand_in


@pytest.fixture
async def client():
    llm = LLMClient(aliases=AliasTable.load(include_user_file=False))
    yield llm
    await llm.aclose()


async def test_calls_run_one_at_a_time_off_the_event_loop(model, client):
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    beating = asyncio.create_task(heartbeat())
    results = await asyncio.gather(
        *(client.chat(ModelSettings(model="local", seed=i), [{"role": "user", "content": f"m{i}"}]) for i in range(4))
    )
    beating.cancel()
    assert [r.message["content"] for r in results] == [f"reply to m{i}" for i in range(4)]
    assert model.most_running == 1
    assert threading.get_ident() not in model.threads
    assert ticks > 0  # the loop kept running while the model worked
    # Each call reaches the model with its own seed; the order the four calls take the lock is not promised
    # (litellm's async path before the provider can reorder them on a busy machine).
    assert sorted(call["seed"] for call in model.calls) == [0, 1, 2, 3]


async def test_parameters_tools_and_usage(model, client):
    tools = [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}]
    result = await client.chat(
        ModelSettings(model="local", temperature=0.0, max_tokens=64, seed=3),
        [{"role": "user", "content": "x"}],
        tools=tools,
        role="agent",
    )
    assert model.calls[-1] == {"tools": tools, "temperature": 0.0, "max_tokens": 64, "seed": 3}
    assert result.message["tool_calls"][0]["function"]["name"] == "get_order"
    assert result.finish_reason == "tool_calls"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.cost_usd) == (30, 9, 0.0)
    assert result.usage.unpriced_requests == 0  # the embedded model is free, not of unknown price
    assert client.usage_by_role()["agent"].requests == 1


async def test_model_errors_are_translated(monkeypatch, client):
    class Overflowing:
        def complete(self, *args, **kwargs):
            raise local_module.LocalContextWindowExceeded("prompt of 9000 tokens does not fit 8192")

    monkeypatch.setattr(local_module, "get_local_model", lambda: Overflowing())
    with pytest.raises(ContextWindowExceeded, match="9000"):
        await client.chat(ModelSettings(model="local"), [{"role": "user", "content": "x"}])

    def unavailable():
        raise local_module.LocalModelUnavailable("install the local extra")

    monkeypatch.setattr(local_module, "get_local_model", unavailable)
    with pytest.raises(ModelHandlerError, match="unavailable"):
        await client.chat(ModelSettings(model="local"), [{"role": "user", "content": "x"}])
