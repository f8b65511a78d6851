"""SFT datasets from teacher rollouts: filter, de-duplicate, and export in the forms trainers take.

- ``messages.jsonl``: OpenAI-style ``messages`` + ``tools`` rows (TRL's SFT trainer and most chat templates).
- ``sharegpt.jsonl``: LlamaFactory's ShareGPT form (``conversations`` with human / gpt / function_call /
  observation turns, ``system``, ``tools`` as a JSON string); with ``split_turns``, also
  ``sharegpt_turns.jsonl``: one sample per assistant turn with the earlier turns as history.
  A function_call turn keeps the assistant's reasoning and text in a leading ``<think>…</think>`` block: the
  only free text LlamaFactory's function_call turn takes (its formatter splits it off and renders it before
  the call).
- ``dataset_info.json``: LlamaFactory's entries for the ShareGPT files (copy them into its
  ``data/dataset_info.json``, or point ``dataset_dir`` at this folder).
- ``stats.json``: what was kept and dropped and why, and turns, tool calls and tokens per sample. Tokens are
  the sample's own length (its messages and tool schemas through litellm's tokenizer for the teacher model),
  not the teacher's API usage, which counts every request's whole prompt.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

from harness.exact_sum import ExactSum
from harness.schema import TerminationReason, Trajectory


class SelectionRule(BaseModel):
    min_reward: float | None = Field(
        default=None, description="Keep episodes with state_reward ≥ this; None requires success."
    )
    allow_errors: bool = Field(default=False, description="Keep episodes that recorded agent-side errors.")


class SftStats(BaseModel):
    episodes: int
    kept: int
    dropped: dict[str, int]
    samples: dict[str, int] = Field(default_factory=dict, description="Rows written per file.")
    turns: dict[str, float] = Field(default_factory=dict)
    tool_calls: dict[str, float] = Field(default_factory=dict)
    tokens: dict[str, float] = Field(default_factory=dict)


def _drop_reason(trajectory: Trajectory, rule: SelectionRule) -> str | None:
    if trajectory.termination is TerminationReason.INFRA_ERROR:
        return "infra_error"
    if trajectory.reward is None:
        return "unscored"
    if rule.min_reward is None and not trajectory.reward.success:
        return "not_successful"
    if rule.min_reward is not None and trajectory.reward.state_reward < rule.min_reward:
        return "below_min_reward"
    if trajectory.errors and not rule.allow_errors:
        return "agent_errors"
    return None


def _signature(trajectory: Trajectory) -> bytes:
    calls = [(s.call.name, s.call.arguments) for s in trajectory.steps]
    key = [trajectory.scenario_id, trajectory.mode, calls]
    return hashlib.sha256(orjson.dumps(key, option=orjson.OPT_SORT_KEYS)).digest()


class Selection:
    """Which episodes reach the bar, one per distinct (scenario, mode, tool-call sequence), decided one episode at a
    time: of the episodes kept only a digest of their signature is held."""

    def __init__(self, rule: SelectionRule) -> None:
        self.rule = rule
        self.episodes = 0
        self.kept = 0
        self.dropped: Counter[str] = Counter()
        self._seen: set[bytes] = set()

    def keep(self, trajectory: Trajectory) -> bool:
        self.episodes += 1
        reason = _drop_reason(trajectory, self.rule)
        if reason is None:
            signature = _signature(trajectory)
            if signature in self._seen:
                reason = "duplicate"
            else:
                self._seen.add(signature)
        if reason is not None:
            self.dropped[reason] += 1
            return False
        self.kept += 1
        return True


def select(trajectories: Iterable[Trajectory], rule: SelectionRule) -> tuple[list[Trajectory], Counter[str]]:
    """Trajectories that reach the bar, one per distinct (scenario, mode, tool-call sequence)."""
    selection = Selection(rule)
    kept = [trajectory for trajectory in trajectories if selection.keep(trajectory)]
    return kept, selection.dropped


def _clean_message(message: dict[str, Any], keep_reasoning: bool) -> dict[str, Any]:
    clean: dict[str, Any] = {"role": message["role"], "content": message.get("content")}
    if message.get("tool_calls"):
        clean["tool_calls"] = message["tool_calls"]
    if message.get("tool_call_id"):
        clean["tool_call_id"] = message["tool_call_id"]
    if keep_reasoning and message.get("reasoning_content"):
        clean["reasoning_content"] = message["reasoning_content"]
    if clean["content"] is None and message["role"] != "assistant":
        clean["content"] = ""
    return clean


TokenCounter = Callable[[dict[str, Any]], int]
"""The length in tokens of one exported row (chat or ShareGPT)."""


def executed_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with each assistant turn's tool calls cut to those that got a result.

    Under rules that run only the first call of a turn (``first_call_only``), the model may have asked for more; a
    training row must not teach calls whose results it never shows (and OpenAI-format trainers reject a call
    without its result). A turn none of whose calls was answered (the episode ended on it) is kept whole."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    result = []
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls:
            kept = [call for call in calls if isinstance(call, dict) and call.get("id") in answered]
            if kept and len(kept) < len(calls):
                message = {**message, "tool_calls": kept}
        result.append(message)
    return result


def to_messages_row(trajectory: Trajectory, keep_reasoning: bool = True) -> dict[str, Any]:
    return {
        "messages": [_clean_message(m, keep_reasoning) for m in executed_messages(trajectory.messages)],
        "tools": [t.model_dump(mode="json") for t in trajectory.tools],
        "episode_id": trajectory.episode_id,
        "scenario_id": trajectory.scenario_id,
        "environment_id": trajectory.environment_id,
        "mode": trajectory.mode,
        "state_reward": trajectory.reward.state_reward if trajectory.reward else None,
    }


def sharegpt_text(row: dict[str, Any]) -> str:
    """Everything a ShareGPT sample feeds the model, for counting its tokens."""
    parts = [str(row.get("system") or ""), str(row.get("tools") or "")]
    parts += [turn["value"] for turn in row["conversations"]]
    return "\n".join(parts)


def litellm_counter(model: str | None) -> TokenCounter:
    """Counts rows with litellm's tokenizer for MODEL (cl100k when litellm does not know the model)."""
    from harness.llm.tokens import count_tokens

    def count(row: dict[str, Any]) -> int:
        if "messages" in row:
            return count_tokens(model, messages=row["messages"], tools=row.get("tools"))
        return count_tokens(model, text=sharegpt_text(row))

    return count


