"""SFT export from teacher rollouts: the rows load with `datasets`, and every tool call has its result."""

from __future__ import annotations

import importlib

import orjson
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.library import load_library
from harness.results.metrics import read_results
from harness.results.sft import SelectionRule, export, select, split_turns, to_messages_row, to_sharegpt_row
from harness.schema import Observation, Step, TerminationReason, ToolCall
from tests.doubles.mock_openai import MockOpenAIServer

hf_datasets = importlib.import_module("datasets")
LIBRARY = load_library()


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory):
    """`harness sft` end to end: a teacher (the mock model replaying references) in both modes, two attempts."""
    out = tmp_path_factory.mktemp("sft")
    server = MockOpenAIServer(record_bodies=False)
    for scenario in LIBRARY.scenarios:
        server.register_replay(
            scenario.task, [a.model_dump() for a in scenario.reference_actions], scenario.reference_reply
        )
        server.register_user(scenario.user_profile.goal if scenario.user_profile else scenario.task, [scenario.task])
    models = out / "models.toml"
    with server.running_in_thread():
        models.write_text(
            f'[aliases.teacher]\nmodel = "hosted_vllm/replay"\napi_base = "{server.base_url}"\n'
            f'[aliases.user]\nmodel = "hosted_vllm/user"\napi_base = "{server.base_url}"\n'
        )
        result = CliRunner().invoke(
            app,
            [
                "sft",
                "--teacher",
                "teacher",
                "--user-model",
                "user",
                "--out",
                str(out),
                "--mode",
                "both",
                "--attempts",
                "2",
                "--limit",
                "5",
                "--split-turns",
                "--concurrency",
                "8",
            ],
            env={"HARNESS_MODELS_FILE": str(models)},
        )
    assert result.exit_code == 0, result.output
    return out, result.output


def test_cli_writes_every_form_and_dedupes(teacher_run):
    out, output = teacher_run
    stats = orjson.loads((out / "stats.json").read_bytes())
    # 5 scenarios x 2 modes x 2 attempts; the replaying teacher repeats itself, so one of each pair is a duplicate.
    assert stats["episodes"] == 20 and stats["kept"] == 10 and stats["dropped"] == {"duplicate": 10}
    assert stats["samples"]["messages"] == 10 and stats["samples"]["sharegpt_turns"] > 10
    assert "kept" in output


def test_messages_rows_load_with_datasets_and_pair_every_call(teacher_run):
    out, _ = teacher_run
    rows = hf_datasets.load_dataset("json", data_files=str(out / "messages.jsonl"), split="train")
    assert len(rows) == 10
    for row in rows:
        messages = row["messages"]
        assert messages[0]["role"] == "system" and row["tools"]
        call_ids = [
            c["id"] for m in messages if m["role"] == "assistant" and m.get("tool_calls") for c in m["tool_calls"]
        ]
        result_ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        assert call_ids and call_ids == result_ids


def test_sharegpt_rows_alternate_and_load(teacher_run):
    out, _ = teacher_run
    rows = hf_datasets.load_dataset("json", data_files=str(out / "sharegpt.jsonl"), split="train")
    for row in rows:
        roles = [turn["from"] for turn in row["conversations"]]
        assert roles[0] == "human"
        for position, role in enumerate(roles):
            assert role in (("human", "observation") if position % 2 == 0 else ("gpt", "function_call"))
        assert roles.count("function_call") == roles.count("observation")
        assert orjson.loads(row["tools"])


def test_selection_rules(teacher_run):
    out, _ = teacher_run
    trajectories = read_results(out / "rollouts" / "results.jsonl")
    failed = trajectories[0].model_copy(
        update={"reward": trajectories[0].reward.model_copy(update={"success": False, "state_reward": 0.5})}
    )
    errored = trajectories[1].model_copy(update={"termination": TerminationReason.INFRA_ERROR, "reward": None})
    kept, dropped = select([failed, errored], SelectionRule())
    assert kept == [] and dropped == {"not_successful": 1, "infra_error": 1}
    kept, _ = select([failed], SelectionRule(min_reward=0.5))
    assert kept == [failed]


def test_parallel_calls_merge_into_one_observation_and_split_per_turn():
    trajectory = bare_trajectory()
    calls = [ToolCall(id="a", name="x", arguments={}), ToolCall(id="b", name="y", arguments={})]
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "do both"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "plan",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "y", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": '{"success": true}'},
        {"role": "tool", "tool_call_id": "b", "content": '{"success": false}'},
        {"role": "assistant", "content": "done", "reasoning_content": "checked"},
    ]
    trajectory = trajectory.model_copy(
        update={
            "messages": messages,
            "steps": [
                Step(index=i, call=c, observation=Observation(tool_call_id=c.id, name=c.name))
                for i, c in enumerate(calls)
            ],
        }
    )
    row = to_sharegpt_row(trajectory, keep_reasoning=True)
    assert [t["from"] for t in row["conversations"]] == ["human", "function_call", "observation", "gpt"]
    call_turn = row["conversations"][1]["value"]
    assert call_turn.startswith("<think>\nplan\n</think>\n")  # reasoning kept where LlamaFactory reads it
    assert [c["name"] for c in orjson.loads(call_turn.split("</think>\n", 1)[1])] == ["x", "y"]
    assert orjson.loads(row["conversations"][2]["value"]) == [{"success": True}, {"success": False}]
    assert row["conversations"][3]["value"].startswith("<think>\nchecked")
    assert "<think>" not in to_sharegpt_row(trajectory, keep_reasoning=False)["conversations"][3]["value"]
    samples = split_turns(row)
    assert [len(s["conversations"]) for s in samples] == [2, 4]


