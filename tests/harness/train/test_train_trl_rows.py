"""TRL's adapters never raise into the trainer: a bad row ends its rollout with the reason, and an environment that
raises what is not an Exception is the environment's failure.

``environment_factory``'s objects are driven as TRL drives them (``reset(**row)``, tool methods, ``get_reward``,
the reward functions with ``environments=``), and a real ``GRPOTrainer`` takes an optimisation step on a dataset
whose rows hold bad values; ``rollout_func`` gets prompts that name no scenario. Offline on CPU with the tiny
random Qwen3; every tool call and check runs in the jail.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import uuid
from typing import Any

import pytest

pytest.importorskip("trl")

from harness.library import Library, load_library
from harness.train.jail_thread import JailThread
from harness.train.rows import BAD_ROW
from harness.train.trl_dataset import prompt_dataset
from harness.train.trl_environment import environment_factory, finish_rollout
from harness.train.trl_rewards import reward_functions
from harness.train.trl_rollout import rollout_func
from tests.doubles.train_trl_tiny import tiny_model, tiny_tokenizer
from tests.support.raising_library import LOADS, RAISING_TOOLS, TOOLS_SCENARIO, write_raising_library

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

VOID = "This rollout is void ("


@pytest.fixture(scope="module")
def library() -> Library:
    return load_library(None)


@pytest.fixture(scope="module")
def jail() -> Any:
    thread = JailThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module")
def tokenizer(library: Library) -> Any:
    from trl.chat_template_utils import add_response_schema

    return add_response_schema(tiny_tokenizer(library, vocab_size=600))


@pytest.fixture(scope="module")
def raising(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return load_library(str(write_raising_library(tmp_path_factory.mktemp("raising") / "library")))


SCENARIO = "banking-001"

BAD_ROWS: list[tuple[str, dict[str, Any], str, str]] = [
    ("seed-text", {"scenario_id": SCENARIO, "seed": "abc"}, BAD_ROW, "seed: Input should be a valid integer"),
    ("seed-infinite", {"scenario_id": SCENARIO, "seed": 1e999}, BAD_ROW, "seed: Input should be a valid integer"),
    ("seed-list", {"scenario_id": SCENARIO, "seed": [1]}, BAD_ROW, "seed: Input should be a valid integer"),
    ("seed-too-large", {"scenario_id": SCENARIO, "seed": 2**64}, BAD_ROW, "seed: Input should be less than or equal"),
    ("unknown", {"scenario_id": "no-such-scenario"}, "unknown_scenario", "no scenario 'no-such-scenario'"),
    ("none", {"scenario_id": None}, BAD_ROW, "scenario_id: Value error, the row names no scenario"),
    ("missing", {"prompt": [{"role": "user", "content": ""}]}, BAD_ROW, "scenario_id: the row has none"),
    ("not-text", {"scenario_id": ["banking-001"]}, BAD_ROW, "scenario_id: Input should be a valid string"),
    ("environment-not-text", {"scenario_id": SCENARIO, "environment": 7}, BAD_ROW, "environment: Input should be"),
    (
        "environment-other",
        {"scenario_id": SCENARIO, "environment": "hotel_booking"},
        "scenario_of_another_environment",
        "the row names environment 'hotel_booking'",
    ),
]


@pytest.mark.parametrize(("row", "ending", "detail"), [case[1:] for case in BAD_ROWS], ids=[c[0] for c in BAD_ROWS])
def test_a_bad_row_voids_its_rollout_with_the_reason_and_never_raises(
    library: Library, jail: JailThread, row: dict[str, Any], ending: str, detail: str
) -> None:
    factory = environment_factory(library, environments=["banking"], jail=jail)
    assert callable(factory)
    environment = factory()
    text = environment.reset(**row)
    assert text is not None and text.startswith(f"{VOID}{ending}: ") and detail in text, text
    assert text.endswith("No tool runs in it, and its reward is 0.")
    assert environment.outcome is not None and environment.outcome.reason == ending
    assert environment.outcome.detail is not None and detail in environment.outcome.detail
    answer = environment.get_account(account_id="AC-1002")  # type: ignore[attr-defined]
    assert answer == f"Error: the episode has ended ({ending}); no more tool calls run."
    assert environment.get_reward() == 0.0
    rewards = [
        function([[{"role": "assistant", "content": "done"}]], environments=[environment])[0]
        for function in reward_functions()
    ]
    assert rewards == [0.0] * len(rewards)

    # The same object goes on with a good row.
    scenario = next(s for s in library.scenarios if s.id == SCENARIO)
    assert environment.reset(scenario_id=SCENARIO, seed=3, prompt=[], index=None) == scenario.task
    for action in scenario.reference_actions:
        getattr(environment, action.name)(**action.arguments)
    assert finish_rollout(environment, "Done.").reason == "agent_done" and environment.get_reward() == 1.0


def test_extra_keys_of_any_type_are_left_alone(library: Library, jail: JailThread) -> None:
    factory = environment_factory(library, environments=["banking"], jail=jail)
    assert callable(factory)
    environment = factory()
    scenario = next(s for s in library.scenarios if s.id == SCENARIO)
    odd = {"prompt": 5, "index": object(), "extra": {"deep": [1, 2]}, "mode": ["conv"], "seed": None}
    assert environment.reset(scenario_id=SCENARIO, **odd) == scenario.task
    assert environment.outcome is None


def test_a_bad_row_is_logged_once_however_often_it_recurs(
    library: Library, jail: JailThread, caplog: pytest.LogCaptureFixture
) -> None:
    factory = environment_factory(library, environments=["banking"], jail=jail)
    assert callable(factory)
    environments = [factory() for _ in range(3)]
    first, second = f"missing-{uuid.uuid4().hex}", f"missing-{uuid.uuid4().hex}"
    with caplog.at_level(logging.WARNING, logger="harness.train.jailed_episode"):
        for environment in environments:  # a prompt's generations: the same row, once each
            environment.reset(scenario_id=first)
            environment.get_reward()
        environments[0].reset(scenario_id=second)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [message for message in warnings if first in message] == [
        f"rollout of scenario {first} ended: unknown_scenario: no scenario {first!r} in the library"
    ]
    assert len([message for message in warnings if second in message]) == 1


def test_grpo_takes_a_step_on_a_dataset_whose_rows_hold_bad_values(
    library: Library, jail: JailThread, tokenizer: Any
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    dataset = prompt_dataset(library, environments=["banking"]).select(range(4))
    dataset = dataset.add_column("seed", [None, "abc", None, "1e999"])
    ids = list(dataset["scenario_id"])
    ids[2] = "no-such-scenario"
    dataset = dataset.remove_columns("scenario_id").add_column("scenario_id", ids)
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="grpo-rows-"),
        per_device_train_batch_size=8,  # every row once, twice each
        num_generations=2,
        max_completion_length=12,
        max_steps=1,
        report_to="none",
        use_cpu=True,
        logging_steps=1,
        max_tool_calling_iterations=2,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        processing_class=tokenizer,
        args=args,
        train_dataset=dataset,
        environment_factory=environment_factory(library, environments=["banking"], jail=jail),
        reward_funcs=reward_functions(["composite"]),
    )
    trainer.train()
    assert trainer.state.global_step == 1
    outcomes = [environment.outcome for environment in trainer.environments]
    assert all(outcome is not None for outcome in outcomes)
    endings = sorted(outcome.reason for outcome in outcomes if outcome is not None)
    # One row runs (a null seed is seed 0), two hold a seed that is not an integer, one an unknown scenario.
    assert len(endings) == 8 and endings.count(BAD_ROW) == 4 and endings.count("unknown_scenario") == 2, endings
    void = [o for o in outcomes if o is not None and o.reason in (BAD_ROW, "unknown_scenario")]
    assert all(o.reward is None for o in void)


class Trainer:
    def __init__(self, tokenizer: Any, max_completion_length: int = 2000) -> None:
        self.processing_class = tokenizer

        class Args:
            pass

        self.args = Args()
        self.args.max_completion_length = max_completion_length  # type: ignore[attr-defined]


def never_called(_trainer: Any) -> Any:
    def generate(ids: list[int], budget: int) -> tuple[list[int], list[float]]:
        raise AssertionError("a void rollout generates nothing")

    return generate


def test_rollout_func_voids_prompts_that_name_no_scenario(library: Library, jail: JailThread, tokenizer: Any) -> None:
    rollout = rollout_func(library, mode="nonconv", generator=never_called, jail=jail)
    unknown = [{"role": "system", "content": "s"}, {"role": "user", "content": "", "scenario_id": "no-such"}]
    prompts: list[Any] = [[{"role": "user", "content": "hello"}], "not a list", None, unknown]
    output = rollout(prompts, Trainer(tokenizer))
    assert output["ending"] == [BAD_ROW, BAD_ROW, BAD_ROW, "unknown_scenario"]
    for ids, mask, components in zip(
        output["completion_ids"], output["env_mask"], output["reward_components"], strict=True
    ):
        assert ids == [tokenizer.eos_token_id] and mask == [0]
        assert set(components.values()) == {0.0}
    for prompt_ids in output["prompt_ids"][1:]:
        assert VOID in tokenizer.decode(prompt_ids)  # the prompt that was not a list of messages says why


def tool_call_reply(name: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": {}}) + "\n</tool_call><|im_end|>"


def test_base_exceptions_of_the_environment_reach_the_policy_as_tool_errors(
    raising: Library, jail: JailThread, tokenizer: Any
) -> None:
    factory = environment_factory(raising, include_invalid=True, jail=jail)
    assert callable(factory)
    environment = factory()
    assert environment.reset(scenario_id=TOOLS_SCENARIO) == "Call every tool, then complete the task."
    for name, error in RAISING_TOOLS.items():
        assert error in getattr(environment, name)(), name
        assert environment.outcome is None, name  # the rollout goes on
    assert json.loads(environment.complete())["data"] == 4  # type: ignore[attr-defined]
    outcome = finish_rollout(environment, "Done.")
    assert outcome.reason == "agent_done" and outcome.reward is not None
    assert (outcome.reward.checks_passed, outcome.reward.checks_total) == (2, 6)

    for what, error in LOADS.items():
        text = environment.reset(scenario_id=f"raises-on-load-{what.replace('_', '-')}")
        assert text is not None and text.startswith(f"{VOID}environment_error: ") and error in text, text
        assert environment.get_reward() == 0.0

    replies = [tool_call_reply(name) for name in [*RAISING_TOOLS, "complete"]] + ["Done.<|im_end|>"]

    def scripted(_trainer: Any) -> Any:
        queue = list(replies)

        def generate(ids: list[int], budget: int) -> tuple[list[int], list[float]]:
            new = tokenizer(queue.pop(0), add_special_tokens=False).input_ids
            return new, [-0.5] * len(new)

        return generate

    rollout = rollout_func(raising, mode="nonconv", include_invalid=True, generator=scripted, jail=jail)
    prompt = prompt_dataset(raising, scenarios=[TOOLS_SCENARIO])[0]["prompt"]
    output = rollout([prompt], Trainer(tokenizer, max_completion_length=6000))
    assert output["ending"] == ["agent_done"]
    assert output["reward_components"][0]["check_pass_rate"] == pytest.approx(2 / 6)
    text = tokenizer.decode(output["completion_ids"][0])
    for error in RAISING_TOOLS.values():
        assert error in text


def test_the_row_model_is_the_one_place_rows_are_read() -> None:
    from harness.train.rows import RolloutRow, read_row

    assert read_row({"scenario_id": "a", "seed": None}) == RolloutRow(scenario_id="a", seed=0)
    assert read_row("a row") == "the row: Input should be a valid dictionary or instance of RolloutRow"
    assert read_row({}) == "scenario_id: the row has none"
    assert read_row({"scenario_id": "", "seed": 1.5}) == (
        "scenario_id: String should have at least 1 character; seed: Input should be a valid integer"
    )
