"""The Parquet projection of records: one row per record, one fixed schema per config.

Every record type and every row config (SFT chat rows, ShareGPT rows, leaderboard rows) has a fixed list of
columns declared as ``datasets.Features``: scalars are typed columns, nested records are structs and lists of
structs (messages, tool calls, steps, checks, check results, usage per role), and only free-form values
(states, JSON-schema parameters, tool arguments and results, open settings) are JSON text. The card's
``dataset_info`` carries the same features. ``rows_to_records(records_to_rows(x)) == x``.

The layout is versioned apart from the records (``LAYOUT_VERSION``; the records carry their own
``schema_version``). Schema 1.1 added a check's ``gate``: a layout 2 dataset written before has no such struct
field, reads back with it null, and the check recovers it from its description (see ``harness.schema.Check``).
Layout 1 stored every nested value as JSON text in a column named ``<field>_json``; datasets in that layout
still read back (``rows_to_records`` and ``table_rows_to_generic`` accept both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from harness.hub.codec import (
    BOOL,
    FLOAT,
    INT,
    JSON,
    STRING,
    TIMESTAMP,
    Codec,
    JsonText,
    KeyedList,
    ListOf,
    OpenStruct,
    Struct,
    hf_datasets,
    is_text,
    loads,
)
from harness.schema import Environment, RunManifest, Scenario, Trajectory

LAYOUT_VERSION = "2"
# The parquet schema metadata key under which a published file says which record type its rows are.
METADATA_KEY = b"envharness"
"""Version of the Hub layout: 2 has typed nested columns; 1 had JSON text in ``<field>_json`` columns."""
JSON_SUFFIX = "_json"
"""Suffix of the JSON-text columns of layout 1."""


@dataclass(frozen=True)
class Column:
    name: str
    codec: Codec
    description: str
    compute: Callable[[Any], Any] | None = None
    """For derived columns: computed from the record for filtering, ignored when rows become records."""
    absent_when_null: bool = False
    """A null cell is a field the record left out (its default applies): a column added after records were
    published without it, or one most records do not have."""


@dataclass(frozen=True)
class Projection:
    record_type: str
    model: type[BaseModel] | None
    """The record model, or None for row configs (rows are plain dicts)."""
    columns: tuple[Column, ...]
    drop_nulls: bool = False
    """Row configs: leave null cells out of the dicts read back (a row had no such key)."""

    @property
    def features(self) -> Any:
        return hf_datasets.Features({c.name: c.codec.feature() for c in self.columns})

    @property
    def schema(self) -> pa.Schema:
        return self.features.arrow_schema

    @property
    def stored(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.compute is None)

    def describe(self) -> list[tuple[str, str, str]]:
        """(column, type, meaning) for the card."""
        return [(c.name, c.codec.label, c.description) for c in self.columns]


def _scalar(name: str, description: str, codec: Codec = STRING) -> Column:
    return Column(name, codec, description)


def _optional_json(name: str, description: str) -> Column:
    return Column(name, JSON, description + " As JSON text, or null when the record has none.", absent_when_null=True)


# ------------------------------------------------------------------------------------------ shared shapes

PROVENANCE = Struct(
    {
        "source": STRING,
        "model": STRING,
        "prompt_version": STRING,
        "created_at": TIMESTAMP,
        "upstream_id": STRING,
        "details": JSON,
    }
)
PROVENANCE_TEXT = (
    "Where the record came from: {source, model, prompt_version, created_at, upstream_id, details (JSON text)}."
)
REFERENCE_ACTION = Struct({"name": STRING, "arguments": JSON, "masked_arguments": ListOf(STRING)})
SCRIPTED_TURN = Struct(
    {"content": STRING, "tools_added": ListOf(STRING), "reference_actions": ListOf(REFERENCE_ACTION)}
)
TOOL = Struct({"type": STRING, "function": Struct({"name": STRING, "description": STRING, "parameters": JSON})})
TOOL_CALL = Struct({"id": STRING, "type": STRING, "function": Struct({"name": STRING, "arguments": STRING})})


def _is_openai_tool_calls(value: Any) -> bool:
    if not isinstance(value, list):
        return False
    for call in value:
        if not isinstance(call, dict) or set(call) - {"id", "type", "function"}:
            return False
        function = call.get("function")
        if not isinstance(function, dict) or set(function) - {"name", "arguments"}:
            return False
        if not isinstance(function.get("arguments", ""), str):
            return False
    return True


MESSAGE_FIELDS: dict[str, Codec] = {
    "role": STRING,
    "content": STRING,
    "reasoning_content": STRING,
    "tool_calls": ListOf(TOOL_CALL),
    "tool_call_id": STRING,
    "name": STRING,
}
MESSAGE_ACCEPTS: dict[str, Callable[[Any], bool]] = {
    "role": is_text,
    "content": is_text,
    "reasoning_content": is_text,
    "tool_calls": _is_openai_tool_calls,
    "tool_call_id": is_text,
    "name": is_text,
}
MESSAGE = OpenStruct(MESSAGE_FIELDS, always=("content",), accepts=MESSAGE_ACCEPTS)
"""A trajectory's chat message: OpenAI keys typed; anything else kept as JSON text in ``extra``."""
SFT_MESSAGE = OpenStruct(MESSAGE_FIELDS, always=("content",), accepts=MESSAGE_ACCEPTS, extra=None)
"""A training message: only the OpenAI keys chat templates read."""
MESSAGES_TEXT = (
    "The conversation as OpenAI chat messages: list of {role, content, reasoning_content, tool_calls: "
    "list of {id, type, function: {name, arguments (JSON text)}}, tool_call_id, name}"
)

