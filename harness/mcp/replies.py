"""What a served environment answers that is not the protocol's: an observation as an MCP tool result, and
whether a state loaded into a session can be this environment's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastmcp.tools.base import ToolResult
from mcp_types import TextContent

from harness.mcp.admin import OBSERVATION_META_KEY
from harness.schema import Observation, ObservationKind


def state_problems(state: Any, references: Sequence[dict[str, Any]]) -> list[str]:
    """Why STATE cannot be this environment's state, judged against the known states (default, scenarios)."""
    if not isinstance(state, dict):
        return [f"a state is a JSON object, not {type(state).__name__}"]
    references = [r for r in references if r]
    if not references:
        return []
    known = {key for reference in references for key in reference}
    required = set.intersection(*(set(reference) for reference in references))
    problems = []
    unknown = sorted(set(state) - known)
    if unknown:
        problems.append(f"unknown keys {unknown} (this environment's states have {sorted(known)})")
    missing = sorted(required - set(state))
    if missing:
        problems.append(f"missing keys {missing}")
    for key in sorted(set(state) & known):
        expected = {_json_kind(r[key]) for r in references if key in r and r[key] is not None}
        kind = _json_kind(state[key])
        if state[key] is not None and expected and kind not in expected:
            problems.append(f"{key!r} is {kind}, expected {' or '.join(sorted(expected))}")
    return problems


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def observation_text(observation: Observation) -> str:
    """The JSON text an agent reads for an observation: the tool's own result, or an error it can act on
    (the episode loop's convention, so a model sees the same text whichever runtime served the call)."""
    if observation.ok or (observation.kind is ObservationKind.TOOL_ERROR and observation.content is not None):
        payload: Any = observation.content
    else:
        payload = {
            "success": False,
            "error": observation.error or observation.kind.value,
            "error_type": observation.kind.value,
        }
    return json.dumps(payload, ensure_ascii=False, default=str)


def tool_result(observation: Observation, diff: Sequence[Any] | None = None) -> ToolResult:
    """An observation as an MCP tool result: the tool's content, or an error result carrying the error text.

    The text is what the episode loop gives an agent for the same observation; ``_meta`` records the
    observation kind (and the state diff when asked for).
    """
    meta: dict[str, Any] = {
        "kind": observation.kind.value,
        "error": observation.error,
        "has_content": observation.content is not None,
        "process_ended": observation.process_ended,
    }
    if diff is not None:
        meta["diff"] = [entry.model_dump(mode="json") for entry in diff]
    content = [TextContent(type="text", text=observation_text(observation))]
    structured = observation.content if observation.ok and isinstance(observation.content, dict) else None
    return ToolResult(
        content=content,
        structured_content=structured,
        meta={OBSERVATION_META_KEY: meta},
        is_error=not observation.ok,
    )
