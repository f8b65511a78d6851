"""verl 0.9.1 agent loop: real verl in a venv of its own, a scripted LLM server, the jail, seed scenarios.

verl pins an older transformers than the project's TRL extra, so the loop runs in a cached venv
(``tests.support.verl_venv``, built on first use) through ``tests/doubles/verl_scripted_rollouts.py``; this
process builds the tiny tokenizer, the dataset and the oracle's score to compare with.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.library import Library, load_library
from tests.doubles.train_trl_tiny import tiny_tokenizer
from tests.support.cli_process import REPO, harness
from tests.support.raising_library import RAISING_TOOLS, TOOLS_SCENARIO, write_raising_library
from tests.support.verl_venv import VerlVenv

pytestmark = pytest.mark.verl

SCRIPT = REPO / "tests" / "doubles" / "verl_scripted_rollouts.py"
LOOP_YAML = REPO / "examples" / "verl_agent_loop.yaml"


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call><|im_end|>"


@pytest.fixture(scope="module")
def library() -> Library:
    return load_library(None)


@pytest.fixture(scope="module")
def rollouts(verl_environment: VerlVenv, library: Library, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    venv = verl_environment
    work = tmp_path_factory.mktemp("verl")
    tiny_tokenizer(library, vocab_size=600).save_pretrained(str(work / "tokenizer"))
    done = harness(
        ["train", "dataset", "datasets/seed", "--format", "verl", "--out", str(work / "data"), "-e", "banking"]
    )
    assert done.code == 0, done.stderr
    banking = library.scenarios_for("banking")
    first, second = banking[0], banking[1]
    hotel = library.scenarios_for("hotel_booking")[0]

    def row(scenario_id: Any, environment: str | None = "banking") -> dict[str, Any]:
        extra = {"scenario_id": scenario_id} if scenario_id is not None else {}
        if environment is not None:
            extra["environment"] = environment
        return {"raw_prompt": [{"role": "user", "content": "hello"}], "extra_info": extra}

    def replies(scenario: Any) -> list[str]:
        return [tool_call(a.name, a.arguments) for a in scenario.reference_actions] + ["The task is done.<|im_end|>"]

    bad_call = tool_call(first.reference_actions[0].name, {"no_such_argument": 1})
    prompt = [{"role": "user", "content": "hello"}]

    def with_extra(**extra: Any) -> dict[str, Any]:
        return {"raw_prompt": prompt, "extra_info": {"scenario_id": first.id, "environment": "banking", **extra}}

    raising = str(write_raising_library(work / "raising"))
    raising_replies = [tool_call(name, {}) for name in [*RAISING_TOOLS, "complete"]] + ["Done.<|im_end|>"]
    cases = [
        {"name": "reference", "row": row(first.id), "replies": replies(first)},
        {"name": "from_dataset", "dataset_index": 1, "replies": replies(second)},
        {"name": "unknown", "row": row("no-such-scenario"), "replies": []},
        {"name": "no_scenario", "row": row(None, None), "replies": []},
        {"name": "other_environment", "row": row(hotel.id), "replies": []},
        {"name": "rejected", "row": row(first.id), "replies": [bad_call]},
        {"name": "unparseable", "row": row(first.id), "replies": ["<tool_call>\n{not json\n</tool_call><|im_end|>"]},
        {"name": "crashing", "row": row(first.id), "replies": [], "crashing": True},
        {"name": "one_turn", "row": row(first.id), "replies": replies(first), "settings": {"max_turns": 1}},
        {"name": "short", "row": row(first.id), "replies": replies(first), "response_length": 40},
        {"name": "seed_text", "row": with_extra(seed="abc"), "replies": []},
        {"name": "seed_infinite", "row": with_extra(seed=float("inf")), "replies": []},
        {"name": "seed_list", "row": with_extra(seed=[1]), "replies": []},
        {"name": "extra_info_text", "row": {"raw_prompt": prompt, "extra_info": first.id}, "replies": []},
        {"name": "nothing_usable", "row": {"raw_prompt": 5, "extra_info": None, "tools_kwargs": 5}, "replies": []},
        {
            "name": "junk_beside_a_good_row",
            "row": {
                **with_extra(seed=None, noise=[1, {"x": None}], index="seven"),
                "raw_prompt": 5,
                "tools_kwargs": {"get_account": "not a dict", "other": [1]},
            },
            "replies": replies(first),
        },
        {"name": "raising_tools", "envs": raising, "row": row(TOOLS_SCENARIO, "raising"), "replies": raising_replies},
        {"name": "raising_load", "envs": raising, "row": row("raises-on-load-stop", "raising"), "replies": []},
    ]
    spec = {
        "tokenizer": str(work / "tokenizer"),
        "loop_yaml": str(LOOP_YAML),
        "parquet": str(work / "data" / "train.parquet"),
        "cache_dir": str(work / "verl-cache"),
        "cases": cases,
    }
    (work / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    finished = venv.run(SCRIPT, str(work / "spec.json"), str(work / "result.json"))
    assert finished.returncode == 0, finished.stderr[-4000:]
    result: dict[str, Any] = json.loads((work / "result.json").read_text(encoding="utf-8"))
    result["scenarios"] = {"first": first.id, "second": second.id, "hotel": hotel.id}
    result["replies"] = {"reference": replies(first), "from_dataset": replies(second)}
    return result


def oracle_composite(scenario_id: str, out: Path) -> float:
    done = harness(
        ["run", "--envs", "datasets/seed", "--agent", "oracle", "--scenario", scenario_id, "--out", str(out)]
    )
    assert done.code == 0, done.stderr
    (line,) = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    reward = json.loads(line)["reward"]
    return float(reward["composite"] if reward["composite"] is not None else reward["state_reward"])


def test_the_yaml_registers_the_harness_loop_with_verls_registry(rollouts: dict[str, Any]) -> None:
    assert rollouts["registry"]["harness"] == "harness.train.verl_agent_loop.HarnessAgentLoop"
    assert rollouts["cases"]["reference"]["loop_class"] == "HarnessAgentLoop"


@pytest.mark.parametrize("case", ["reference", "from_dataset"])
def test_a_rollout_of_the_reference_calls_scores_what_the_oracle_scores(
    rollouts: dict[str, Any], case: str, tmp_path: Path
) -> None:
    scenario_id = rollouts["scenarios"]["first" if case == "reference" else "second"]
    output = rollouts["cases"][case]
    expected = oracle_composite(scenario_id, tmp_path / "oracle")
    assert output["extra_fields"]["ending"] == "agent_done"
    assert output["extra_fields"]["scenario_id"] == scenario_id
    assert output["reward_score"] == pytest.approx(expected)
    assert output["reward_score"] > 0
    # verl turns reward_score into rm_scores on the last response token.
    assert output["rm_scores_last"] == pytest.approx(expected) and output["rm_scores_sum"] == pytest.approx(expected)
    replies = rollouts["replies"][case]
    assert output["extra_fields"]["tool_call_count"] == len(replies) - 1
    # The user's task, then one assistant turn and one tool result per call, then the final reply.
    assert output["num_turns"] == 1 + 2 * (len(replies) - 1) + 1
    assert output["metrics"]["generate_sequences"] >= 0 and output["metrics"]["tool_calls"] >= 0


@pytest.mark.parametrize("case", ["reference", "from_dataset"])
def test_the_mask_is_one_exactly_on_the_policy_tokens_and_nothing_is_retokenized(
    rollouts: dict[str, Any], case: str
) -> None:
    output = rollouts["cases"][case]
    replies = rollouts["replies"][case]
    ids, mask = output["response_ids"], output["response_mask"]
    assert len(ids) == len(mask) == len(output["response_logprobs"])
    assert [text for flag, text in output["spans"] if flag == 1] == replies
    zeros = [text for flag, text in output["spans"] if flag == 0]
    assert len(zeros) == len(replies) - 1
    assert all("<tool_response>" in text and "<|im_start|>assistant" in text for text in zeros)
    assert all(lp == -0.25 for lp, flag in zip(output["response_logprobs"], mask, strict=True) if flag == 1)
    assert all(lp == 0.0 for lp, flag in zip(output["response_logprobs"], mask, strict=True) if flag == 0)
    inputs = output["inputs"]
    assert len(inputs) == len(replies)
    for earlier, later in itertools.pairwise(inputs):
        assert later[: len(earlier)] == earlier
    full = output["prompt_ids"] + ids
    assert inputs[0] == output["prompt_ids"] and full[: len(inputs[-1])] == inputs[-1]
    assert output["extra_fields"]["generation_inputs"] == [len(i) for i in inputs]
    # Each generation may use only what is left of rollout.response_length.
    prompt = len(output["prompt_ids"])
    assert output["max_tokens"] == [16384 - (len(i) - prompt) for i in inputs]


@pytest.mark.parametrize(
    ("case", "ending"),
    [
        ("unknown", "unknown_scenario"),
        ("no_scenario", "bad_row"),
        ("seed_text", "bad_row"),
        ("seed_infinite", "bad_row"),
        ("seed_list", "bad_row"),
        ("extra_info_text", "bad_row"),
        ("nothing_usable", "bad_row"),
        ("other_environment", "scenario_of_another_environment"),
        ("rejected", "rejected_tool_call"),
        ("unparseable", "unparseable_tool_call"),
        ("crashing", "environment_error"),
    ],
)
def test_bad_input_ends_only_its_rollout_with_a_reason_and_reward_zero(
    rollouts: dict[str, Any], case: str, ending: str
) -> None:
    output = rollouts["cases"][case]
    assert output["extra_fields"]["ending"] == ending
    assert output["extra_fields"]["ending_detail"]
    assert output["reward_score"] == 0.0 and output["rm_scores_sum"] == 0.0
    components = output["extra_fields"]["reward_components"]
    assert components["composite"] == components["check_pass_rate"] == components["envscaler"] == 0.0
    assert len(output["response_ids"]) == len(output["response_mask"]) >= 1
    if case in ("rejected", "unparseable"):
        # The model's one reply is kept (mask 1) and nothing followed it.
        assert output["response_mask"] == [1] * len(output["response_ids"])
    else:
        assert output["response_mask"] == [0] * len(output["response_ids"])


def test_verls_rlhf_dataset_reads_the_parquet_the_command_writes(rollouts: dict[str, Any], library: Library) -> None:
    rows = rollouts["dataset"]
    banking = library.scenarios_for("banking")
    assert len(rows) == len(banking) == 12
    assert {row["agent_name"] for row in rows} == {"harness"}
    assert [row["extra_info"]["scenario_id"] for row in rows] == [s.id for s in banking]
    assert all(row["extra_info"]["environment"] == "banking" for row in rows)
    first = rows[0]
    assert [m["role"] for m in first["raw_prompt"]] == ["system", "user"]
    assert first["raw_prompt"][1]["content"] == banking[0].task


def test_the_verl_format_refuses_a_hub_repo_a_missing_out_and_an_unknown_mode(tmp_path: Path) -> None:
    bad = harness(["train", "dataset", "datasets/seed", "--format", "verl", "--repo", "org/name"])
    assert bad.code == 2 and "--format verl" in bad.stderr and "Traceback" not in bad.stderr
    odd = harness(["train", "dataset", "datasets/seed", "--format", "parquet", "--out", str(tmp_path / "x")])
    assert odd.code == 2 and "Bad --format" in odd.stderr
    odd_mode = harness(
        ["train", "dataset", "datasets/seed", "--format", "verl", "--mode", "chat", "--out", str(tmp_path / "x")]
    )
    assert odd_mode.code == 2 and "Bad --mode" in odd_mode.stderr
    assert not (tmp_path / "x").exists()


def test_the_project_and_the_trl_adapter_never_import_verl() -> None:
    code = (
        "import sys, harness.cli.app, harness.train.trl, harness.train.verl_dataset, harness.train.trl_rollout;"
        "print(sorted(m for m in sys.modules if m == 'verl' or m.startswith('verl.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_turn_and_length_limits_stop_a_rollout_and_say_which(rollouts: dict[str, Any]) -> None:
    one_turn = rollouts["cases"]["one_turn"]
    assert one_turn["extra_fields"]["stopped_by"] == "max_turns"
    assert len(one_turn["inputs"]) == 1 and one_turn["extra_fields"]["tool_call_count"] == 1
    assert one_turn["extra_fields"]["ending"] == "agent_done"
    short = rollouts["cases"]["short"]
    assert short["extra_fields"]["stopped_by"] == "response_length"
    assert 0 < len(short["response_ids"]) <= 40 and len(short["response_mask"]) == len(short["response_ids"])
    assert rollouts["cases"]["reference"]["extra_fields"]["stopped_by"] is None


@pytest.mark.parametrize(
    ("case", "detail"),
    [
        ("no_scenario", "extra_info: scenario_id: the row has none"),
        ("seed_text", "extra_info: seed: Input should be a valid integer"),
        ("seed_infinite", "extra_info: seed: Input should be a valid integer"),
        ("seed_list", "extra_info: seed: Input should be a valid integer"),
        ("extra_info_text", "extra_info: the row: Input should be a valid dictionary"),
        ("nothing_usable", "extra_info: the row: Input should be a valid dictionary"),
    ],
)
def test_a_row_whose_values_cannot_start_a_rollout_says_which(rollouts: dict[str, Any], case: str, detail: str) -> None:
    output = rollouts["cases"][case]
    assert output["extra_fields"]["ending"] == "bad_row"
    assert output["extra_fields"]["ending_detail"].startswith(detail), output["extra_fields"]["ending_detail"]
    assert output["inputs"] == []  # nothing was generated
    if case == "nothing_usable":  # no prompt to show: the prompt says the rollout is void, and why
        assert "This rollout is void (bad_row: extra_info: the row:" in output["full_text"]


def test_keys_the_loop_does_not_read_change_nothing(rollouts: dict[str, Any]) -> None:
    junk, reference = rollouts["cases"]["junk_beside_a_good_row"], rollouts["cases"]["reference"]
    assert junk["extra_fields"]["ending"] == "agent_done"
    assert junk["reward_score"] == pytest.approx(reference["reward_score"]) and junk["reward_score"] > 0
    assert junk["response_ids"] == reference["response_ids"]


def test_base_exceptions_of_the_environment_are_its_own_in_the_verl_loop(rollouts: dict[str, Any]) -> None:
    tools = rollouts["cases"]["raising_tools"]
    assert tools["extra_fields"]["ending"] == "agent_done" and tools["extra_fields"]["at_fault"] is None
    assert tools["extra_fields"]["tool_call_count"] == len(RAISING_TOOLS) + 1
    assert tools["extra_fields"]["reward_components"]["check_pass_rate"] == pytest.approx(2 / 6)
    responses = [text for flag, text in tools["spans"] if flag == 0]
    for response, error in zip(responses, RAISING_TOOLS.values(), strict=False):
        assert error in response, response
    load = rollouts["cases"]["raising_load"]
    assert load["extra_fields"]["ending"] == "environment_error"
    assert load["extra_fields"]["at_fault"] == "environment"
    assert "Stop: stopped" in load["extra_fields"]["ending_detail"] and load["reward_score"] == 0.0
