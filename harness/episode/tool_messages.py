"""What the agent sees of a tool call, and the tool schemas a session is opened with.

A tool message carries the tool's own result or an error the agent can act on, written as the episode rules say
(JSON, Python's ``str()`` of the value, or the environment's own text: ``EpisodeRules.tool_result_format``). Under rules
that pass arguments through, the session gets schemas without types (:func:`pass_through_tools`), so any value
reaches the method.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from harness.rules.profiles import EpisodeRules
from harness.schema import Environment, Observation, ObservationKind, ToolSpec
from harness.toolspec import ToolDerivationError, derive_tools


def observation_content(observation: Observation, rules: EpisodeRules | None = None) -> str:
    """The text of a ``tool`` message: the tool's own result, or an error the agent can act on; as JSON, or as
    Python's ``str()`` of the value under rules whose ``tool_result_format`` is ``python``."""
    result_kinds = (ObservationKind.OK, ObservationKind.TOOL_ERROR)
    if rules is not None and rules.tool_result_format == "text":
        # The environment's text as it is, an exception as "Error: <message>", as such benchmarks write them.
        if observation.kind not in result_kinds:
            return f"Error: {observation.error or observation.kind.value}"
        content = observation.content
        return content if isinstance(content, str) else json.dumps(content, default=str)
    if observation.kind is ObservationKind.OK or (
        observation.kind is ObservationKind.TOOL_ERROR and observation.content is not None
    ):
        payload: Any = observation.content
    else:
        payload = {
            "success": False,
            "error": observation.error or observation.kind.value,
            "error_type": observation.kind.value,
        }
    if rules is not None and rules.tool_result_format == "python":
        return str(payload)
    return json.dumps(payload, ensure_ascii=False, default=str)


def tool_message(observation: Observation, rules: EpisodeRules | None = None) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": observation.tool_call_id,
        "name": observation.name,
        "content": observation_content(observation, rules),
    }


def pass_through_tools(environment: Environment) -> list[ToolSpec]:
    """Tool schemas that let any argument value through: every public method with its parameter names and the
    parameters Python requires, and no types. The sandbox still refuses an unknown or missing keyword, which is
    what Python itself would raise on."""
    derived = _pass_through_from_code(environment.code, environment.class_name)
    if derived is not None:
        return list(derived)
    return [_without_types(tool) for tool in environment.tools]


@functools.lru_cache(maxsize=256)
def _pass_through_from_code(code: str, class_name: str) -> tuple[ToolSpec, ...] | None:
    """Parsed once per environment class, not once per episode."""
    try:
        return tuple(_without_types(tool) for tool in derive_tools(code, class_name))
    except ToolDerivationError:
        return None


def _without_types(tool: ToolSpec) -> ToolSpec:
    parameters = tool.function.parameters or {}
    spec = {
        "type": "object",
        "properties": {name: {} for name in parameters.get("properties") or {}},
        "required": list(parameters.get("required") or []),
    }
    return tool.model_copy(update={"function": tool.function.model_copy(update={"parameters": spec})})
