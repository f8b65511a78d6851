"""verl's agent loop on our environments: ``@register("harness")``, for ``rollout.agent.agent_loop_config_path``.

This is the only module that imports verl (install the ``train-verl`` extra in an environment of its own: verl
pins an older transformers than ``train-trl``). Each rollout opens the row's scenario (``extra_info.scenario_id``)
in a jailed session (:class:`harness.train.jailed_episode.JailedEpisode` on one :class:`JailThread` per process),
generates with ``server_manager.generate`` on token ids, parses tool calls with verl's ``ToolParser`` (``hermes``
for Qwen3) and steps the session. The model's tokens are kept as generated and only the chat template's delta of
the tool results and the user's reply is appended (``response_mask`` 0), so no turn is ever re-tokenized
(:mod:`harness.train.conversation`, shared with the TRL ``rollout_func``). In conversational mode (``mode: conv``
in the loop's entry, or ``extra_info.mode`` on the row) the simulated user of the entry's ``user`` opens and
answers each text reply, until its stop token or the turn limit. A row the library cannot serve or whose values
cannot start a rollout (``harness.train.rows``), a call its schema rejects, an unparseable call or an environment
crashing in the jail ends only that rollout, with ``extra_fields["ending"]`` saying why and ``reward_score`` 0,
never an exception; a rollout the simulated user (or another party that is not the policy) failed is also masked
out (``response_mask`` all 0, ``extra_fields["at_fault"]``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.utils.profiler import simple_timer

from harness.episode_factory import EpisodeRecipe
from harness.library import Library
from harness.registry import rules_profile
from harness.rules.profiles import DEFAULT_RULES, RulesName
from harness.schema import Mode
from harness.train.conversation import (
    BAD_MODE,
    MODES,
    TokenTrace,
    append_observations,
    at_fault,
    conversation_settings,
    policy_caused,
    template_ids,
    text_of,
    void_prompt,
)
from harness.train.jail_thread import JailThread
from harness.train.jailed_episode import NOT_STARTED, EpisodeSettings, JailedEpisode, RolloutOutcome, void_outcome
from harness.train.rows import BAD_ROW, read_row
from harness.train.trl_environment import as_library
from harness.train.trl_rewards import COMPONENTS, component_values

UNPARSEABLE_TOOL_CALL = "unparseable_tool_call"
RESPONSE_LENGTH = "response_length"
MAX_TURNS = "max_turns"


@dataclass
class SharedJail:
    """What every rollout of one process shares: the library's settings and one sandbox pool."""

    settings: EpisodeSettings
    jail: JailThread
    by_environment: dict[str, EpisodeSettings] = field(default_factory=dict)

    def settings_for(self, environment_id: str | None) -> EpisodeSettings:
        """Settings that refuse scenarios of any other environment (the screening verdicts stay shared)."""
        if environment_id is None:
            return self.settings
        if environment_id not in self.settings.library.environments:  # a row's name, not kept: it runs nothing
            return replace(self.settings, environment_id=environment_id)
        if environment_id not in self.by_environment:
            self.by_environment[environment_id] = replace(self.settings, environment_id=environment_id)
        return self.by_environment[environment_id]


_shared: dict[tuple[object, str, bool], SharedJail] = {}
_shared_lock = threading.Lock()


def shared_jail(envs: Library | str | None, rules: RulesName, include_invalid: bool) -> SharedJail:
    """One pool per library and rules in this process: verl builds a new agent loop object for every rollout."""
    source: object = envs if isinstance(envs, Library) else str(envs or "")
    key = (id(source) if isinstance(source, Library) else source, rules_profile(rules).name, include_invalid)
    with _shared_lock:
        if key not in _shared:
            library: Library = as_library(envs)
            settings = EpisodeSettings(
                library=library,
                environment_id=None,
                recipe=EpisodeRecipe(rules=rules_profile(rules), screen=not include_invalid),
            )
            jail = JailThread(library.jail())
            _shared[key] = SharedJail(settings, jail)
        return _shared[key]


