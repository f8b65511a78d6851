"""The ``taubench`` and ``taubench-react`` episode rules: τ-bench's tool-calling agent loop, user simulator and
reward for its imported domains (``docs/episode-rules.md`` gives each field's upstream source)."""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules, RoleSampling, RulesPrompts, Sampling
from harness.rules.protocols import STOP
from harness.schema import TerminationReason

from .prompts import agent_system_prompt, react_user_system_prompt, user_opening, user_system_prompt

# τ-bench (sierra-research/tau-bench): tau_bench/envs/base.py, tau_bench/envs/user.py,
# tau_bench/agents/tool_calling_agent.py, tau_bench/run.py. docs/episode-rules.md gives each field's upstream source.
TAUBENCH_USER_OPENING = "Hi! How can I help you today?"
"""EnvScaler's preset's fixed opening line (``taubench`` sends upstream's, read from the checkout at import)."""
TAUBENCH_RULES = EpisodeRules(
    name="taubench",
    first_call_only=True,
    # The imported environment's dispatcher hands the arguments to upstream's tools unchecked, as upstream does.
    pass_arguments_through=False,
    raising_tool_ends_episode=False,
    truncation_scores=False,
    empty_turn_is_parse_error=False,
    parse_error_limit=False,
    reward_decimals=None,
    composite_reward=False,
    tool_result_format="text",
    errors_as_user_messages=False,
    stop_tokens=(STOP,),
    reply_tool=None,
    environment_failure="scored_failed",
    conversation_only=True,
    prompts=RulesPrompts(agent=agent_system_prompt, user=user_system_prompt, opening=user_opening),
    default_max_steps=30,
    unreadable_turn_ends_episode=True,
    scored_endings=(TerminationReason.USER_STOP, TerminationReason.AGENT_DONE),
    all_or_nothing_reward=True,
    required_source="taubench",
    drop_unrun_calls=True,
    ending_tools=("transfer_to_human_agents",),
    # Env.reset returns the user's first message without looking for ###STOP###: only a reply to the agent ends.
    opening_stop_ends=False,
    # run.py's --temperature (0.0) is all the agent's completion call sets (tool_calling_agent.py); the user
    # simulator's call (envs/user.py) sets no sampling parameter; neither sends a seed or a tool_choice.
    sampling=Sampling(agent=RoleSampling(temperature=0.0), user=RoleSampling()),
)
# EnvScaler's τ-bench evaluation: upstream's ReAct user (tau_bench/envs/user.py ReactUserSimulationEnv) with only its
# reply sent to the agent; everything else as TAUBENCH_RULES.
TAUBENCH_REACT_RULES = TAUBENCH_RULES.model_copy(
    update={
        "name": "taubench-react",
        "prompts": RulesPrompts(agent=agent_system_prompt, user=react_user_system_prompt),
        "user_opening": TAUBENCH_USER_OPENING,
        "user_reply_marker": "User Response:",
        # EnvScaler's evaluation sends both roles --temperature (its numbers: 0.7), the project's sampling.
        "sampling": None,
    }
)
