"""ACEBench's agent evaluation (``eval_main.py``'s ``agent_eval`` and ``agent_eval_process``, ``model_eval/
checker.py``'s ``agent_checker``) as the two checks of an imported scenario, and the call rendering its
inference writes into a result's ``process``.

End-to-end (the reward): the model's result (one ``{class: {saved attributes}}`` per involved class, empty when
no call was ever executed) must have as many entries as the ground truth; each ground-truth entry is compared with
the first result entry that has the same class name, attribute by attribute over the *result's* attributes: an
attribute the ground truth lacks fails; a dict attribute fails when a key of the ground truth's dict is missing or
differs (extra keys of the result's dict are not looked at); anything else must be equal. A ground-truth entry
that no result entry matches by name is not compared.

Process: each milestone (the exact text of an agent message that called tools) is looked for in the model's
process (each agent message upstream sent to execution: in the text setting the text the agent wrote, kept in the
message's ``call_text``; otherwise its tool calls rendered as that setting writes them) in order, from just after
the previous one found, comparing stripped text; the score is the fraction found (the best alternative, rounded to
3 decimals, when the milestones are alternatives); 1.0 when the end-to-end check holds.
"""

from __future__ import annotations

import ast
import json
from typing import Any

END_TO_END_CHECK_ID = "acebench-end-to-end"
CALL_TEXT_KEY = "call_text"
"""An assistant message's key holding the text an agent wrote its calls in (ACEBench's text setting); such a
message was sent to execution, whether or not calls could be read from it."""
PROCESS_CHECK_ID = "acebench-process"


class BadMilestone(ValueError):
    """A milestone that is not a list of calls with literal keyword arguments."""


def parse_milestone(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls of one milestone string, ``[name(key=literal, ...), ...]``."""
    try:
        body = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise BadMilestone(f"does not parse: {text!r} ({exc.msg})") from exc
    calls = body.elts if isinstance(body, ast.List | ast.Tuple) else [body]
    parsed: list[tuple[str, dict[str, Any]]] = []
    for call in calls:
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
            raise BadMilestone(f"is not a list of calls with keyword arguments: {text!r}")
        arguments: dict[str, Any] = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                raise BadMilestone(f"unpacks arguments: {text!r}")
            try:
                arguments[keyword.arg] = ast.literal_eval(keyword.value)
            except ValueError as exc:
                raise BadMilestone(f"has an argument that is not a literal: {text!r}") from exc
        parsed.append((call.func.id, arguments))
    return parsed


def render_calls(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """One agent message's calls as ACEBench's prompt-mode agent writes them: ``[name(key=repr(value), ...)]``."""
    rendered = []
    for name, arguments in calls:
        rendered.append(f"{name}({', '.join(f'{key}={value!r}' for key, value in arguments.items())})")
    return "[" + ", ".join(rendered) + "]"


def transcript_process(messages: list[dict[str, Any]]) -> list[str]:
    """The ``process`` of an episode: each assistant message sent to execution, as written or rendered."""
    process = []
    for message in messages:
        if message.get("role") == "assistant" and isinstance(message.get(CALL_TEXT_KEY), str):
            process.append(message[CALL_TEXT_KEY])
            continue
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        calls = []
        for call in message["tool_calls"]:
            function = call.get("function") or {}
            raw = function.get("arguments")
            try:
                arguments = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
            except ValueError:
                arguments = {}
            calls.append((str(function.get("name")), arguments if isinstance(arguments, dict) else {}))
        process.append(render_calls(calls))
    return process


# The checks run in the jail: the same rules, written once more with only the standard library they may use.
_END_TO_END_SOURCE = """\
import json

GROUND_TRUTH = json.loads({ground_truth!r})


def _class_holds(model_output, possible_answer):
    possible = list(possible_answer.values())[0]
    model_params = list(model_output.values())[0]
    for model_param, model_value in model_params.items():
        if model_param not in possible:
            return False
        expected = possible[model_param]
        if isinstance(expected, dict):
            for param, value in expected.items():
                if param not in model_value or value != model_value[param]:
                    return False
        elif expected != model_value:
            return False
    return True


def check(initial, final):
    result = final.get("result") if final.get("recorded") else []
    truth = GROUND_TRUTH if isinstance(GROUND_TRUTH, list) else [GROUND_TRUTH]
    if len(truth) != len(result):
        return False
    for possible_answer in truth:
        keys = set(possible_answer.keys())
        matched = None
        for model_dict in result:
            if set(model_dict.keys()) == keys:
                matched = model_dict
                break
        if matched and not _class_holds(matched, possible_answer):
            return False
    return True
"""

_PROCESS_SOURCE = """\
import json

MILESTONES = json.loads({milestones!r})


def _render(calls):
    rendered = []
    for name, arguments in calls:
        rendered.append(name + "(" + ", ".join(key + "=" + repr(value) for key, value in arguments.items()) + ")")
    return "[" + ", ".join(rendered) + "]"


def _process(transcript):
    process = []
    for message in transcript:
        if message.get("role") == "assistant" and isinstance(message.get({call_text!r}), str):
            process.append(message[{call_text!r}])
            continue
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        calls = []
        for call in message["tool_calls"]:
            function = call.get("function") or {{}}
            raw = function.get("arguments")
            try:
                arguments = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {{}})
            except ValueError:
                arguments = {{}}
            calls.append((str(function.get("name")), arguments if isinstance(arguments, dict) else {{}}))
        process.append(_render(calls))
    return process


def _found(process, stones):
    found, index = 0, 0
    for stone in stones:
        while index < len(process):
            index += 1
            if process[index - 1].strip() == stone.strip():
                found += 1
                break
    return found / len(stones) if stones else 1.0


def check(initial, final, transcript):
    process = _process(transcript)
    if MILESTONES and isinstance(MILESTONES[0], list):
        accuracy = max(round(_found(process, stones), 3) for stones in MILESTONES)
    else:
        accuracy = _found(process, MILESTONES)
    return True if accuracy == 1.0 else accuracy
"""


def end_to_end_source(ground_truth: Any) -> str:
    return _END_TO_END_SOURCE.format(ground_truth=json.dumps(ground_truth, ensure_ascii=False))


def process_source(milestones: Any) -> str:
    return _PROCESS_SOURCE.format(milestones=json.dumps(milestones, ensure_ascii=False), call_text=CALL_TEXT_KEY)