def close_shared_jails() -> None:
    """Stop every pool this process opened (a trainer's shutdown, or a test's)."""
    with _shared_lock:
        for shared in _shared.values():
            shared.jail.close()
        _shared.clear()


@register("harness")
class HarnessAgentLoop(AgentLoopBase):
    """One rollout of one of our scenarios. Its keywords come from the agent loop YAML entry: ``envs`` (a library
    folder or Hub dataset id, or a :class:`Library`; the seed library when absent), ``rules`` (``harness`` or a
    benchmark's profile), ``reward`` (the component put in ``reward_score``: ``composite``, the rules' reward, by
    default; ``check_pass_rate``, ...), ``tool_parser`` (a verl parser name, ``hermes`` for Qwen3),
    ``max_turns`` (the policy's generations), ``include_invalid``, ``mode`` (``nonconv`` or ``conv``; a row's
    ``extra_info.mode`` overrides it) and ``user``: the simulated user of conversational rows, a user policy or a
    function from the scenario to one, e.g. ``agents.training_user.conversation_user`` through hydra's
    ``_target_`` (an LLM through :mod:`harness.llm`, or the scenario's scripted turns when it has them).
    """

    def __init__(
        self,
        *args: Any,
        envs: Library | str | None = None,
        rules: RulesName = DEFAULT_RULES,
        reward: str = "composite",
        tool_parser: str = "hermes",
        max_turns: int = 16,
        include_invalid: bool = False,
        mode: Mode = "nonconv",
        user: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if reward not in COMPONENTS:
            raise ValueError(f"unknown reward {reward!r}; choose from {', '.join(COMPONENTS)}")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose nonconv or conv")
        if mode == "conv" and user is None:
            raise ValueError("mode conv needs a simulated user: give the loop's entry a user")
        self.mode = mode
        self.user = user
        self.reward_component = reward
        self.max_turns = max_turns
        self.response_length = int(self.rollout_config.response_length)
        self.tool_parser = ToolParser.get_tool_parser(tool_parser, self.tokenizer)
        self.shared = shared_jail(
            envs if isinstance(envs, Library) or envs is None else str(envs), rules, include_invalid
        )

    async def _jail(self, coroutine: Any) -> Any:
        return await self.shared.jail.run_async(coroutine)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One rollout of the row's scenario. Any value of the row (``extra_info``, ``raw_prompt``; ``tools_kwargs``
        is not read: the tools are the environment's) that cannot start a rollout ends it with its reason and
        ``reward_score`` 0, never an exception."""
        raw_prompt = kwargs.get("raw_prompt")
        extra_info = kwargs.get("extra_info")
        metrics: dict[str, Any] = {}
        row = read_row(extra_info)
        if isinstance(row, str):
            return self._ended_before_start(raw_prompt, void_outcome(None, BAD_ROW, f"extra_info: {row}"), metrics)
        # The row names its environment: a scenario of another one is refused, not run.
        mode = extra_info.get("mode") if isinstance(extra_info, Mapping) else None
        settings = conversation_settings(self.shared.settings_for(row.environment), mode or self.mode, self.user)
        if isinstance(settings, str):
            return self._ended_before_start(raw_prompt, void_outcome(row.scenario_id, BAD_MODE, settings), metrics)
        episode = JailedEpisode(settings, self.shared.jail.pool)
        messages: list[dict[str, Any]] = await self._jail(episode.open_row(extra_info))
        if not messages:
            return self._ended_before_start(raw_prompt, episode.outcome, metrics)
        tools = episode.tools
        trace = TokenTrace(template_ids(self.tokenizer, messages, tools, True))
        turns, tool_calls = 1, 0
        assistant: dict[str, Any] = {}
        stopped_by: str | None = None
        try:
            for _ in range(self.max_turns):
                left = self.response_length - len(trace.response_ids)
                if left <= 0:
                    stopped_by = RESPONSE_LENGTH
                    break
                trace.generation_inputs.append(len(trace.all_ids))
                with simple_timer("generate_sequences", metrics):
                    output = await self.server_manager.generate(
                        request_id=uuid4().hex,
                        prompt_ids=trace.all_ids,
                        sampling_params={**sampling_params, "max_tokens": left},
                    )
                new = list(output.token_ids)
                trace.add(new, output.log_probs, generated=True)
                turns += 1
                content, calls = await self.tool_parser.extract_tool_calls(new, [])
                if not calls and self._has_tool_call_markup(self.tokenizer.decode(new)):
                    await self._jail(episode.abort(UNPARSEABLE_TOOL_CALL, "the reply's tool call is not valid JSON"))
                    break
                assistant = {"role": "assistant", "content": _without_eos(content, self.tokenizer)}
                if calls:
                    assistant["tool_calls"] = [
                        {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                        for call in calls
                    ]
                    if await self._jail(episode.reject_invalid_calls(assistant)) is not None:
                        break
                if not new or new[-1] != self.tokenizer.eos_token_id:
                    stopped_by = RESPONSE_LENGTH
                    break
                with simple_timer("tool_calls", metrics):
                    observations = await self._jail(episode.step(assistant))
                tool_calls += len(calls)
                turns += len(observations)
                if episode.outcome is not None:
                    break
                if not append_observations(trace, self.tokenizer, assistant, observations, self.response_length):
                    stopped_by = RESPONSE_LENGTH
                    break
            else:
                stopped_by = MAX_TURNS
            outcome: RolloutOutcome = await self._jail(episode.end(text_of(assistant)))
        finally:
            await self._jail(episode.close())
        return self._output(trace, outcome, turns, tool_calls, metrics, stopped_by)

    def _has_tool_call_markup(self, text: str) -> bool:
        start = getattr(self.tool_parser, "tool_call_start_token", None)
        return isinstance(start, str) and start in text

    def _ended_before_start(
        self, raw_prompt: object, outcome: RolloutOutcome | None, metrics: dict[str, Any]
    ) -> AgentLoopOutput:
        outcome = outcome or RolloutOutcome(None, NOT_STARTED)
        trace = TokenTrace(template_ids(self.tokenizer, void_prompt(raw_prompt, outcome), None, True))
        # verl pads and stacks responses: one masked token stands for the rollout that never started.
        trace.add([self.tokenizer.eos_token_id], None, generated=False)
        return self._output(trace, outcome, 0, 0, metrics, None)

    def _output(
        self,
        trace: TokenTrace,
        outcome: RolloutOutcome,
        turns: int,
        tool_calls: int,
        metrics: dict[str, Any],
        stopped_by: str | None,
    ) -> AgentLoopOutput:
        components = component_values(outcome)
        if not policy_caused(outcome):
            trace.mask_all()
        cut = self.response_length
        return AgentLoopOutput(
            prompt_ids=self._cap_text_prompt_length(trace.prompt_ids),
            response_ids=trace.response_ids[:cut],
            response_mask=trace.response_mask[:cut],
            response_logprobs=trace.logprobs[:cut],
            reward_score=components[self.reward_component],
            num_turns=turns,
            metrics=AgentLoopMetrics(**{k: v for k, v in metrics.items() if k in AgentLoopMetrics.model_fields}),
            extra_fields={
                "scenario_id": outcome.scenario_id,
                "ending": outcome.reason,
                "ending_detail": outcome.detail,
                "at_fault": at_fault(outcome),
                "stopped_by": stopped_by,
                "tool_call_count": tool_calls,
                "reward_components": components,
                "generation_inputs": trace.generation_inputs,
                "turn_scores": [],
                "tool_rewards": [],
            },
        )


def _without_eos(text: str, tokenizer: Any) -> str:
    eos = tokenizer.eos_token
    return text[: -len(eos)] if isinstance(eos, str) and text.endswith(eos) else text


def loop_config(envs: str | Path | None = None, **settings: Any) -> list[dict[str, Any]]:
    """The entry ``rollout.agent.agent_loop_config_path`` lists for this loop (write it as YAML)."""
    entry: dict[str, Any] = {"name": "harness", "_target_": f"{__name__}.{HarnessAgentLoop.__qualname__}"}
    if envs is not None:
        entry["envs"] = str(envs)
    return [{**entry, **settings}]


__all__ = ["HarnessAgentLoop", "close_shared_jails", "loop_config"]