DIFF = Struct({"path": JSON, "op": STRING, "before": JSON, "after": JSON})
DIFF_TEXT = "{path (JSON list of keys), op (add, remove, change), before (JSON text), after (JSON text)}"
MODEL_SETTINGS = Struct(
    {"model": STRING, "temperature": FLOAT, "top_p": FLOAT, "max_tokens": INT, "seed": INT, "extra": JSON}
)
AGENT_SETTINGS = Struct({"kind": STRING, "role": STRING, "model": MODEL_SETTINGS, "system_prompt_version": STRING})
AGENT_TEXT = (
    "{kind, role, model: {model, temperature, top_p, max_tokens, seed, extra (JSON text)}, system_prompt_version}"
)
USAGE = Struct(
    {
        "requests": INT,
        "prompt_tokens": INT,
        "completion_tokens": INT,
        "cost_usd": FLOAT,
        "cached_requests": INT,
        "model_seconds": FLOAT,
    }
)

# ------------------------------------------------------------------------------------------ record types

ENVIRONMENT = Projection(
    "environment",
    Environment,
    (
        _scalar("schema_version", "Version of the record schema."),
        _scalar("id", "Environment id (scenarios refer to it)."),
        _scalar("name", "Human-readable name."),
        _scalar("domain", "Application domain."),
        _scalar("summary", "One-paragraph summary."),
        _scalar("introduction", "Agent-facing description of the system and its policy."),
        Column("rules", ListOf(STRING), "Policy rules the agent must follow."),
        Column(
            "state_entities",
            ListOf(Struct({"name": STRING, "attributes": ListOf(STRING), "description": STRING})),
            "State entities: list of {name, attributes, description}.",
        ),
        Column(
            "tools",
            ListOf(TOOL),
            "OpenAI function-calling tool schemas: list of {type, function: {name, description, parameters}}; "
            "`parameters` is the JSON schema as JSON text.",
        ),
        _scalar("class_name", "Name of the environment class defined in `code`."),
        _scalar("code", "Python source of the environment class, as plain text."),
        Column("provenance", PROVENANCE, PROVENANCE_TEXT),
        _scalar(
            "call_dispatcher",
            "Method that receives every tool call unvalidated as (name, arguments), or null (a benchmark's classes).",
        ),
        _optional_json("user_tools", "Tools the simulated user calls under dual control (same shape as `tools`)."),
    ),
)