def _assistant_text(message: dict[str, Any], keep_reasoning: bool) -> str:
    text = message.get("content") or ""
    if keep_reasoning and message.get("reasoning_content"):
        text = f"<think>\n{message['reasoning_content']}\n</think>\n\n{text}"
    return str(text)


def _function_call_value(message: dict[str, Any]) -> str:
    calls = []
    for call in message["tool_calls"]:
        arguments = call["function"].get("arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            parsed = arguments
        calls.append({"name": call["function"]["name"], "arguments": parsed})
    return json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)


def _tool_turn_thought(message: dict[str, Any], keep_reasoning: bool) -> str:
    """The reasoning and text of a tool-call turn as the ``<think>`` block LlamaFactory splits off, or ""."""
    parts = []
    if keep_reasoning and message.get("reasoning_content"):
        parts.append(str(message["reasoning_content"]).strip())
    if isinstance(message.get("content"), str) and message["content"].strip():
        parts.append(message["content"].strip())
    return f"<think>\n{chr(10).join(parts)}\n</think>\n" if parts else ""


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def to_sharegpt_row(trajectory: Trajectory, keep_reasoning: bool = True) -> dict[str, Any]:
    """LlamaFactory's ShareGPT form; parallel tool results are merged into one observation (a JSON list)."""
    system = ""
    conversations: list[dict[str, str]] = []
    pending_observations: list[str] = []

    def flush_observations() -> None:
        if len(pending_observations) == 1:
            conversations.append({"from": "observation", "value": pending_observations[0]})
        elif pending_observations:
            merged = json.dumps([_parsed(o) for o in pending_observations], ensure_ascii=False)
            conversations.append({"from": "observation", "value": merged})
        pending_observations.clear()

    for message in executed_messages(trajectory.messages):
        role = message["role"]
        if role == "system":
            system = str(message.get("content") or "")
            continue
        if role == "tool":
            pending_observations.append(str(message.get("content") or ""))
            continue
        flush_observations()
        if role == "user":
            conversations.append({"from": "human", "value": str(message.get("content") or "")})
        elif role == "assistant" and message.get("tool_calls"):
            thought = _tool_turn_thought(message, keep_reasoning)
            conversations.append({"from": "function_call", "value": thought + _function_call_value(message)})
        elif role == "assistant":
            conversations.append({"from": "gpt", "value": _assistant_text(message, keep_reasoning)})
    flush_observations()
    tools = [t.function.model_dump(mode="json") for t in trajectory.tools]
    return {
        "conversations": conversations,
        "system": system,
        "tools": json.dumps(tools, ensure_ascii=False),
        "episode_id": trajectory.episode_id,
        "scenario_id": trajectory.scenario_id,
    }


