"""The embedded local model (Gemma 3 270M through llama-cpp-python), loaded for real.

Every generation is bounded by ``max_tokens``, so the suite stays a few seconds long on two cores.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.llm.local import (
    OMITTED_TURNS_NOTE,
    LocalCompletion,
    LocalContextWindowExceeded,
    LocalModel,
    LocalModelUnavailable,
    ensure_model_file,
    get_local_model,
    import_backend,
    parse_choice,
    render_turns,
    tool_choice_gbnf,
)

pytestmark = pytest.mark.local_model

SYSTEM = (
    "You are the customer service agent of an online shop. Policy: only orders that have not "
    "shipped can be cancelled; look an order up before changing it."
)
TASK = "Please cancel my order O-1001, I ordered the wrong size."
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order by its id.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "Order id, e.g. O-1"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel an order that has not shipped.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "reason": {"type": "string", "enum": ["wrong_size", "changed_mind", "other"]},
                },
                "required": ["order_id", "reason"],
            },
        },
    },
]
TASK_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": TASK},
]


@pytest.fixture(scope="module")
def model() -> LocalModel:
    return get_local_model()


def assert_valid_reply(completion: LocalCompletion, tools: list[dict[str, Any]] | None) -> bool:
    """Check the OpenAI shape of the reply; returns whether it is a tool call."""
    message = completion.message
    assert message["role"] == "assistant"
    calls = message.get("tool_calls") or []
    if not calls:
        assert isinstance(message["content"], str)
        assert completion.finish_reason in {"stop", "length"}
        return False
    assert tools, "a tool call was made although no tools were offered"
    assert len(calls) == 1
    call = calls[0]
    assert call["id"].startswith("call_") and call["type"] == "function"
    specs = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    assert call["function"]["name"] in specs
    arguments = json.loads(call["function"]["arguments"])
    assert isinstance(arguments, dict)
    schema = specs[call["function"]["name"]]
    assert set(schema.get("required", [])) <= arguments.keys()
    assert arguments.keys() <= schema["properties"].keys()
    for key, value in arguments.items():
        if "enum" in schema["properties"][key]:
            assert value in schema["properties"][key]["enum"]
    assert message["content"] is None
    assert completion.finish_reason == "tool_calls"
    return True


def test_task_with_two_tools_gets_a_structurally_valid_reply(model: LocalModel) -> None:
    completion = model.complete(TASK_MESSAGES, TOOLS, temperature=0.0, seed=0, max_tokens=96)
    assert_valid_reply(completion, TOOLS)
    assert completion.prompt_tokens > 100
    assert 0 < completion.completion_tokens <= 96


def test_sampled_replies_usually_call_a_tool_and_threads_are_serialised(model: LocalModel) -> None:
    completions: dict[int, LocalCompletion] = {}

    def work(seed: int) -> None:
        completions[seed] = model.complete(TASK_MESSAGES, TOOLS, temperature=0.7, seed=seed, max_tokens=96)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(completions) == [1, 2]
    tool_calls = [assert_valid_reply(completion, TOOLS) for completion in completions.values()]
    assert any(tool_calls), [completion.message for completion in completions.values()]


def test_a_tool_result_turn_leads_to_another_valid_reply(model: LocalModel) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_order", "arguments": json.dumps({"order_id": "O-1001"})},
    }
    messages = [
        *TASK_MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"status": "processing"})},
    ]
    completion = model.complete(messages, TOOLS, temperature=0.0, seed=0, max_tokens=96)
    assert_valid_reply(completion, TOOLS)


def test_without_tools_the_reply_is_text(model: LocalModel) -> None:
    messages = [
        {"role": "system", "content": "You are a customer who wants order O-1001 cancelled."},
        {"role": "user", "content": "Hello, how can I help you today?"},
    ]
    completion = model.complete(messages, None, temperature=0.7, seed=0, max_tokens=48)
    assert not completion.message.get("tool_calls")
    assert isinstance(completion.message["content"], str)
    assert completion.finish_reason in {"stop", "length"}
    assert 0 < completion.completion_tokens <= 48


def test_the_assembled_model_file_is_reused(tmp_path: Path) -> None:
    first = ensure_model_file(tmp_path)
    before = first.stat()
    second = ensure_model_file(tmp_path)
    after = second.stat()
    assert second == first
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    assert [path.name for path in tmp_path.iterdir()] == [first.name]  # no temporary file left behind


def test_long_conversations_drop_middle_turns_but_keep_system_and_task(model: LocalModel) -> None:
    messages: list[dict[str, Any]] = list(TASK_MESSAGES)
    for index in range(30):
        call_id = f"call_{index}"
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"O-{index}"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        result = {"order_id": f"O-{index}", "marker": f"RESULT-{index}", "notes": "lorem ipsum " * 40}
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})

    small = LocalModel(model.model_path, n_ctx=1024)
    try:
        prompt = small.build_prompt(messages, TOOLS, budget=1024 - 64)
        assert prompt.omitted_turns > 0 and prompt.omitted_turns % 2 == 0
        assert len(prompt.tokens) <= 1024 - 64
        first = prompt.turns[0]
        assert first.role == "user" and SYSTEM in first.text and TASK in first.text
        assert OMITTED_TURNS_NOTE in first.text
        roles = [turn.role for turn in prompt.turns]
        assert roles == [("user", "model")[index % 2] for index in range(len(roles))] and roles[-1] == "user"
        assert "RESULT-29" in prompt.turns[-1].text and 'RESULT-0"' not in prompt.text

        completion = small.complete(messages, TOOLS, temperature=0.0, seed=0, max_tokens=64)
        assert completion.omitted_turns == prompt.omitted_turns
        assert completion.prompt_tokens == len(prompt.tokens)
        assert_valid_reply(completion, TOOLS)

        with pytest.raises(LocalContextWindowExceeded):
            small.build_prompt(TASK_MESSAGES, TOOLS, budget=50)
    finally:
        small.close()


def test_rendering_folds_system_text_into_the_first_user_turn() -> None:
    messages = [
        *TASK_MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "no such order"},
        {"role": "user", "content": "Did it work?"},
    ]
    turns = render_turns(messages, TOOLS)
    assert [turn.role for turn in turns] == ["user", "model", "user"]
    assert turns[0].text.startswith(SYSTEM) and turns[0].text.endswith(f"User: {TASK}")
    assert json.dumps(TOOLS[1]["function"]["parameters"]) in turns[0].text
    assert json.loads(turns[1].text) == {"tool_call": {"name": "get_order", "arguments": {}}}
    assert turns[2].text == "Tool result (get_order): no such order\nUser: Did it work?"
    assert turns[0].render().startswith("<start_of_turn>user\n")
    assert turns[1].render().endswith("<end_of_turn>\n")


def test_schemas_outside_the_grammar_subset_still_give_a_grammar() -> None:
    awkward = {
        "type": "function",
        "function": {
            "name": "book",
            "parameters": {
                "type": "object",
                "$defs": {"Slot": {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}}},
                "properties": {
                    "slot": {"$ref": "#/$defs/Slot"},
                    "seats": {"type": ["integer", "null"], "default": 1, "minimum": 1},
                    "extra": {"type": "mystery"},
                },
                "required": ["slot", "missing_key"],
            },
        },
    }
    broken = {
        "type": "function",
        "function": {
            "name": "tag",
            "parameters": {
                "type": "object",
                "properties": {"tags": {"type": "array", "items": {"type": "string"}, "minItems": "two"}},
            },
        },
    }
    grammar = tool_choice_gbnf([awkward])
    assert '"\\"book\\""' in grammar and "root ::=" in grammar and "day" in grammar

    # A schema the converter rejects costs only that tool its argument constraints.
    grammar = tool_choice_gbnf([awkward, broken])
    assert '"\\"book\\""' in grammar and '"\\"tag\\""' in grammar and "day" in grammar
    assert "tags" not in grammar


def test_constrained_output_becomes_an_openai_message() -> None:
    message, is_call = parse_choice(
        '{ "tool_call": {"name": "get_order", "arguments": {"order_id": "O-1"}} } ', {"get_order"}
    )
    assert is_call and message["content"] is None
    assert message["tool_calls"][0]["function"] == {"name": "get_order", "arguments": '{"order_id": "O-1"}'}

    message, is_call = parse_choice('{"response": "line one\nline two"}', {"get_order"})  # raw newline
    assert not is_call and message == {"role": "assistant", "content": "line one\nline two"}

    truncated = '{"tool_call": {"name": "get_order", "arguments": {"order_id": "O-1'
    message, is_call = parse_choice(truncated, {"get_order"})
    assert not is_call and message == {"role": "assistant", "content": truncated}


def test_a_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(LocalModelUnavailable, match=r"pip install 'envharness\[local\]'"):
        import_backend()
