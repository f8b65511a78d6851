"""The token-faithful conversation both trainer adapters drive: the TRL ``rollout_func`` and the verl agent loop.

A rollout's ids are the prompt's, then each generation's new tokens as the policy produced them (mask 1, with
their log-probabilities), then only the chat template's delta of what followed: tool results, or in
conversational mode the user's reply, and the next assistant header (mask 0). Nothing said earlier is ever
re-tokenized, so each generation's input is a prefix of the next one's. The episode itself (tool calls in the
jail, the simulated user's turns, the stop token, the rules' reward) is :class:`~harness.train.jailed_episode.
JailedEpisode`'s; this module only keeps the tokens and the settings of a conversation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from harness.schema import Mode, PolicyTokens, TerminationReason
from harness.train.jailed_episode import EpisodeSettings, RolloutOutcome
from harness.train.rows import void_text

MODES: tuple[Mode, ...] = ("nonconv", "conv")
BAD_MODE = "bad_mode"
"""The ending of a rollout whose row asks for a mode the trainer cannot run (unknown, or conv with no user)."""


@dataclass
class TokenTrace:
    """The ids of one rollout after its prompt; 1 in the mask where the policy generated the token."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    generation_inputs: list[int] = field(default_factory=list)
    """The length of each generation's input; each input is a prefix of the next."""

    def add(self, ids: list[int], logprobs: list[float] | None, generated: bool) -> None:
        self.response_ids += ids
        self.response_mask += [1 if generated else 0] * len(ids)
        self.logprobs += list(logprobs) if logprobs else [0.0] * len(ids)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def mask_all(self) -> None:
        """Train on none of it: the rollout failed for a reason the policy did not cause."""
        self.response_mask = [0] * len(self.response_ids)

    def policy_tokens(self) -> PolicyTokens:
        return PolicyTokens(
            prompt_ids=self.prompt_ids,
            completion_ids=self.response_ids,
            logprobs=self.logprobs,
            env_mask=self.response_mask,
        )


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


def append_observations(
    trace: TokenTrace,
    tokenizer: Any,
    assistant: dict[str, Any],
    observations: list[dict[str, Any]],
    budget: int,
) -> bool:
    """Append what followed ``assistant`` (mask 0); False, appending nothing, when it would fill ``budget``."""
    delta = observation_delta_ids(tokenizer, assistant, observations)
    if len(trace.response_ids) + len(delta) >= budget:
        return False
    trace.add(delta, None, generated=False)
    return True


def conversation_settings(settings: EpisodeSettings, mode: Any, user: Any) -> EpisodeSettings | str:
    """``settings`` for one rollout in ``mode`` with ``user`` (a user policy, or a function from the scenario to
    one); the reason it cannot run instead when the mode is unknown or a conversation has no user."""
    if mode not in MODES:
        return f"unknown mode {mode!r}; choose nonconv or conv"
    if mode == "conv" and user is None:
        return "conversational mode needs a simulated user, and none is configured"
    if settings.mode == mode and settings.user is (user if mode == "conv" else None):
        return settings
    recipe = settings.recipe.model_copy(update={"mode": mode})
    return replace(settings, recipe=recipe, user=user if mode == "conv" else None)


def policy_caused(outcome: RolloutOutcome) -> bool:
    """Whether the policy may learn from how the rollout went: not when the simulated user, a model endpoint, the
    sandbox or the harness failed it (``infra_error``, re-runnable, never scored); such a rollout is masked."""
    return outcome.reason != TerminationReason.INFRA_ERROR.value


def at_fault(outcome: RolloutOutcome) -> str | None:
    """Who failed the rollout (``user_simulator``, ``model_endpoint``, ``environment``, ...), or None."""
    trajectory = outcome.trajectory
    if trajectory is None or trajectory.failure is None:
        return None
    return trajectory.failure.at_fault.value


_ROLES = frozenset({"system", "user", "assistant", "tool"})


def plain_messages(prompt: object) -> list[dict[str, str]]:
    """Role and text of each message of a row's prompt (a prompt dataset's rows may carry extra keys); [] for a
    prompt that is not a list of messages. A role the chat template would not know is the user's, content that is
    not text is empty."""
    # verl hands a row's prompt over as a numpy array of messages, TRL as a list.
    if isinstance(prompt, str | bytes | Mapping) or not isinstance(prompt, Iterable):
        return []
    plain: list[dict[str, str]] = []
    for message in prompt:
        if isinstance(message, Mapping):
            role, content = message.get("role"), message.get("content")
            role = role if isinstance(role, str) and role in _ROLES else "user"
            plain.append({"role": role, "content": content if isinstance(content, str) else ""})
    return plain


def void_prompt(prompt: object, outcome: RolloutOutcome) -> list[dict[str, str]]:
    """The messages of a rollout that ended before it started: its row's prompt, whose opening user message (left
    empty for the environment to fill) says the rollout is void and why; that message alone when the row's prompt
    holds none."""
    messages = plain_messages(prompt)
    void = {"role": "user", "content": void_text(outcome.reason, outcome.detail)}
    if messages and messages[-1]["role"] == "user" and not messages[-1]["content"]:
        return [*messages[:-1], void]
    return messages or [void]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


__all__ = [
    "BAD_MODE",
    "MODES",
    "TokenTrace",
    "append_observations",
    "at_fault",
    "conversation_settings",
    "observation_delta_ids",
    "plain_messages",
    "policy_caused",
    "template_ids",
    "text_of",
    "void_prompt",
]