def split_turns(row: dict[str, Any]) -> list[dict[str, Any]]:
    """One sample per assistant turn (gpt or function_call), with every earlier turn as history."""
    samples: list[dict[str, Any]] = []
    for index, turn in enumerate(row["conversations"]):
        if turn["from"] in ("gpt", "function_call"):
            samples.append({**row, "conversations": row["conversations"][: index + 1], "turn": len(samples)})
    return samples


class Distribution:
    """Values counted as they come (each distinct value with its count): their mean, median, min and max as
    :mod:`statistics` gives them for the list of values."""

    def __init__(self) -> None:
        self.counts: Counter[float] = Counter()

    def add(self, value: float) -> None:
        self.counts[value] += 1

    def describe(self) -> dict[str, float]:
        n = self.counts.total()
        if not n:
            return {}
        total = ExactSum()
        for value, count in self.counts.items():
            total.add(value, count)
        ordered = sorted(self.counts)
        middle = (
            self._nth(ordered, n // 2)
            if n % 2 == 1
            else (self._nth(ordered, n // 2 - 1) + self._nth(ordered, n // 2)) / 2
        )
        return {"mean": total.value / n, "median": middle, "min": ordered[0], "max": ordered[-1]}

    def _nth(self, ordered: list[float], index: int) -> float:
        """The value at ``index`` of the sorted list of values."""
        for value in ordered:
            index -= self.counts[value]
            if index < 0:
                return value
        raise IndexError(index)


SHAREGPT_FORMAT: dict[str, Any] = {
    "formatting": "sharegpt",
    "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
    "tags": {
        "role_tag": "from",
        "content_tag": "value",
        "user_tag": "human",
        "assistant_tag": "gpt",
        "observation_tag": "observation",
        "function_tag": "function_call",
    },
}
"""How LlamaFactory reads our ShareGPT rows (the format part of a ``dataset_info.json`` entry)."""


def llamafactory_entries(stems: list[str], prefix: str = "envharness") -> dict[str, Any]:
    """LlamaFactory ``dataset_info.json`` entries for local ShareGPT files."""
    return {f"{prefix}_{stem}": {"file_name": f"{stem}.jsonl", **SHAREGPT_FORMAT} for stem in stems}


def export(
    trajectories: Iterable[Trajectory],
    out: Path,
    *,
    rule: SelectionRule | None = None,
    keep_reasoning: bool = True,
    split: bool = False,
    count_tokens: TokenCounter | None = None,
) -> SftStats:
    """Write the SFT files for the trajectories that reach the bar, and return the statistics. Each trajectory is
    selected, converted and written as it comes (none is held).

    Each row records its length in ``tokens``; ``count_tokens`` defaults to litellm's tokenizer for the
    teacher's model (the first kept episode's)."""
    selection = Selection(rule or SelectionRule())
    out.mkdir(parents=True, exist_ok=True)
    stems = ["messages", "sharegpt", *(["sharegpt_turns"] if split else [])]
    samples = dict.fromkeys(stems, 0)
    turns, tool_calls, tokens = Distribution(), Distribution(), Distribution()
    with ExitStack() as files:
        handles = {stem: files.enter_context((out / f"{stem}.jsonl").open("wb")) for stem in stems}

        def write(stem: str, row: dict[str, Any]) -> None:
            handles[stem].write(orjson.dumps(row) + b"\n")
            samples[stem] += 1

        for trajectory in trajectories:
            if not selection.keep(trajectory):
                continue
            if count_tokens is None:
                count_tokens = litellm_counter(trajectory.agent.model.model)
            messages_row = to_messages_row(trajectory, keep_reasoning)
            sharegpt_row = to_sharegpt_row(trajectory, keep_reasoning)
            turn_rows = split_turns(sharegpt_row) if split else []
            for stem, rows in (
                ("messages", [messages_row]),
                ("sharegpt", [sharegpt_row]),
                ("sharegpt_turns", turn_rows),
            ):
                for row in rows:
                    row["tokens"] = count_tokens(row)
                    write(stem, row)
            turns.add(sum(m["role"] == "assistant" for m in trajectory.messages))
            tool_calls.add(len(trajectory.steps))
            tokens.add(float(messages_row["tokens"]))
    sharegpt_stems = [stem for stem in stems if stem.startswith("sharegpt")]
    (out / "dataset_info.json").write_bytes(
        orjson.dumps(llamafactory_entries(sharegpt_stems), option=orjson.OPT_INDENT_2) + b"\n"
    )
    stats = SftStats(
        episodes=selection.episodes,
        kept=selection.kept,
        dropped=dict(selection.dropped),
        samples=samples,
        turns=turns.describe(),
        tool_calls=tool_calls.describe(),
        tokens=tokens.describe(),
    )
    (out / "stats.json").write_bytes(orjson.dumps(stats.model_dump(mode="json"), option=orjson.OPT_INDENT_2))
    return stats