def bare_trajectory():
    from harness.schema import AgentSettings, ModelSettings, Trajectory

    return Trajectory(
        episode_id="e",
        scenario_id="s",
        environment_id="env",
        mode="nonconv",
        agent=AgentSettings(model=ModelSettings(model="m")),
        termination=TerminationReason.AGENT_DONE,
    )


def test_export_without_reasoning_drops_it(tmp_path):
    trajectory = bare_trajectory().model_copy(
        update={
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "ok", "reasoning_content": "secret plan"},
            ]
        }
    )
    from harness.schema import RewardBreakdown

    trajectory = trajectory.model_copy(
        update={"reward": RewardBreakdown(state_reward=1.0, success=True, checks_passed=1, checks_total=1)}
    )
    export([trajectory], tmp_path, keep_reasoning=False)
    assert b"secret plan" not in (tmp_path / "messages.jsonl").read_bytes()
    assert b"secret plan" not in (tmp_path / "sharegpt.jsonl").read_bytes()


def test_text_on_a_tool_call_turn_is_kept(tmp_path):
    trajectory = bare_trajectory().model_copy(
        update={
            "messages": [
                {"role": "user", "content": "cancel it"},
                {
                    "role": "assistant",
                    "content": "Let me look the order up first.",
                    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "get", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "a", "content": "{}"},
                {"role": "assistant", "content": "Done."},
            ]
        }
    )
    value = to_sharegpt_row(trajectory)["conversations"][1]["value"]
    assert value.startswith("<think>\nLet me look the order up first.\n</think>\n")
    assert orjson.loads(value.split("</think>\n", 1)[1]) == {"name": "get", "arguments": {}}


def test_tokens_per_sample_are_the_samples_length_not_the_teachers_usage(tmp_path):
    from harness.schema import RewardBreakdown, Usage

    def scored(text: str):
        return bare_trajectory().model_copy(
            update={
                "episode_id": text[:8],
                "scenario_id": text[:8],
                "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": text}],
                "reward": RewardBreakdown(state_reward=1.0, success=True, checks_passed=1, checks_total=1),
                "usage": {"agent": Usage(requests=9, prompt_tokens=90_000, completion_tokens=9_000)},
            }
        )

    stats = export([scored("short answer"), scored("a much longer answer " * 40)], tmp_path)
    rows = [orjson.loads(line) for line in (tmp_path / "messages.jsonl").read_bytes().splitlines()]
    short, long = (row["tokens"] for row in rows)
    assert 3 < short < 30 and long > 5 * short
    assert stats.tokens["max"] == long and stats.tokens["max"] < 1_000  # not the 99,000 tokens of API usage
    sharegpt = [orjson.loads(line) for line in (tmp_path / "sharegpt.jsonl").read_bytes().splitlines()]
    assert all(row["tokens"] > 0 for row in sharegpt)
    entries = orjson.loads((tmp_path / "dataset_info.json").read_bytes())
    assert entries["envharness_sharegpt"]["file_name"] == "sharegpt.jsonl"
    assert entries["envharness_sharegpt"]["formatting"] == "sharegpt"


def test_exported_folder_publishes_as_a_trl_ready_dataset(teacher_run, tmp_path):
    """`harness publish sft` (the real CLI, in a subprocess) builds configs TRL and LlamaFactory read as they are."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from trl.data_utils import is_conversational

    from harness.hub.projection import PROJECTIONS

    out, _ = teacher_run
    built = tmp_path / "built"
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "publish", "sft", str(out), "--repo",
         "acme/sft", "--out", str(built)],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    messages = hf_datasets.load_dataset(str(built), "messages", split="train")
    assert messages.features == PROJECTIONS["sft_chat"].features
    assert len(messages) == 10 and all(is_conversational(row) for row in messages)
    assert all(row["tokens"] > 0 for row in messages)
    sharegpt = hf_datasets.load_dataset(str(built), "sharegpt_turns", split="train")
    assert sharegpt[0]["conversations"][0]["from"] == "human"
    assert orjson.loads((built / "dataset_info.json").read_bytes())["sft_sharegpt"]["hf_hub_url"] == "acme/sft"


def test_calls_a_turn_asked_for_but_the_rules_never_ran_are_not_exported():
    """Under envscaler rules only the first call of a turn runs: rows keep the calls that have results."""
    first_only = [
        {"role": "user", "content": "do both"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "y", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": '{"success": true}'},
        {"role": "assistant", "content": "Task Completed"},
    ]
    trajectory = bare_trajectory().model_copy(update={"messages": first_only})
    row = to_messages_row(trajectory)
    assert [c["id"] for c in row["messages"][1]["tool_calls"]] == ["a"]
    sharegpt = to_sharegpt_row(trajectory)["conversations"]
    assert orjson.loads(sharegpt[1]["value"]) == {"name": "x", "arguments": {}}
    assert trajectory.messages[1]["tool_calls"][1]["id"] == "b", "the stored trajectory keeps what the model said"