SCENARIO = Projection(
    "scenario",
    Scenario,
    (
        _scalar("schema_version", "Version of the record schema."),
        _scalar("id", "Scenario id."),
        _scalar("environment_id", "Id of the environment (row of the `environments` config)."),
        Column("initial_state", JSON, "Initial state of the environment, as JSON text (free-form per environment)."),
        _scalar("task", "The whole request, as given to the agent in non-conversational mode."),
        Column(
            "user_profile",
            Struct(
                {
                    "persona": STRING,
                    "goal": STRING,
                    "known_info": ListOf(STRING),
                    "withheld_info": ListOf(STRING),
                    "instructions": STRING,
                }
            ),
            "Simulated user for conversational mode: {persona, goal, known_info, withheld_info, instructions}, "
            "or null.",
        ),
        Column(
            "checks",
            ListOf(Struct({"id": STRING, "description": STRING, "source": STRING, "gate": STRING})),
            "Checklist scored on the final state: list of {id, description, source, gate}; `source` defines "
            "`check(initial_state, final_state)` or `check_func(final_state)`; `gate` is the id of the check a "
            "guard check is counted only once (null for other checks).",
        ),
        Column(
            "reference_actions",
            ListOf(REFERENCE_ACTION),
            "Reference solution: list of {name, arguments (JSON text), masked_arguments}.",
        ),
        _scalar("reference_reply", "What a correct agent tells the user at the end, or null."),
        Column("gold_final_state", JSON, "Expected final state as JSON text, or null."),
        _scalar("difficulty", "Difficulty label, or null."),
        Column("tags", ListOf(STRING), "Free-form tags."),
        Column("provenance", PROVENANCE, PROVENANCE_TEXT),
        Column(
            "turns",
            ListOf(SCRIPTED_TURN),
            "Scripted user turns in order: list of {content, tools_added, reference_actions}; empty when the "
            "user is simulated.",
        ),
        _scalar("max_steps_per_turn", "Tool-calling agent turns allowed per user turn, or null.", INT),
        _optional_json(
            "user_reference_actions", "Reference calls of the simulated user's own tools under dual control."
        ),
        _optional_json(
            "judged_checks", "Checks an LLM judge decides: list of {id, kind, description, asked, prompts}."
        ),
    ),
)


def _reward_value(name: str) -> Callable[[Trajectory], Any]:
    return lambda t: getattr(t.reward, name) if t.reward is not None else None


TRAJECTORY = Projection(
    "trajectory",
    Trajectory,
    (
        _scalar("schema_version", "Version of the record schema."),
        _scalar("episode_id", "Episode id (unique within the run)."),
        _scalar("run_id", "Run id, or null."),
        _scalar("scenario_id", "Scenario the agent worked."),
        _scalar("environment_id", "Environment of the scenario."),
        _scalar("mode", "`nonconv` (whole task up front) or `conv` (simulated user)."),
        _scalar("trial", "Trial index for repeated episodes of one scenario.", INT),
        Column("agent", AGENT_SETTINGS, "Agent settings: " + AGENT_TEXT + "."),
        Column("user", AGENT_SETTINGS, "Simulated-user settings (same shape as `agent`), or null."),
        Column("tools", ListOf(TOOL), "Tool schemas offered to the agent (same shape as an environment's)."),
        Column("messages", ListOf(MESSAGE), MESSAGES_TEXT + ", extra (any other keys, as JSON text)}."),
        Column(
            "steps",
            ListOf(
                Struct(
                    {
                        "index": INT,
                        "turn": INT,
                        "call": Struct({"id": STRING, "name": STRING, "arguments": JSON, "raw_arguments": STRING}),
                        "observation": Struct(
                            {
                                "tool_call_id": STRING,
                                "name": STRING,
                                "kind": STRING,
                                "content": JSON,
                                "error": STRING,
                                "process_ended": BOOL,
                            }
                        ),
                        "state_diff": ListOf(DIFF),
                        "duration_ms": FLOAT,
                    }
                )
            ),
            "Executed tool calls: list of {index, turn, call: {id, name, arguments (JSON text), raw_arguments}, "
            "observation: {tool_call_id, name, kind, content (JSON text), error, process_ended (the call ended the "
            "environment's process)}, state_diff: list of " + DIFF_TEXT + ", duration_ms}.",
        ),
        Column("final_state_diff", ListOf(DIFF), "Difference between initial and final state: list of " + DIFF_TEXT),
        Column(
            "check_results",
            ListOf(
                Struct({"check_id": STRING, "passed": BOOL, "value": STRING, "error": STRING, "passed_at_reset": BOOL})
            ),
            "Per-check outcome: list of {check_id, passed, value (repr of a non-True result), error, passed_at_reset}.",
        ),
        Column(
            "reward",
            Struct(
                {
                    "state_reward": FLOAT,
                    "delta_reward": FLOAT,
                    "success": BOOL,
                    "checks_passed": INT,
                    "checks_total": INT,
                    "trajectory_reward": FLOAT,
                    "length_penalty": FLOAT,
                    "gold_state_match": BOOL,
                    "composite": FLOAT,
                }
            ),
            "Reward breakdown: {state_reward, delta_reward, success, checks_passed, checks_total, "
            "trajectory_reward, length_penalty, gold_state_match, composite}, or null when unscored.",
        ),
        _scalar(
            "termination",
            "Why the episode ended (agent_done, user_stop, max_steps, context_overflow, agent_error, tool_exception, "
            "environment_error, infra_error).",
        ),
        _scalar("termination_detail", "Detail of the termination, or null."),
        Column(
            "failure",
            Struct({"at_fault": STRING, "detail": STRING}),
            "Who is at fault when the episode ended in environment_error or infra_error: {at_fault (environment, "
            "model_endpoint or harness), detail}, or null.",
        ),
        Column(
            "usage",
            KeyedList("role", STRING, USAGE),
            "Token usage and cost per role: list of {role, requests, prompt_tokens, completion_tokens, cost_usd, "
            "cached_requests, model_seconds}.",
        ),
        Column(
            "timings",
            Struct(
                {
                    "started_at": TIMESTAMP,
                    "ended_at": TIMESTAMP,
                    "wall_seconds": FLOAT,
                    "model_seconds": FLOAT,
                    "tool_seconds": FLOAT,
                    "scoring_seconds": FLOAT,
                }
            ),
            "Timings: {started_at, ended_at, wall_seconds, model_seconds, tool_seconds, scoring_seconds}.",
        ),
        Column("errors", ListOf(STRING), "Errors recorded during the episode."),
        _optional_json("user_steps", "The simulated user's own tool calls under dual control (same shape as `steps`)."),
        _optional_json("judge", "What an LLM judge was asked and answered for the judged checks, with its verdicts."),
        Column("agent_model", STRING, "Derived: the agent's model string.", lambda t: t.agent.model.model),
        Column("success", BOOL, "Derived: `reward.success`.", _reward_value("success")),
        Column("state_reward", FLOAT, "Derived: `reward.state_reward`.", _reward_value("state_reward")),
        Column("num_tool_calls", INT, "Derived: number of executed tool calls.", lambda t: len(t.steps)),
    ),
)

