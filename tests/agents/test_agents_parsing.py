"""Reading tool calls and rendering transcripts: native tool calls, prompted <tool_call> blocks, stop tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.factory import build_agent, build_agent_from_settings
from agents.function_calling import outgoing_message
from agents.oracle import ORACLE_FINAL_MESSAGE, OracleAgent
from agents.prompted import parse_tool_calls, render_for_text_model
from harness.rules.prompts import (
    PROMPT_SETS,
    agent_system_prompt,
    prompt_set,
    prompted_tools_prompt,
    user_system_prompt,
)
from harness.rules.protocols import (
    OUT_OF_SCOPE,
    STOP,
    TRANSFER,
    AgentPolicy,
    agent_turn_from_message,
    find_stop_token,
    openai_tool_call,
    split_reasoning,
    tool_calls_from_message,
)
from harness.schema import (
    AgentSettings,
    Environment,
    ModelSettings,
    ReferenceAction,
    Scenario,
    ToolCall,
    UserProfile,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": []},
        },
    }
]


# ------------------------------------------------------------------------------------- native tool calls


def test_native_tool_calls_keep_ids_and_parse_arguments() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "abc", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "O-1"}'}},
            {"id": "def", "type": "function", "function": {"name": "list_orders", "arguments": ""}},
        ],
    }
    calls = tool_calls_from_message(message)
    assert [c.id for c in calls] == ["abc", "def"]
    assert calls[0].arguments == {"order_id": "O-1"}
    assert calls[1].arguments == {}
    assert calls[0].raw_arguments is None


@pytest.mark.parametrize("raw", ['{"order_id": "O-1"', "[1, 2]", '"text"', "not json at all"])
def test_broken_argument_json_gives_none_with_raw_text(raw: str) -> None:
    message = {"role": "assistant", "tool_calls": [{"function": {"name": "get_order", "arguments": raw}}]}
    (call,) = tool_calls_from_message(message)
    assert call.arguments is None
    assert call.raw_arguments == raw
    assert call.id == ""
    assert openai_tool_call(call)["function"]["arguments"] == raw


def test_malformed_tool_call_entries_never_raise() -> None:
    message = {"role": "assistant", "tool_calls": ["junk", {"id": "x", "function": "nope"}]}
    calls = tool_calls_from_message(message)
    assert len(calls) == 2
    assert calls[0].name == "" and calls[0].arguments is None
    assert calls[1].id == "x" and calls[1].name == "" and calls[1].arguments == {}


def test_agent_turn_from_message_keeps_reasoning_and_normalizes() -> None:
    reply = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "The user wants O-1.",
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "get_order", "arguments": "{bad"}}],
        "provider_specific_fields": {"x": 1},
    }
    turn = agent_turn_from_message(reply)
    assert turn.message == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "The user wants O-1.",
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "get_order", "arguments": "{bad"}}],
    }
    assert turn.tool_calls[0].arguments is None and turn.parse_error is None
    text = agent_turn_from_message({"role": "assistant", "content": None})
    assert text.message == {"role": "assistant", "content": ""} and text.tool_calls == []
    inline = agent_turn_from_message({"role": "assistant", "content": "<think>Easy.</think>\n\nDone."})
    assert inline.message == {"role": "assistant", "content": "Done.", "reasoning_content": "Easy."}


def test_outgoing_message_drops_reasoning_and_keeps_tool_fields() -> None:
    assistant = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "thinking...",
        "tool_calls": [openai_tool_call(ToolCall(id="c1", name="get_order", arguments={}))],
    }
    sent = outgoing_message(assistant)
    assert "reasoning_content" not in sent
    assert sent["tool_calls"][0]["id"] == "c1"
    assert sent["content"] is None
    tool = outgoing_message({"role": "tool", "tool_call_id": "c1", "name": "get_order", "content": "{}"})
    assert tool == {"role": "tool", "tool_call_id": "c1", "name": "get_order", "content": "{}"}
    assert outgoing_message({"role": "assistant", "content": None}) == {"role": "assistant", "content": ""}


# ----------------------------------------------------------------------------------- prompted tool calls


def test_parse_several_blocks_and_prose() -> None:
    text = (
        "Let me check both.\n"
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "O-1"}}</tool_call>\n'
        '<tool_call>\n{"name": "get_order", "arguments": "{\\"order_id\\": \\"O-2\\"}"}\n</tool_call>'
    )
    parsed = parse_tool_calls(text)
    assert parsed.error is None
    assert parsed.text == "Let me check both."
    assert [c.arguments for c in parsed.calls] == [{"order_id": "O-1"}, {"order_id": "O-2"}]


def test_parse_unclosed_fenced_and_parameters_alias() -> None:
    parsed = parse_tool_calls('<tool_call>```json\n{"name": "get_order", "parameters": {"order_id": "O-9"}}\n```')
    assert parsed.error is None
    assert parsed.calls[0].name == "get_order"
    assert parsed.calls[0].arguments == {"order_id": "O-9"}
    assert parsed.text == ""


@pytest.mark.parametrize(
    ("block", "fragment"),
    [
        ('{"name": "get_order", "arguments": {"order_id": }', "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"arguments": {}}', '"name"'),
        ('{"name": "get_order", "arguments": [1]}', "not a JSON object"),
    ],
)
def test_parse_errors_are_reported(block: str, fragment: str) -> None:
    parsed = parse_tool_calls(f"ok <tool_call>{block}</tool_call>")
    assert parsed.error is not None
    assert fragment in parsed.error
    assert "block 1" in parsed.error


def test_plain_text_has_no_calls() -> None:
    parsed = parse_tool_calls("The order is on its way.")
    assert parsed.calls == [] and parsed.error is None and parsed.text == "The order is on its way."


def test_render_for_text_model_round_trips_calls_and_merges_results() -> None:
    calls = [
        ToolCall(id="c1", name="get_order", arguments={"order_id": "O-1"}),
        ToolCall(id="c2", name="get_order", arguments={"order_id": "O-2"}),
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You help customers."},
        {"role": "user", "content": "Check O-1 and O-2."},
        {"role": "assistant", "content": "Checking.", "tool_calls": [openai_tool_call(c) for c in calls]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_order", "content": '{"success": true}'},
        {"role": "tool", "tool_call_id": "c2", "name": "get_order", "content": '{"success": false}'},
    ]
    rendered = render_for_text_model(messages, TOOLS)
    assert [m["role"] for m in rendered] == ["system", "user", "assistant", "user"]
    assert rendered[0]["content"].startswith("You help customers.")
    assert '"name": "get_order"' in rendered[0]["content"] and "<tool_call>" in rendered[0]["content"]
    reparsed = parse_tool_calls(rendered[2]["content"])
    assert [c.arguments for c in reparsed.calls] == [{"order_id": "O-1"}, {"order_id": "O-2"}]
    assert reparsed.text == "Checking."
    assert rendered[3]["content"].count("<tool_response") == 2
    assert all(set(m) == {"role", "content"} for m in rendered)


# --------------------------------------------------------------------------------------- stop tokens etc.


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("Thanks, that's all. ###STOP###", STOP),
        ("###TRANSFER###", TRANSFER),
        ("I'll go elsewhere ###OUT-OF-SCOPE###", OUT_OF_SCOPE),
        ("###TRANSFER### then ###STOP###", TRANSFER),
        ("STOP please", None),
    ],
)
def test_find_stop_token(text: str, token: str | None) -> None:
    assert find_stop_token(text) == token


def test_split_reasoning() -> None:
    text, reasoning = split_reasoning("<think>plan A</think>Hello <think>plan B</think>there")
    assert text == "Hello there"
    assert reasoning == "plan A\n\nplan B"
    assert split_reasoning("plain") == ("plain", None)


# ------------------------------------------------------------------------------------------------ prompts


def test_prompts_are_versioned_and_carry_the_environment() -> None:
    environment = Environment(
        id="shop",
        name="Shop",
        introduction="You are the shop's assistant.",
        rules=["Never refund twice."],
        class_name="Shop",
        code="class Shop:\n    pass\n",
    )
    nonconv = agent_system_prompt(environment, "nonconv")
    conv = agent_system_prompt(environment, "conv")
    assert nonconv.startswith("You are the shop's assistant.")
    assert "- Never refund twice." in nonconv and "- Never refund twice." in conv
    assert nonconv != conv
    assert "1" in PROMPT_SETS
    with pytest.raises(ValueError, match="unknown prompt version"):
        prompt_set("999")
    assert '"name": "get_order"' in prompted_tools_prompt(TOOLS)


def test_user_prompt_separates_known_and_withheld_info() -> None:
    profile = UserProfile(
        persona="Ana, a busy nurse.",
        goal="Cancel order O-1.",
        known_info=["Her name is Ana."],
        withheld_info=["Her order id is O-1."],
    )
    prompt = user_system_prompt(profile)
    known_at = prompt.index("Her name is Ana.")
    withheld_at = prompt.index("Her order id is O-1.")
    assert prompt.index("must not volunteer") < withheld_at
    assert known_at < prompt.index("must not volunteer")
    assert STOP in prompt and TRANSFER in prompt and OUT_OF_SCOPE in prompt


# ------------------------------------------------------------------------------------- oracle and factory


def _scenario() -> Scenario:
    return Scenario(
        id="s1",
        environment_id="shop",
        initial_state={},
        task="Cancel O-1.",
        reference_actions=[
            ReferenceAction(name="get_order", arguments={"order_id": "O-1"}),
            ReferenceAction(name="cancel_order", arguments={"order_id": "O-1"}),
        ],
    )


async def test_oracle_replays_one_call_per_turn_then_answers() -> None:
    oracle = OracleAgent(_scenario())
    assert isinstance(oracle, AgentPolicy)
    messages: list[dict] = [{"role": "system", "content": "x"}, {"role": "user", "content": "Cancel O-1."}]
    names = []
    for _ in range(3):
        turn = await oracle.act(messages, TOOLS)
        messages.append(turn.message)
        for call in turn.tool_calls:
            names.append(call.name)
            assert turn.message["tool_calls"][0]["id"] == call.id
            assert json.loads(turn.message["tool_calls"][0]["function"]["arguments"]) == call.arguments
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "{}"})
    assert names == ["get_order", "cancel_order"]
    assert messages[-1] == {"role": "assistant", "content": ORACLE_FINAL_MESSAGE}


def test_factory_builds_the_oracle_and_refuses_what_it_cannot_build() -> None:
    oracle = build_agent("oracle", None, None, scenario=_scenario())
    assert oracle.settings.kind == "oracle"
    settings = AgentSettings(kind="oracle", role="teacher", model=ModelSettings(model="oracle"))
    assert build_agent_from_settings(settings, None, scenario=_scenario()).settings.role == "teacher"
    with pytest.raises(ValueError, match="scenario"):
        build_agent("oracle", None, None)
    with pytest.raises(ValueError, match="unknown agent kind"):
        build_agent("telepathic", ModelSettings(model="x"), None)
    with pytest.raises(ValueError, match="model settings and an LLM client"):
        build_agent("function_calling", ModelSettings(model="x"), None)
