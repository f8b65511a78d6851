"""A TRL ``rollout_func`` for multi-turn episodes with a simulated (or scripted) user, token-faithful.

The policy's tokens are kept as generated: each turn's input ids are the previous turn's ids plus the model's new
tokens plus only the new tokens of what followed (tool results, the user's reply, the next assistant header),
tokenized from the chat template's delta the way TRL does for its own tool loop. Nothing said earlier is ever
re-tokenized, so turn k's ids are a prefix of turn k+1's, and ``env_mask`` is 1 exactly on the model's tokens.
The rollout also returns each rollout's reward components (``reward_components``) and how it ended
(``ending``), which :func:`harness.train.trl_rewards.reward_functions` read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.library import Library
from harness.reward import CompositeWeights
from harness.rules import DEFAULT_RULES, RulesName
from harness.schema import Mode, PolicyTokens, Trajectory
from harness.train.jail_thread import JailThread
from harness.train.jailed_episode import EpisodeSettings, JailedEpisode, RolloutOutcome
from harness.train.trl_rewards import component_values

logger = logging.getLogger(__name__)

Generator = Callable[[list[int], int], tuple[list[int], list[float]]]
"""Continues a token sequence: (input ids, token budget) → (new token ids, their log-probabilities)."""


@dataclass
class TokenRollout:
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    turn_inputs: list[int] = field(default_factory=list)
    """The length of the input of each generation; every input is a prefix of the next."""
    outcome: RolloutOutcome | None = None

    def add(self, ids: list[int], logprobs: list[float] | None, generated: bool) -> None:
        self.completion_ids += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.env_mask += [1 if generated else 0] * len(ids)


def scenario_of(prompt: list[dict[str, Any]]) -> Any:
    """The ``scenario_id`` the prompt dataset put on the opening message (None when there is none)."""
    for message in prompt:
        if isinstance(message, dict) and message.get("scenario_id"):
            return message["scenario_id"]
    return None


def model_generator(trainer: Any) -> Generator:
    """Sample from the trainer's model with its generation settings; log-probabilities of the sampled tokens."""
    import torch

    tokenizer = trainer.processing_class
    model = trainer.accelerator.unwrap_model(trainer.model)
    temperature = float(getattr(trainer.args, "temperature", 1.0) or 1.0)

    def generate(ids: list[int], budget: int) -> tuple[list[int], list[float]]:
        inputs = torch.tensor([ids], device=model.device)
        with torch.no_grad():
            output = model.generate(
                input_ids=inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=budget,
                do_sample=True,
                temperature=temperature,
                top_p=float(getattr(trainer.args, "top_p", 1.0) or 1.0),
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
                return_dict_in_generate=True,
                output_logits=True,
            )
        new = output.sequences[0, len(ids) :].tolist()
        logprobs = [
            float(torch.log_softmax(logits[0].float() / temperature, dim=-1)[token])
            for logits, token in zip(output.logits, new, strict=False)
        ]
        return new, logprobs

    return generate


def template_ids(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool
) -> list[int]:
    """The chat template's token ids for ``messages`` (with the tools' schemas, and the assistant header)."""
    ids = tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=gen, tokenize=True, return_dict=False
    )
    return list(ids)


def observation_delta_ids(tokenizer: Any, assistant: dict[str, Any], observations: list[dict[str, Any]]) -> list[int]:
    """The new tokens of ``observations`` and the next assistant header, after an assistant turn like
    ``assistant``: what the template renders after that turn's end-of-turn token in a minimal conversation
    (the model generated up to that token, not the newline after it). Templates may render the assistant
    turn itself differently once messages follow it (Qwen3 drops an empty think block), so the cut is the
    turn's end-of-turn token, counted, not a textual prefix."""
    dummy_assistant: dict[str, Any] = {"role": "assistant", "content": ""}
    if assistant.get("tool_calls"):
        dummy_assistant["tool_calls"] = [
            {"type": "function", "function": {"name": call["function"]["name"], "arguments": {}}}
            for call in assistant["tool_calls"]
        ]
    else:
        dummy_assistant["content"] = "ok"
    dummy = [{"role": "user", "content": "dummy"}, dummy_assistant]
    eos = tokenizer.eos_token_id
    turns = template_ids(tokenizer, dummy, None, False).count(eos)
    full = template_ids(tokenizer, dummy + observations, None, True)
    ends = [index for index, token in enumerate(full) if token == eos]
    if turns == 0 or len(ends) < turns:
        raise ValueError("the chat template does not end an assistant turn with the end-of-sequence token")
    return full[ends[turns - 1] + 1 :]