RUN_MANIFEST = Projection(
    "run_manifest",
    RunManifest,
    (
        _scalar("schema_version", "Version of the record schema."),
        _scalar("run_id", "Run id."),
        Column("created_at", TIMESTAMP, "When the run started (UTC)."),
        _scalar("package_version", "Version of the harness that ran it."),
        _scalar("git_revision", "Git revision of the harness, or null."),
        Column(
            "dataset",
            Struct({"source": STRING, "revision": STRING, "fingerprint": STRING}),
            "Environments and scenarios used: {source, revision, fingerprint}.",
        ),
        Column("config", JSON, "Run configuration (models, modes, trials, limits), as JSON text."),
        Column("model_resolution", JSON, "How each model alias was resolved (provider model, api base), as JSON text."),
        _scalar("episodes_planned", "Number of episodes the run planned.", INT),
        Column(
            "cluster", JSON, "Ray cluster the episodes ran on: {address, ray_version, nodes} as JSON text, or null."
        ),
    ),
)

# -------------------------------------------------------------------------------------------- row configs


@dataclass(frozen=True)
class ToolsText(JsonText):
    """Tool schemas as JSON text (what TRL and LlamaFactory read); a value that already is text is kept."""

    parse: bool = True

    def encode(self, value: Any) -> Any:
        if isinstance(value, str):
            loads(value)  # must be JSON
            return value
        return super().encode(value)

    def decode(self, value: Any) -> Any:
        return super().decode(value) if self.parse else value


SFT_CHAT = Projection(
    "sft_chat",
    None,
    (
        Column("messages", ListOf(SFT_MESSAGE), MESSAGES_TEXT + "}. TRL's SFTTrainer reads this column as it is."),
        Column(
            "tools",
            ToolsText(),
            "Tool schemas offered in the conversation, as JSON text of a list of OpenAI function-calling tools "
            "(TRL's SFTTrainer parses it and passes it to the chat template).",
        ),
        _scalar("episode_id", "Episode the row came from."),
        _scalar("scenario_id", "Scenario the row came from."),
        _scalar("environment_id", "Environment the row came from."),
        _scalar("mode", "`nonconv` or `conv`."),
        _scalar("state_reward", "State reward of the source episode (checks passed / total).", FLOAT),
        _scalar("tokens", "Length of the sample in tokens (the conversation with its tools).", INT),
    ),
    drop_nulls=True,
)

