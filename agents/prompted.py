"""The prompted agent, for models without native tool calling.

The tools are described in the system prompt and the model writes calls as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (several per message allowed).
The recorded assistant message is normalized into OpenAI ``tool_calls``, so trajectories look the same
as with native tool calling; the transcript is rendered back into text form each time the model is called.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.text_calls import TextCallAgent
from harness.rules.prompts import prompted_parse_feedback, prompted_tools_prompt
from harness.rules.protocols import AgentTurn, openai_tool_call, parse_arguments
from harness.schema import ToolCall

if TYPE_CHECKING:
    pass

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass
class ParsedReply:
    """A text reply split into its prose and its tool calls; ``error`` says why some block was unreadable."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None


def _parse_block(body: str) -> ToolCall:
    body = body.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError('no "name" string')
    raw = value.get("arguments", value.get("parameters", {}))
    arguments = parse_arguments(raw)
    if arguments is None:
        raise ValueError(f'"arguments" of {name!r} is not a JSON object')
    return ToolCall(id="", name=name, arguments=arguments)


def parse_tool_calls(text: str) -> ParsedReply:
    """Read every ``<tool_call>`` block of ``text`` (an unclosed last block is read too)."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for number, match in enumerate(_BLOCK.finditer(text), start=1):
        try:
            calls.append(_parse_block(match.group(1)))
        except ValueError as exc:
            errors.append(f"tool_call block {number}: {exc}")
    prose = _BLOCK.sub("", text).strip()
    return ParsedReply(text=prose, calls=calls, error="; ".join(errors) or None)


def _call_block(tool_call: dict[str, Any]) -> str:
    function = tool_call.get("function") or {}
    arguments = parse_arguments(function.get("arguments"))
    arguments_text = (
        json.dumps(arguments, ensure_ascii=False) if arguments is not None else json.dumps(function.get("arguments"))
    )
    name = json.dumps(function.get("name", ""), ensure_ascii=False)
    return f'<tool_call>\n{{"name": {name}, "arguments": {arguments_text}}}\n</tool_call>'


def render_for_text_model(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], prompt_version: str = "1"
) -> list[dict[str, Any]]:
    """The transcript as plain chat messages: tools in the system prompt, calls and results as text blocks."""
    tools_prompt = prompted_tools_prompt(tools, prompt_version) if tools else ""
    rendered: list[dict[str, Any]] = []
    if tools_prompt and (not messages or messages[0].get("role") != "system"):
        rendered.append({"role": "system", "content": tools_prompt})
    for message in messages:
        role = message.get("role")
        content = message.get("content") or ""
        if role == "system":
            rendered.append({"role": "system", "content": f"{content}\n\n{tools_prompt}".strip()})
        elif role == "assistant":
            parts = [content] if content else []
            parts += [_call_block(call) for call in message.get("tool_calls") or []]
            rendered.append({"role": "assistant", "content": "\n".join(parts)})
        elif role == "tool":
            name = message.get("name", "")
            block = f'<tool_response name="{name}">\n{content}\n</tool_response>'
            if rendered and rendered[-1].get("tool_responses"):
                rendered[-1]["content"] += "\n" + block
            else:
                rendered.append({"role": "user", "content": block, "tool_responses": True})
        else:
            rendered.append({"role": "user", "content": content})
    for message in rendered:
        message.pop("tool_responses", None)
    return rendered


class PromptedAgent(TextCallAgent):
    """Tool calling by text for any chat model. An unreadable reply executes nothing: the error goes back to
    the model as the next message (the loop ends the episode after several in a row)."""

    kind = "prompted"

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return render_for_text_model(messages, tools, self.settings.system_prompt_version)

    def read(self, text: str) -> AgentTurn:
        parsed = parse_tool_calls(text)
        if parsed.error is not None:
            feedback = {
                "role": "user",
                "content": prompted_parse_feedback(parsed.error, self.settings.system_prompt_version),
            }
            return AgentTurn(
                message={"role": "assistant", "content": text}, parse_error=parsed.error, feedback=feedback
            )
        message: dict[str, Any] = {"role": "assistant", "content": parsed.text or (None if parsed.calls else "")}
        if parsed.calls:
            message["tool_calls"] = [openai_tool_call(call) for call in parsed.calls]
        return AgentTurn(message=message, tool_calls=parsed.calls)
