"""Chat formatting for the embedded local model: OpenAI messages rendered as Gemma 3 turns, and the model's
constrained JSON reply parsed back into an OpenAI assistant message."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

TOOL_RESULT_CHAR_LIMIT = 4000
OMITTED_TURNS_NOTE = "[Earlier turns of this conversation were omitted to fit the context window.]"

TURN_START = "<start_of_turn>"
TURN_END = "<end_of_turn>"

TOOL_REPLY_FORMAT = """Reply with exactly one JSON object and nothing else:
- to call a tool: {"tool_call": {"name": "<tool name>", "arguments": {<arguments>}}}
- to answer without calling a tool: {"response": "<your answer>"}
After each tool call you are shown its result; then reply again.

Example:
User: What is the status of order A-7?
Assistant: {"tool_call": {"name": "lookup_order", "arguments": {"order_id": "A-7"}}}
Tool result (lookup_order): {"order_id": "A-7", "status": "shipped"}
Assistant: {"response": "Order A-7 has shipped."}"""

TEXT_REPLY_FORMAT = """Reply with exactly one JSON object and nothing else: {"response": "<your reply>"}

Example:
User: Can you tell me what time the store opens?
Assistant: {"response": "The store opens at 9 am."}"""


@dataclass(frozen=True)
class Turn:
    """One Gemma 3 turn: ``user`` (system text, user text, tool results) or ``model``."""

    role: Literal["user", "model"]
    text: str

    def render(self) -> str:
        return f"{TURN_START}{self.role}\n{self.text}{TURN_END}\n"


@dataclass
class RenderedPrompt:
    """The token ids given to the model, and which turns made it in."""

    tokens: list[int]
    turns: list[Turn]
    omitted_turns: int = 0
    text: str = field(default="")


def tool_functions(tools: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ``function`` parts of OpenAI tool dicts (bare function dicts are accepted too)."""
    functions: list[dict[str, Any]] = []
    for tool in tools or []:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"not a tool definition: {tool!r}")
        functions.append(function)
    return functions


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text", "") if isinstance(part, dict) else str(part) for part in content]
        return "\n".join(part for part in parts if part)
    return json.dumps(content, ensure_ascii=False)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} characters cut]"


def _tools_block(functions: list[dict[str, Any]]) -> str:
    lines = []
    for function in functions:
        entry = {
            "name": function["name"],
            "description": function.get("description", ""),
            "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        }
        lines.append(json.dumps(entry, ensure_ascii=False))
    return "You can use these tools:\n" + "\n".join(lines)


def _assistant_text(message: dict[str, Any]) -> str:
    lines: list[str] = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        raw_arguments = function.get("arguments")
        try:
            arguments = json.loads(raw_arguments) if isinstance(raw_arguments, str) else raw_arguments
        except json.JSONDecodeError:
            arguments = raw_arguments
        payload = {"tool_call": {"name": function.get("name"), "arguments": arguments or {}}}
        lines.append(json.dumps(payload, ensure_ascii=False))
    if lines:
        return "\n".join(lines)
    return json.dumps({"response": _content_text(message.get("content"))}, ensure_ascii=False)


def render_turns(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> list[Turn]:
    """Turn OpenAI messages into alternating Gemma 3 turns, starting with a user turn.

    System text, the tool list (if any), the JSON reply format with a short worked example, and
    the first user message form the first user turn; earlier assistant replies are shown in that
    format. Tool results are user-side turns; consecutive same-side messages are merged so that
    the turns alternate.
    """
    functions = tool_functions(tools)
    call_names: dict[str, str] = {}
    system_parts: list[str] = []
    pieces: list[tuple[Literal["user", "model"], str]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            text = _content_text(message.get("content")).strip()
            if not text:
                continue
            if pieces:
                pieces.append(("user", f"System: {text}"))
            else:
                system_parts.append(text)
        elif role == "user":
            pieces.append(("user", f"User: {_content_text(message.get('content'))}"))
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                call_names[str(call.get("id"))] = str(call.get("function", {}).get("name", ""))
            pieces.append(("model", _assistant_text(message)))
        elif role == "tool":
            name = message.get("name") or call_names.get(str(message.get("tool_call_id")), "tool")
            result = _clip(_content_text(message.get("content")), TOOL_RESULT_CHAR_LIMIT)
            pieces.append(("user", f"Tool result ({name}): {result}"))
        else:
            raise ValueError(f"unsupported message role: {role!r}")

    preamble = list(system_parts)
    preamble += [_tools_block(functions), TOOL_REPLY_FORMAT] if functions else [TEXT_REPLY_FORMAT]
    if not pieces or pieces[0][0] != "user":
        pieces.insert(0, ("user", ""))
    first_text = "\n\n".join(part for part in [*preamble, pieces[0][1]] if part)
    pieces[0] = ("user", first_text)

    turns: list[Turn] = []
    for role, text in pieces:
        if turns and turns[-1].role == role:
            turns[-1] = Turn(role, f"{turns[-1].text}\n{text}")
        else:
            turns.append(Turn(role, text))
    return turns


def with_omission_note(turn: Turn) -> Turn:
    return Turn(turn.role, f"{turn.text}\n\n{OMITTED_TURNS_NOTE}")


GENERATION_PROMPT = f"{TURN_START}model\n"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_choice(text: str, tool_names: set[str]) -> tuple[dict[str, Any], bool]:
    """Turn the model's constrained JSON into an OpenAI assistant message.

    Returns the message and whether it holds a tool call. Output that is not one complete choice
    (it can only happen when generation hit the token limit) becomes a text reply of the raw output.
    """
    stripped = text.strip()
    try:
        # strict=False: the grammar lets raw newlines into strings, which strict JSON forbids.
        choice = json.loads(stripped, strict=False)
    except json.JSONDecodeError:
        return {"role": "assistant", "content": stripped}, False
    if isinstance(choice, dict):
        call = choice.get("tool_call")
        if isinstance(call, dict) and call.get("name") in tool_names:
            arguments = call.get("arguments")
            arguments = arguments if isinstance(arguments, dict) else {}
            tool_call = {
                "id": new_call_id(),
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(arguments, ensure_ascii=False)},
            }
            return {"role": "assistant", "content": None, "tool_calls": [tool_call]}, True
        response = choice.get("response")
        if isinstance(response, str):
            return {"role": "assistant", "content": response}, False
    return {"role": "assistant", "content": stripped}, False
