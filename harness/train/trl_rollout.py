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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.episode_factory import EpisodeRecipe
from harness.library import Library
from harness.registry import rules_profile
from harness.rules.profiles import DEFAULT_RULES, RulesName
from harness.schema import Mode, Trajectory
from harness.scoring.reward import CompositeWeights
from harness.train.conversation import (
    TokenTrace,
    append_observations,
    policy_caused,
    template_ids,
    text_of,
    void_prompt,
)
from harness.train.jail_thread import JailThread
from harness.train.jailed_episode import NOT_STARTED, EpisodeSettings, JailedEpisode, RolloutOutcome
from harness.train.trl_rewards import component_values

logger = logging.getLogger(__name__)

Generator = Callable[[list[int], int], tuple[list[int], list[float]]]
"""Continues a token sequence: (input ids, token budget) → (new token ids, their log-probabilities)."""


@dataclass
class TokenRollout:
    """One rollout's ids (the shared :class:`TokenTrace`) and how it ended."""

    trace: TokenTrace
    outcome: RolloutOutcome | None = None


def scenario_of(prompt: object) -> Any:
    """The ``scenario_id`` the prompt dataset put on the opening message (None when there is none, or the prompt is
    not a list of messages)."""
    if not isinstance(prompt, list | tuple):
        return None
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


class TokenFaithfulRollout:
    """Drives jailed episodes with a tokenizer and a generator; one rollout per prompt."""

    def __init__(self, tokenizer: Any, generate: Generator, settings: EpisodeSettings, jail: JailThread):
        self.tokenizer = tokenizer
        self.generate = generate
        self.settings = settings
        self.jail = jail

    def parse(self, ids: list[int], prefix: list[int], tools: list[dict[str, Any]]) -> dict[str, Any]:
        from trl.chat_template_utils import parse_response

        message = dict(parse_response(self.tokenizer, ids, prefix=prefix, tools=list[Any](tools)))
        message["role"] = "assistant"
        return message

    def run(self, prompt: object, budget: int, max_turns: int) -> TokenRollout:
        episode = JailedEpisode(self.settings, self.jail.pool)
        messages = self.jail.run(episode.open(scenario_of(prompt)))
        if not messages:
            # Nothing to generate from: the rollout ends here and counts nothing the model did not write.
            outcome = episode.outcome or RolloutOutcome(None, NOT_STARTED)
            trace = TokenTrace(template_ids(self.tokenizer, void_prompt(prompt, outcome), None, True))
            trace.add([self.tokenizer.eos_token_id], None, generated=False)
            return TokenRollout(trace, outcome)
        tools = episode.tools
        trace = TokenTrace(template_ids(self.tokenizer, messages, tools, True))
        rollout = TokenRollout(trace)
        assistant: dict[str, Any] = {}
        try:
            for _ in range(max_turns):
                left = budget - len(trace.response_ids)
                if left <= 0:
                    break
                ids = trace.all_ids
                trace.generation_inputs.append(len(ids))
                new, logprobs = self.generate(ids, left)
                trace.add(new, logprobs, generated=True)
                complete = bool(new) and new[-1] == self.tokenizer.eos_token_id
                assistant = self.parse(new, ids, tools)
                if not complete:
                    break  # cut by the budget: the episode ends with what the model managed to say
                observations = self.jail.run(episode.step(assistant))
                if episode.outcome is not None:
                    break
                if not append_observations(trace, self.tokenizer, assistant, observations, budget):
                    break
            rollout.outcome = self.jail.run(episode.end(text_of(assistant)))
        finally:
            self.jail.run(episode.close())
        if rollout.outcome is not None and not policy_caused(rollout.outcome):
            trace.mask_all()
        if rollout.outcome is not None and rollout.outcome.trajectory is not None:
            rollout.outcome.trajectory.policy_tokens = trace.policy_tokens()
        return rollout


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

    ``user`` is the simulated user (a :class:`~harness.rules.protocols.UserPolicy`, or a function from the scenario
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
        recipe=EpisodeRecipe(
            mode=mode,
            max_steps=max_steps,
            reward_weights=weights or CompositeWeights(),
            rules=rules_profile(rules),
            screen=not include_invalid,
            allow_weak_sandbox=allow_weak_sandbox,
        ),
        user=user,
    )
    jail = jail or JailThread(library.jail(allow_weak_sandbox=allow_weak_sandbox))

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        driver = TokenFaithfulRollout(trainer.processing_class, generator(trainer), settings, jail)
        budget = int(trainer.args.max_completion_length)
        results = [driver.run(prompt, budget, max_turns) for prompt in prompts]
        outcomes = [r.outcome or RolloutOutcome(None, "not_started") for r in results]
        traces = [r.trace for r in results]
        if on_trajectory is not None:
            for outcome in outcomes:
                if outcome.trajectory is not None:
                    on_trajectory(outcome.trajectory)
        return {
            "prompt_ids": [t.prompt_ids for t in traces],
            "completion_ids": [t.response_ids for t in traces],
            "logprobs": [t.logprobs for t in traces],
            "env_mask": [t.response_mask for t in traces],
            "reward_components": [component_values(o) for o in outcomes],
            "ending": [o.reason for o in outcomes],
        }

    rollout.jail = jail  # type: ignore[attr-defined]  # a function attribute: callers can reach the jail
    return rollout
