"""TRL adapter: environment_factory, reward functions, the prompt dataset, the token-faithful rollout_func.

Everything runs offline on CPU with a tiny random Qwen3 and a tokenizer trained here; every tool call and
every check runs in the jail.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from harness.library import Library, load_library
from harness.rules.protocols import STOP, UserTurn
from harness.schema import AgentSettings, ModelSettings, Trajectory
from harness.train.jail_thread import JailThread
from harness.train.jailed_episode import OTHER_ENVIRONMENT, REJECTED_CALL, UNKNOWN_SCENARIO
from harness.train.trl_dataset import prompt_dataset
from harness.train.trl_environment import environment_factory, environment_tools, finish_rollout
from harness.train.trl_rewards import reward_functions
from harness.train.trl_rollout import rollout_func
from tests.doubles.train_trl_tiny import tiny_model, tiny_tokenizer
from tests.support.cli_process import harness

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


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


def test_trl_discovers_exactly_our_tool_schemas(library: Library, jail: JailThread) -> None:
    import inspect

    from transformers.utils import get_json_schema

    factories = environment_factory(library, environments=["banking", "hotel_booking"], jail=jail)
    assert isinstance(factories, dict)
    for environment_id, factory in factories.items():
        instance = factory()
        discovered = {
            name: get_json_schema(getattr(instance, name))["function"]
            for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")
        }
        ours = {spec.function.name: spec.function for spec in environment_tools(library.environments[environment_id])}
        assert sorted(discovered) == sorted(ours)
        for name, spec in ours.items():
            parameters = spec.parameters or {}
            assert discovered[name]["parameters"]["properties"] == parameters.get("properties", {}), name
            assert set(discovered[name]["parameters"].get("required", [])) == set(parameters.get("required", []))
            assert discovered[name]["description"] == spec.description


def test_grpo_trainer_takes_an_optimisation_step_on_four_seed_scenarios(
    library: Library, jail: JailThread, tokenizer: Any
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    dataset = prompt_dataset(library, environments=["banking"]).select(range(4))
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="grpo-"),
        per_device_train_batch_size=4,
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
        reward_funcs=reward_functions(),
    )
    trainer.train()
    assert trainer.state.global_step == 1
    logged = trainer.state.log_history[0]
    for name in ("check_pass_rate", "state_reward", "trajectory_match", "length_penalty", "composite", "envscaler"):
        assert f"rewards/{name}/mean" in logged
    # Every rollout was scored by the scenario's checks, run in the jail.
    outcomes = [environment.outcome for environment in trainer.environments]
    assert len(outcomes) == 4
    assert all(o is not None and o.reward is not None and o.reward.checks_total > 0 for o in outcomes)
    assert {o.scenario_id for o in outcomes} <= set(dataset["scenario_id"])


class LinesUser:
    """A user who says its lines in order, then stops."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.settings = AgentSettings(kind="scripted_user", role="user", model=ModelSettings(model="scripted"))

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn:
        said = sum(1 for message in messages if message.get("role") == "assistant")
        if said >= len(self.lines):
            return UserTurn(text=STOP, stop_token=STOP)
        return UserTurn(text=self.lines[said])


class Trainer:
    def __init__(self, tokenizer: Any, max_completion_length: int = 6000) -> None:
        self.processing_class = tokenizer

        class Args:
            pass

        self.args = Args()
        self.args.max_completion_length = max_completion_length  # type: ignore[attr-defined]