class TokenFaithfulRollout:
    """Drives jailed episodes with a tokenizer and a generator; one rollout per prompt."""

    def __init__(self, tokenizer: Any, generate: Generator, settings: EpisodeSettings, jail: JailThread):
        self.tokenizer = tokenizer
        self.generate = generate
        self.settings = settings
        self.jail = jail

    def template_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool) -> list[int]:
        return template_ids(self.tokenizer, messages, tools, gen)

    def delta_ids(self, assistant: dict[str, Any], observations: list[dict[str, Any]]) -> list[int]:
        return observation_delta_ids(self.tokenizer, assistant, observations)

    def parse(self, ids: list[int], prefix: list[int], tools: list[dict[str, Any]]) -> dict[str, Any]:
        from trl.chat_template_utils import parse_response

        message = dict(parse_response(self.tokenizer, ids, prefix=prefix, tools=list[Any](tools)))
        message["role"] = "assistant"
        return message

    def run(self, prompt: list[dict[str, Any]], budget: int, max_turns: int) -> TokenRollout:
        episode = JailedEpisode(self.settings, self.jail.pool)
        messages = self.jail.run(episode.open(scenario_of(prompt)))
        if not messages:
            # Nothing to generate from: the rollout ends here and counts nothing the model did not write.
            rollout = TokenRollout(self.template_ids(_plain(prompt), None, True))
            rollout.add([self.tokenizer.eos_token_id], None, generated=False)
            rollout.outcome = episode.outcome
            return rollout
        tools = episode.tools
        rollout = TokenRollout(self.template_ids(messages, tools, True))
        ids = list(rollout.prompt_ids)
        assistant: dict[str, Any] = {}
        try:
            for _ in range(max_turns):
                left = budget - len(rollout.completion_ids)
                if left <= 0:
                    break
                rollout.turn_inputs.append(len(ids))
                new, logprobs = self.generate(ids, left)
                rollout.add(new, logprobs, generated=True)
                complete = bool(new) and new[-1] == self.tokenizer.eos_token_id
                assistant = self.parse(new, ids, tools)
                ids += new
                if not complete:
                    break  # cut by the budget: the episode ends with what the model managed to say
                observations = self.jail.run(episode.step(assistant))
                if episode.outcome is not None:
                    break
                delta = self.delta_ids(assistant, observations)
                if len(rollout.completion_ids) + len(delta) >= budget:
                    break
                rollout.add(delta, None, generated=False)
                ids += delta
            rollout.outcome = self.jail.run(episode.end(_text(assistant)))
        finally:
            self.jail.run(episode.close())
        if rollout.outcome is not None and rollout.outcome.trajectory is not None:
            rollout.outcome.trajectory.policy_tokens = PolicyTokens(
                prompt_ids=rollout.prompt_ids,
                completion_ids=rollout.completion_ids,
                logprobs=rollout.logprobs,
                env_mask=rollout.env_mask,
            )
        return rollout


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _plain(prompt: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": m.get("role", "user"), "content": m.get("content") or ""} for m in prompt]


def rollout_func(
    envs: Library | str | Path | None = None,
    *,
    user: Any = None,
    mode: Mode = "conv",
    rules: RulesName = DEFAULT_RULES,
    include_invalid: bool = False,
    max_turns: int = 16,
    max_steps: int | None = None,
    weights: CompositeWeights | None = None,
    allow_weak_sandbox: bool = False,
    generator: Callable[[Any], Generator] = model_generator,
    jail: JailThread | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """What ``GRPOTrainer(rollout_func=...)`` takes: multi-turn rollouts on the prompt dataset's scenarios.

    ``user`` is the simulated user (a :class:`~harness.protocols.UserPolicy`, or a function from the scenario
    to one, e.g. ``agents.scripted_user.ScriptedUser``); ``generator(trainer)`` returns the function that
    continues a token sequence (the trainer's model by default). ``on_trajectory`` receives each finished
    episode's record, with the policy's tokens in ``policy_tokens``. Use it without ``environment_factory``:
    TRL would otherwise run its own tool loop over these completions.
    """
    from harness.train.trl_environment import as_library

    library = as_library(envs)
    if mode == "conv" and user is None:
        raise ValueError("conversational mode needs a simulated user policy (user=...)")
    settings = EpisodeSettings(
        library=library,
        environment_id=None,
        mode=mode,
        rules=rules,
        include_invalid=include_invalid,
        allow_weak_sandbox=allow_weak_sandbox,
        user=user,
        max_steps=max_steps,
        weights=weights or CompositeWeights(),
    )
    jail = jail or JailThread(
        require_full_confinement=library.from_hub and not allow_weak_sandbox,
        optional_modules=library.optional_modules(),
    )

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        driver = TokenFaithfulRollout(trainer.processing_class, generator(trainer), settings, jail)
        budget = int(trainer.args.max_completion_length)
        results = [driver.run(prompt, budget, max_turns) for prompt in prompts]
        outcomes = [r.outcome or RolloutOutcome(None, "not_started") for r in results]
        if on_trajectory is not None:
            for outcome in outcomes:
                if outcome.trajectory is not None:
                    on_trajectory(outcome.trajectory)
        return {
            "prompt_ids": [r.prompt_ids for r in results],
            "completion_ids": [r.completion_ids for r in results],
            "logprobs": [r.logprobs for r in results],
            "env_mask": [r.env_mask for r in results],
            "reward_components": [component_values(o) for o in outcomes],
            "ending": [o.reason for o in outcomes],
        }

    rollout.jail = jail  # type: ignore[attr-defined]  # a function attribute: callers can reach the jail
    return rollout
