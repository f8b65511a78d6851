"""verl 0.9.1 agent loop in conversational mode: a simulated user (the mock OpenAI server, reached through
harness.llm from the verl venv) opens, answers the policy's text replies and stops; the rollout is scored as
``harness run --mode conv`` scores the same behaviour.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agents.oracle import ORACLE_FINAL_MESSAGE
from harness.library import Library, load_library
from tests.doubles.mock_openai import PolicyRequest, message_text
from tests.doubles.seed_replay import alias_file, serving_mock
from tests.doubles.train_trl_tiny import tiny_tokenizer
from tests.support.cli_process import REPO, harness
from tests.support.verl_venv import VerlVenv

pytestmark = pytest.mark.verl

SCRIPT = REPO / "tests" / "doubles" / "verl_scripted_rollouts.py"
CONV_YAML = REPO / "examples" / "verl_agent_loop_conv.yaml"
FOLLOW_UP = "Can you confirm the amount that moved?"


class SilentAfterOpening:
    """A user model that opens with the task, then answers nothing (the simulated user gives up after three)."""

    def __init__(self, task: str) -> None:
        self.task = task

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        if any(message_text(m).strip() == self.task for m in request.messages):
            return {"role": "assistant", "content": ""}
        return {"role": "assistant", "content": self.task}


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call><|im_end|>"


def user_entry(model: str, api_base: str) -> dict[str, Any]:
    return {"user": {"_target_": "agents.training_user.conversation_user", "model": model, "api_base": api_base}}


@pytest.fixture(scope="module")
def library() -> Library:
    return load_library(None)


@pytest.fixture(scope="module")
def conv(verl_environment: VerlVenv, library: Library, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("verl-conv")
    tiny_tokenizer(library, vocab_size=600).save_pretrained(str(work / "tokenizer"))
    command = ["train", "dataset", "datasets/seed", "--format", "verl", "--mode", "conv", "-e", "banking"]
    done = harness([*command, "--out", str(work / "conv")])
    assert done.code == 0, done.stderr
    banking = library.scenarios_for("banking")
    first, second = banking[0], banking[1]

    def replies(scenario: Any, answers: int) -> list[str]:
        reply = (scenario.reference_reply or ORACLE_FINAL_MESSAGE) + "<|im_end|>"
        return [tool_call(a.name, a.arguments) for a in scenario.reference_actions] + [reply] * answers

    def row(scenario_id: str, mode: str | None = None) -> dict[str, Any]:
        extra = {"scenario_id": scenario_id, "environment": "banking"}
        if mode is not None:
            extra["mode"] = mode
        return {"raw_prompt": [{"role": "user", "content": "hello"}], "extra_info": extra}

    scripted_library = scripted_turns_library(work / "scripted", first, FOLLOW_UP)
    all_calls = "\n".join(tool_call(a.name, a.arguments).removesuffix("<|im_end|>") for a in first.reference_actions)
    with serving_mock() as server:
        key = first.user_profile.goal if first.user_profile else first.task
        server.register_user(key, [first.task, FOLLOW_UP])
        server.set_policy("silent", SilentAfterOpening(first.task))
        mock_user = user_entry("hosted_vllm/user", server.base_url)
        cases = [
            {"name": "conversation", "loop_yaml": str(CONV_YAML), "entry": mock_user, "row": row(first.id)},
            {
                "name": "from_dataset",
                "loop_yaml": str(CONV_YAML),
                "entry": mock_user,
                "conv_dataset": "banking",
                "dataset_index": 1,
            },
            # The plain example's entry runs nonconv; the row asks for a conversation and the entry has a user.
            {"name": "row_mode", "entry": mock_user, "row": row(first.id, "conv")},
            {"name": "no_user", "row": row(first.id, "conv")},
            {"name": "odd_mode", "row": row(first.id, "chat")},
            # A scenario with scripted turns: the same user factory plays its script (no model is called).
            {
                "name": "scripted_turns",
                "loop_yaml": str(CONV_YAML),
                "entry": {"envs": str(scripted_library), **user_entry("hosted_vllm/never-called", server.base_url)},
                "row": row(first.id),
            },
            {
                "name": "user_fails",
                "loop_yaml": str(CONV_YAML),
                "entry": user_entry("hosted_vllm/silent", server.base_url),
                "row": row(first.id),
            },
        ]
        scripted = {
            "conversation": replies(first, 2),
            "from_dataset": replies(second, 1),
            "row_mode": replies(first, 2),
            "no_user": [],
            "odd_mode": [],
            "user_fails": replies(first, 1),
            "scripted_turns": [all_calls + "<|im_end|>", *replies(first, 2)[-2:]],
        }
        for case in cases:
            case["replies"] = scripted[case["name"]]
        spec = {
            "tokenizer": str(work / "tokenizer"),
            "loop_yaml": str(REPO / "examples" / "verl_agent_loop.yaml"),
            "conv_parquet": {"banking": str(work / "conv" / "train.parquet")},
            "cache_dir": str(work / "verl-cache"),
            "cases": cases,
        }
        (work / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        finished = verl_environment.run(SCRIPT, str(work / "spec.json"), str(work / "result.json"))
        assert finished.returncode == 0, finished.stderr[-4000:]
        expected = {
            name: harness_run_conv(scenario.id, server.base_url, work / f"run-{name}")
            for name, scenario in (("first", first), ("second", second))
        }
        expected["scripted_turns"] = harness_run_conv(
            first.id, server.base_url, work / "run-scripted", scripted_library
        )
        user_calls = len(server.chat_requests("never-called"))
    result: dict[str, Any] = json.loads((work / "result.json").read_text(encoding="utf-8"))
    result["replies"] = scripted
    result["expected"] = expected
    result["never_called_requests"] = user_calls
    result["scenarios"] = {"first": first, "second": second}
    return result


def scripted_turns_library(folder: Path, scenario: Any, follow_up: str) -> Path:
    """The seed library with ``scenario`` given two scripted user turns: its task (with its reference calls),
    then ``follow_up``."""
    shutil.copytree(REPO / "datasets" / "seed", folder)
    path = folder / "scenarios" / f"{scenario.environment_id}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["id"] == scenario.id)
    record = json.loads(lines[index])
    record["turns"] = [{"content": scenario.task, "reference_actions": record["reference_actions"]}]
    record["turns"].append({"content": follow_up})
    lines[index] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def harness_run_conv(scenario_id: str, base_url: str, out: Path, envs: Path | None = None) -> float:
    """The composite ``harness run --mode conv`` gives the oracle with the same mock (or scripted) user."""
    models = alias_file(out.with_suffix(".toml"), base_url)
    with models.open("a") as aliases:
        aliases.write(f'[aliases.mock-user]\nmodel = "hosted_vllm/user"\napi_base = "{base_url}"\n')
    command = [
        "run",
        "--envs",
        str(envs or "datasets/seed"),
        "--agent",
        "oracle",
        "--mode",
        "conv",
        "--user-model",
        "mock-user",
    ]
    done = harness([*command, "--scenario", scenario_id, "--out", str(out)], env={"HARNESS_MODELS_FILE": str(models)})
    assert done.code == 0, done.stderr
    (line,) = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert record["termination"] == "user_stop"
    return float(record["reward"]["composite"])


@pytest.mark.parametrize(("case", "scenario"), [("conversation", "first"), ("from_dataset", "second")])
def test_a_conversation_scores_what_harness_run_conv_scores(conv: dict[str, Any], case: str, scenario: str) -> None:
    output = conv["cases"][case]
    fields = output["extra_fields"]
    assert fields["ending"] == "user_stop" and fields["at_fault"] is None
    assert fields["scenario_id"] == conv["scenarios"][scenario].id
    assert output["reward_score"] == pytest.approx(conv["expected"][scenario])
    assert output["reward_score"] > 0
    assert output["rm_scores_last"] == pytest.approx(output["reward_score"])
    # The simulated user opened with the task: the prompt the policy saw is the user's first words.
    prompt = output["full_text"][: output["full_text"].index(output["spans"][0][1])]
    assert "<|im_start|>user\n" + conv["scenarios"][scenario].task in prompt


def test_the_mask_is_one_on_the_policy_and_zero_on_the_tools_and_the_user(conv: dict[str, Any]) -> None:
    output = conv["cases"]["conversation"]
    replies = conv["replies"]["conversation"]
    ids, mask, logprobs = output["response_ids"], output["response_mask"], output["response_logprobs"]
    assert len(ids) == len(mask) == len(logprobs)
    ones = [text for flag, text in output["spans"] if flag == 1]
    zeros = [text for flag, text in output["spans"] if flag == 0]
    assert ones == replies
    calls = len(conv["scenarios"]["first"].reference_actions)
    assert len(zeros) == len(replies) - 1
    assert all("<tool_response>" in text and "<|im_start|>assistant" in text for text in zeros[:calls])
    # The user's follow-up is in a zero span, after the first text reply; never where the mask is 1.
    assert FOLLOW_UP in zeros[calls] and "<|im_start|>user" in zeros[calls] and "<tool_response>" not in zeros[calls]
    assert not any(FOLLOW_UP in text or conv["scenarios"]["first"].task in text for text in ones)
    assert all(lp == -0.25 for lp, flag in zip(logprobs, mask, strict=True) if flag == 1)
    assert all(lp == 0.0 for lp, flag in zip(logprobs, mask, strict=True) if flag == 0)
    inputs = output["inputs"]
    assert len(inputs) == len(replies)
    for earlier, later in itertools.pairwise(inputs):
        assert later[: len(earlier)] == earlier
    assert inputs[0] == output["prompt_ids"]
    assert (output["prompt_ids"] + ids)[: len(inputs[-1])] == inputs[-1]
    # The user's stop ends it: the stop message is not appended after the last reply.
    assert output["spans"][-1] == [1, replies[-1]]


def test_a_row_asks_for_a_conversation_and_a_bad_row_ends_only_its_rollout(conv: dict[str, Any]) -> None:
    row_mode = conv["cases"]["row_mode"]
    assert row_mode["extra_fields"]["ending"] == "user_stop"
    assert row_mode["reward_score"] == pytest.approx(conv["expected"]["first"])
    assert [text for flag, text in row_mode["spans"] if flag == 1] == conv["replies"]["row_mode"]
    assert [row["mode"] for row in conv["conv_dataset"]["banking"]] == ["conv"] * 12
    for case, detail in (("no_user", "needs a simulated user"), ("odd_mode", "unknown mode 'chat'")):
        output = conv["cases"][case]
        assert output["extra_fields"]["ending"] == "bad_mode"
        assert detail in output["extra_fields"]["ending_detail"]
        assert output["reward_score"] == 0.0 and output["inputs"] == []
        assert output["response_mask"] == [0] * len(output["response_ids"])


def test_a_failing_user_ends_the_rollout_blamed_on_the_simulator_masked_and_unrewarded(conv: dict[str, Any]) -> None:
    output = conv["cases"]["user_fails"]
    fields = output["extra_fields"]
    assert fields["ending"] == "infra_error"
    assert fields["at_fault"] == "user_simulator"
    assert "empty message" in fields["ending_detail"]
    assert output["reward_score"] == 0.0 and output["rm_scores_sum"] == 0.0
    assert all(value == 0.0 for value in fields["reward_components"].values())
    # The policy made every call and its reply; none of it is trained on.
    assert len(output["inputs"]) == len(conv["replies"]["user_fails"])
    assert output["response_mask"] == [0] * len(output["response_ids"]) and len(output["response_ids"]) > 0


def test_a_scenario_with_scripted_turns_is_played_by_its_script_and_scored_as_harness_run(
    conv: dict[str, Any],
) -> None:
    output = conv["cases"]["scripted_turns"]
    replies = conv["replies"]["scripted_turns"]
    assert output["extra_fields"]["ending"] == "user_stop"
    assert output["reward_score"] == pytest.approx(conv["expected"]["scripted_turns"]) and output["reward_score"] > 0
    assert conv["never_called_requests"] == 0
    assert [text for flag, text in output["spans"] if flag == 1] == replies
    zeros = [text for flag, text in output["spans"] if flag == 0]
    assert "<tool_response>" in zeros[0] and FOLLOW_UP in zeros[1] and "<tool_response>" not in zeros[1]
    assert conv["scenarios"]["first"].task in output["full_text"].split(replies[0])[0]