def test_a_scripted_conversation_keeps_the_policy_tokens_and_masks_exactly_the_rest(
    library: Library, jail: JailThread, tokenizer: Any
) -> None:
    scenario = library.scenarios_for("banking")[0]
    replies = [
        "<tool_call>\n" + json.dumps({"name": a.name, "arguments": a.arguments}) + "\n</tool_call><|im_end|>"
        for a in scenario.reference_actions
    ] + ["The transfer is done.<|im_end|>", "Yes, 500 dollars moved.<|im_end|>"]
    follow_up = "Can you confirm the amount?"
    inputs_seen: list[list[int]] = []

    def scripted(_trainer: Any) -> Any:
        queue = list(replies)

        def generate(ids: list[int], budget: int) -> tuple[list[int], list[float]]:
            inputs_seen.append(list(ids))
            new = tokenizer(queue.pop(0), add_special_tokens=False).input_ids
            return new, [-0.25] * len(new)

        return generate

    traces: list[Trajectory] = []
    rollout = rollout_func(
        library, user=LinesUser([scenario.task, follow_up]), generator=scripted, jail=jail, on_trajectory=traces.append
    )
    prompt = prompt_dataset(library, scenarios=[scenario.id], mode="conv")[0]["prompt"]
    output = rollout([prompt], Trainer(tokenizer))

    assert output["ending"] == ["user_stop"]
    assert output["reward_components"][0]["state_reward"] == 1.0
    assert output["reward_components"][0]["composite"] == 1.0
    completion, mask = output["completion_ids"][0], output["env_mask"][0]
    assert len(completion) == len(mask) == len(output["logprobs"][0])
    spans: list[tuple[int, str]] = []
    start = 0
    for index in range(1, len(mask) + 1):
        if index == len(mask) or mask[index] != mask[start]:
            spans.append((mask[start], tokenizer.decode(completion[start:index])))
            start = index
    # The ones are exactly the model's turns, token for token; the zeros are the tool results and the user.
    assert [text for flag, text in spans if flag == 1] == replies
    zeros = [text for flag, text in spans if flag == 0]
    assert len(zeros) == len(replies) - 1
    assert all("<tool_response>" in text for text in zeros[: len(scenario.reference_actions)])
    assert follow_up in zeros[-1] and "<tool_response>" not in zeros[-1]
    assert all(lp == 0.0 for lp, flag in zip(output["logprobs"][0], mask, strict=True) if flag == 0)
    # No re-tokenization: every generation's input extends the previous one, and the last is prompt + completion.
    for earlier, later in itertools.pairwise(inputs_seen):
        assert later[: len(earlier)] == earlier
    assert (output["prompt_ids"][0] + completion)[: len(inputs_seen[-1])] == inputs_seen[-1]
    # The trace keeps the same tokens, and survives a dump and a load.
    (trace,) = traces
    assert trace.policy_tokens is not None and trace.policy_tokens.completion_ids == completion
    assert trace.reward is not None and trace.reward.composite == 1.0
    again = Trajectory.model_validate_json(trace.model_dump_json())
    assert again.policy_tokens == trace.policy_tokens and again.policy_tokens.env_mask == mask


def crashing_library(library: Library) -> Library:
    banking = library.environments["banking"]
    code = banking.code.replace(
        "def __init__(self, init_config: dict):", "def __init__(self, init_config: dict):\n        raise SystemExit(3)"
    )
    assert code != banking.code
    broken = banking.model_copy(update={"code": code})
    return replace(library, environments={**library.environments, "banking": broken})


def test_bad_input_ends_only_its_own_rollout_with_a_reason_and_zero_reward(library: Library, jail: JailThread) -> None:
    factory = environment_factory(library, environments=["banking"], jail=jail)
    assert callable(factory)
    environment = factory()
    rewards = reward_functions(["composite"])[0]

    assert environment.reset(scenario_id="no-such-scenario") == (
        "This rollout is void (unknown_scenario: no scenario 'no-such-scenario' in the library). "
        "No tool runs in it, and its reward is 0."
    )
    assert environment.outcome is not None and environment.outcome.reason == UNKNOWN_SCENARIO
    assert environment.get_reward() == 0.0

    other = library.scenarios_for("hotel_booking")[0]
    assert (environment.reset(scenario_id=other.id) or "").startswith("This rollout is void (scenario_of_another_")
    assert environment.outcome is not None and environment.outcome.reason == OTHER_ENVIRONMENT
    assert rewards([[{"role": "assistant", "content": "hi"}]], environments=[environment]) == [0.0]

    scenario = library.scenarios_for("banking")[0]
    assert environment.reset(scenario_id=scenario.id) == scenario.task
    text = environment.find_customer_by_email(mail="x@example.com")  # type: ignore[attr-defined]
    assert "unknown parameter 'mail'" in text
    assert environment.outcome is not None and environment.outcome.reason == REJECTED_CALL
    assert "ended" in environment.find_customer_by_email(email="x@example.com")  # type: ignore[attr-defined]
    assert environment.get_reward() == 0.0

    crashing = environment_factory(crashing_library(library), environments=["banking"], include_invalid=True, jail=jail)
    assert callable(crashing)
    broken = crashing()
    assert (broken.reset(scenario_id=scenario.id) or "").startswith("This rollout is void (environment_error: ")
    assert broken.outcome is not None and broken.outcome.reason == "environment_error"
    assert broken.get_reward() == 0.0

    # The same object (and the trainer's process) goes on: a good scenario runs and scores.
    assert environment.reset(scenario_id=scenario.id) == scenario.task
    for action in scenario.reference_actions:
        getattr(environment, action.name)(**action.arguments)
    outcome = finish_rollout(environment, "Done.")
    assert outcome.reason == "agent_done" and environment.get_reward() == 1.0


