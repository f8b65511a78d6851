"""Trajectories in the Agent Trajectory Interchange Format (ATIF-v1.4), which trace viewers and trainers read.

One ATIF document per episode. Each message becomes a step: the system prompt a ``system`` step, user turns
``user`` steps, and each assistant turn an ``agent`` step whose tool calls keep their ids and whose observation
holds the tool messages that answered them (``source_call_id`` = the call's id), in the order the agent saw them.
The episode's reward, checks, termination and versions go in the document's ``extra``; the agent's token usage
and cost in ``final_metrics`` (the simulated user's in its ``extra``). A trainer's rollout that recorded the policy's
tokens gives each agent step its completion token ids and logprobs (and the first its prompt's ids).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from harness import __version__
from harness.files.outputs import OutputFolder
from harness.results.store import StoredResults
from harness.schema import PolicyTokens, Trajectory

ATIF_VERSION = "ATIF-v1.4"
SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
AGENT_NAME = "envharness"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return orjson.dumps(content, default=str).decode()


def _arguments(function: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The call's arguments as an object, and the raw text when it was not one (ATIF requires an object)."""
    raw = function.get("arguments")
    if isinstance(raw, dict):
        return raw, None
    if not isinstance(raw, str) or not raw.strip():
        return {}, None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}, raw
    return (parsed, None) if isinstance(parsed, dict) else ({}, raw)


def _agent_step(message: dict[str, Any], step_id: int, model: str) -> dict[str, Any]:
    step: dict[str, Any] = {
        "step_id": step_id,
        "source": "agent",
        "model_name": model,
        "message": _text(message.get("content")),
    }
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        step["reasoning_content"] = reasoning
    calls: list[dict[str, Any]] = []
    unreadable: dict[str, str] = {}
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments, raw = _arguments(function)
        call_id = str(call.get("id") or f"call_{step_id}_{len(calls)}")
        calls.append(
            {"tool_call_id": call_id, "function_name": str(function.get("name") or ""), "arguments": arguments}
        )
        if raw is not None:
            unreadable[call_id] = raw
    if calls:
        step["tool_calls"] = calls
    if unreadable:
        step["extra"] = {"unparsed_arguments": unreadable}
    return step


def policy_spans(tokens: PolicyTokens) -> list[tuple[list[int], list[float]]]:
    """The policy's own runs of completion tokens (env_mask 1), in order: one per assistant turn it generated."""
    spans: list[tuple[list[int], list[float]]] = []
    previous = 0
    for token, logprob, mask in zip(tokens.completion_ids, tokens.logprobs, tokens.env_mask, strict=False):
        if mask:
            if not previous:
                spans.append(([], []))
            spans[-1][0].append(token)
            spans[-1][1].append(logprob)
        previous = mask
    return spans


def attach_policy_tokens(steps: list[dict[str, Any]], tokens: PolicyTokens) -> bool:
    """Put each generated turn's token ids and logprobs on its agent step (the prompt's on the first); False when
    the turns and the steps do not pair up one to one."""
    agent_steps = [step for step in steps if step["source"] == "agent"]
    spans = policy_spans(tokens)
    if not agent_steps or len(spans) != len(agent_steps):
        return False
    for index, (step, (ids, logprobs)) in enumerate(zip(agent_steps, spans, strict=True)):
        metrics = step.setdefault("metrics", {})
        metrics["completion_token_ids"] = ids
        metrics["logprobs"] = logprobs
        if index == 0:
            metrics["prompt_token_ids"] = list(tokens.prompt_ids)
    return True


def to_atif(trajectory: Trajectory) -> dict[str, Any]:
    """The ATIF document of one episode."""
    model = trajectory.agent.model.model
    steps: list[dict[str, Any]] = []
    for message in trajectory.messages:
        role = message.get("role")
        if role == "tool":
            owner = steps[-1] if steps and steps[-1]["source"] == "agent" else None
            result = {"source_call_id": message.get("tool_call_id"), "content": _text(message.get("content"))}
            if owner is None:  # a tool message with no agent turn before it: kept, attached to nothing
                steps.append(
                    {"step_id": len(steps) + 1, "source": "system", "message": "", "observation": {"results": [result]}}
                )
                continue
            owner.setdefault("observation", {"results": []})["results"].append(result)
        elif role == "assistant":
            steps.append(_agent_step(message, len(steps) + 1, model))
        elif role in ("system", "user"):
            steps.append({"step_id": len(steps) + 1, "source": role, "message": _text(message.get("content"))})
    tokens_extra: dict[str, Any] | None = None
    if trajectory.policy_tokens is not None and not attach_policy_tokens(steps, trajectory.policy_tokens):
        tokens_extra = trajectory.policy_tokens.model_dump(mode="json")
    agent_usage = trajectory.usage.get("agent")
    final_metrics: dict[str, Any] = {"total_steps": len(steps)}
    if agent_usage is not None:
        final_metrics.update(
            total_prompt_tokens=agent_usage.prompt_tokens,
            total_completion_tokens=agent_usage.completion_tokens,
            total_cost_usd=agent_usage.cost_usd,
        )
    others = {role: usage.model_dump(mode="json") for role, usage in trajectory.usage.items() if role != "agent"}
    if others:
        final_metrics["extra"] = {"usage_by_role": others}
    agent_extra = {
        "kind": trajectory.agent.kind,
        "system_prompt_version": trajectory.agent.system_prompt_version,
        "settings": trajectory.agent.model.model_dump(mode="json", exclude={"model"}),
    }
    if trajectory.user is not None:
        agent_extra["user_model"] = trajectory.user.model.model
    return {
        "schema_version": ATIF_VERSION,
        "session_id": trajectory.episode_id,
        "agent": {"name": AGENT_NAME, "version": __version__, "model_name": model, "extra": agent_extra},
        "steps": steps,
        "final_metrics": final_metrics,
        "extra": {
            "run_id": trajectory.run_id,
            "environment_id": trajectory.environment_id,
            "scenario_id": trajectory.scenario_id,
            "mode": trajectory.mode,
            "trial": trajectory.trial,
            "termination": trajectory.termination.value,
            "reward": trajectory.reward.model_dump(mode="json") if trajectory.reward else None,
            "check_results": [result.model_dump(mode="json") for result in trajectory.check_results],
            "failure": trajectory.failure.model_dump(mode="json") if trajectory.failure else None,
            "versions": trajectory.versions.model_dump(mode="json") if trajectory.versions else None,
            **({"policy_tokens": tokens_extra} if tokens_extra is not None else {}),
        },
    }


class UnsafeEpisodeId(ValueError):
    """An episode id that cannot name a file (a damaged or hostile record)."""


def write_atif(results: StoredResults, out: Path) -> int:
    """One ``<episode_id>.json`` per episode of ``results`` in ``out``; returns how many were written. Every id, and
    every path it makes inside ``out``, is checked (from the ids alone) before anything is written; then each
    episode is read, converted and written in turn."""
    for episode_id in results.ids():
        if not SAFE_FILE_NAME.fullmatch(episode_id):
            raise UnsafeEpisodeId(f"episode id {episode_id[:80]!r} cannot name a file; nothing was written")
    folder = OutputFolder(out)
    for episode_id in results.ids():
        folder.path(f"{episode_id}.json")
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for trajectory in results:
        document = orjson.dumps(to_atif(trajectory), option=orjson.OPT_INDENT_2) + b"\n"
        folder.write_bytes(f"{trajectory.episode_id}.json", document)
        written += 1
    return written