SHAREGPT = Projection(
    "sft_sharegpt",
    None,
    (
        Column(
            "conversations",
            ListOf(Struct({"from": STRING, "value": STRING})),
            "ShareGPT turns: list of {from, value}; `from` is human, gpt, function_call or observation. A "
            "function_call turn's value is `<think>reasoning</think>` and the assistant's text, if any, "
            "followed by the call(s) as JSON.",
        ),
        _scalar("system", "System prompt."),
        Column("tools", ToolsText(parse=False), "Tool schemas as JSON text (LlamaFactory's `tools` column)."),
        _scalar("episode_id", "Episode the row came from."),
        _scalar("scenario_id", "Scenario the row came from."),
        _scalar("turn", "With one sample per assistant turn: the turn's index; otherwise null.", INT),
        _scalar("tokens", "Length of the sample in tokens.", INT),
    ),
    drop_nulls=True,
)

KEYED_FLOAT = KeyedList("name", STRING, FLOAT, value_field="mean_state_reward")
LEADERBOARD = Projection(
    "leaderboard",
    None,
    (
        _scalar("rank", "Rank within its table (1 is best).", INT),
        _scalar("model", "The agent's model."),
        _scalar("settings", "Readable summary of the agent (and simulated-user) settings."),
        _scalar("settings_id", "Short hash of the full settings; one row per value."),
        Column("agent", AGENT_SETTINGS, "Agent settings: " + AGENT_TEXT + "."),
        Column("user", AGENT_SETTINGS, "Simulated-user settings, or null."),
        _scalar("dataset_source", "Environment set the runs were measured on (folder or Hub id)."),
        _scalar("dataset_revision", "Revision of the environment set, or null."),
        _scalar("dataset_fingerprint", "Content fingerprint of the environments and scenarios."),
        Column("runs", ListOf(STRING), "Run ids aggregated into the row."),
        _scalar("episodes", "Episodes in the row.", INT),
        _scalar("scored", "Episodes that were scored.", INT),
        _scalar("infra_errors", "Episodes that ended in infrastructure errors (not averaged in).", INT),
        _scalar("unscored", "Episodes without a score for another reason.", INT),
        _scalar("tasks", "Distinct (scenario, mode) tasks.", INT),
        _scalar("mean_state_reward", "Mean fraction of checks passed.", FLOAT),
        _scalar("mean_delta_reward", "Mean pass rate over the checks that were false at reset.", FLOAT),
        _scalar("success_rate", "Fraction of scored episodes with every check passed.", FLOAT),
        Column(
            "reward_ci95",
            ListOf(FLOAT),
            "95% confidence interval [low, high] of the mean state reward (normal approximation), or null.",
        ),
        Column(
            "success_ci95", ListOf(FLOAT), "95% confidence interval [low, high] of the success rate (Wilson), or null."
        ),
        Column(
            "pass_hat_k",
            KeyedList("k", INT, FLOAT, value_field="value"),
            "pass^k (τ-bench): list of {k, value}, the chance that k trials of a task all succeed.",
        ),
        Column("per_domain", KEYED_FLOAT, "Mean state reward per domain: list of {name, mean_state_reward}."),
        Column("per_mode", KEYED_FLOAT, "Mean state reward per mode: list of {name, mean_state_reward}."),
        _scalar("mean_tokens", "Mean tokens per episode.", FLOAT),
        _scalar("mean_cost_usd", "Mean cost per episode in US dollars.", FLOAT),
        _scalar("total_cost_usd", "Total cost in US dollars.", FLOAT),
        Column(
            "terminations",
            KeyedList("reason", STRING, INT, value_field="count"),
            "Episodes per termination reason: list of {reason, count}.",
        ),
    ),
)

PROJECTIONS: dict[str, Projection] = {
    p.record_type: p for p in (ENVIRONMENT, SCENARIO, TRAJECTORY, RUN_MANIFEST, SFT_CHAT, SHAREGPT, LEADERBOARD)
}
RECORD_PROJECTIONS = ("environment", "scenario", "trajectory", "run_manifest")
ROW_PROJECTIONS = ("sft_chat", "sft_sharegpt", "leaderboard")
GENERIC_ROW = "row"
"""Record type of layout-1 rows that were plain JSON objects (SFT rows, leaderboard rows)."""