def test_a_generation_batch_of_64_environments_called_from_64_threads_keeps_64_states(
    library: Library, jail: JailThread
) -> None:
    factory = environment_factory(library, environments=["banking"], jail=jail)
    assert callable(factory)
    environments = [factory() for _ in range(64)]
    scenario = next(s for s in library.scenarios_for("banking") if s.id == "banking-001")
    release = threading.Barrier(64)

    def rollout(environment: Any) -> tuple[str | None, float, Any]:
        release.wait()  # every thread resets and calls while the other 63 do
        task = environment.reset(scenario_id=scenario.id)
        for action in scenario.reference_actions:
            getattr(environment, action.name)(**action.arguments)
        balance = json.loads(environment.get_account(account_id="AC-1002"))["data"]["balance"]
        return task, balance, finish_rollout(environment, "Done.")

    with ThreadPoolExecutor(max_workers=64) as threads:
        results = list(threads.map(rollout, environments))

    for task, balance, outcome in results:
        assert task == scenario.task
        # One transfer of 500 from 12000 in each: 64 rollouts sharing a state would have drained the account.
        assert balance == pytest.approx(11500.0)
        assert outcome.reason == "agent_done" and outcome.reward is not None
        assert outcome.reward.checks_passed == outcome.reward.checks_total > 0


def test_train_dataset_command_writes_a_loadable_prompt_dataset(tmp_path: Path) -> None:
    import datasets

    out = tmp_path / "prompts"
    done = harness(["train", "dataset", "datasets/seed", "--out", str(out), "-e", "banking"])
    assert done.code == 0, done.stderr
    rows = datasets.load_dataset(str(out), split="train")
    assert len(rows) == 12 and set(rows.column_names) == {"prompt", "scenario_id", "environment"}
    first = rows[0]
    assert first["prompt"][0]["role"] == "system" and first["prompt"][1]["scenario_id"] == first["scenario_id"]

    bad = harness(["train", "dataset", "datasets/seed", "--out", str(tmp_path / "x"), "-e", "nope"])
    assert bad.code == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    assert not (tmp_path / "x").exists()

    # Rules whose agent writes its calls as text cannot be trained through adapters that read native tool calls.
    for flag in ([], ["--format", "verl"]):
        text = harness(
            ["train", "dataset", "datasets/seed", "--out", str(tmp_path / "t"), "--rules", "acebench-text", *flag]
        )
        assert text.code == 2 and len(text.stderr.strip().splitlines()) == 1, text.stderr
        assert "acebench-text" in text.stderr and "natively" in text.stderr and "Traceback" not in text.stderr
        assert not (tmp_path / "t").exists()


class FailingUser(LinesUser):
    """Opens with the task, then fails (a simulated user whose model is gone)."""

    async def respond(self, messages: list[dict[str, Any]]) -> UserTurn:
        if any(message.get("role") == "assistant" for message in messages):
            raise RuntimeError("the user model is unreachable")
        return await super().respond(messages)


def test_a_conversation_the_user_fails_is_masked_out_and_unrewarded(
    library: Library, jail: JailThread, tokenizer: Any
) -> None:
    scenario = library.scenarios_for("banking")[0]

    def scripted(_trainer: Any) -> Any:
        def generate(ids: list[int], budget: int) -> tuple[list[int], list[float]]:
            new = tokenizer("Which account?<|im_end|>", add_special_tokens=False).input_ids
            return new, [-0.25] * len(new)

        return generate

    traces: list[Trajectory] = []
    rollout = rollout_func(
        library, user=FailingUser([scenario.task]), generator=scripted, jail=jail, on_trajectory=traces.append
    )
    prompt = prompt_dataset(library, scenarios=[scenario.id], mode="conv")[0]["prompt"]
    output = rollout([prompt], Trainer(tokenizer))
    assert output["ending"] == ["infra_error"]
    assert output["env_mask"][0] == [0] * len(output["completion_ids"][0]) and output["completion_ids"][0]
    assert output["reward_components"][0]["composite"] == 0.0
    (trace,) = traces
    assert trace.failure is not None and trace.failure.at_fault.value == "user_simulator"
