"""The ``acebench``, ``acebench-envscaler`` and ``acebench-text`` episode rules: ACEBench-Agent's loop and its
end-to-end and process accuracy (``docs/episode-rules.md`` gives each field's upstream source)."""

from __future__ import annotations

from harness.rules.profiles import EpisodeRules, RoleSampling, RulesPrompts, Sampling

from .prompts import (
    FINISH,
    agent_system_prompt,
    envscaler_user_system_prompt,
    text_system_prompt,
    user_opening,
    user_system_prompt,
)

# ACEBench's agent category (chenchen0103/ACEBench): model_inference/apimodel_inference.py (the loop, 40 messages,
# "finish conversation"), model_inference/multi_turn/APIModel_user.py, eval_main.py (agent_eval,
# agent_eval_process). docs/episode-rules.md gives each field's upstream source.
ACEBENCH_STOP = FINISH
ACEBENCH_USER_OPENING = "Is there anything you need help with today?"
"""EnvScaler's preset's fixed opening line (``acebench`` and ``acebench-text`` send upstream's, read per language
from the checkout at import)."""
ACEBENCH_ROLE_SAMPLING = RoleSampling(temperature=0.001, top_p=1.0, max_tokens=1000)
ACEBENCH_RULES = EpisodeRules(
    name="acebench",
    first_call_only=False,
    # The imported environment's dispatcher hands the arguments to upstream's methods unchecked, as upstream does.
    pass_arguments_through=False,
    raising_tool_ends_episode=False,
    truncation_scores=True,
    empty_turn_is_parse_error=False,
    parse_error_limit=False,
    reward_decimals=None,
    composite_reward=False,
    tool_result_format="text",
    errors_as_user_messages=False,
    stop_tokens=(ACEBENCH_STOP,),
    reply_tool=None,
    environment_failure="scored_failed",
    prompts=RulesPrompts(agent=agent_system_prompt, user=user_system_prompt, opening=user_opening),
    # APIUSER appends its own replies as "system" messages (model_inference/multi_turn/APIModel_user.py).
    user_own_role="system",
    step_unit="message",
    default_max_steps=40,
    required_source="acebench",
    reward_check="acebench-end-to-end",
    process_check="acebench-process",
    agent_stop_phrases=(ACEBENCH_STOP,),
    # The API models' defaults (APIModel_agent.py and APIModel_user.py of multi_turn, multi_step's agent), which
    # apimodel_inference.py never overrides: no seed, no tool_choice.
    sampling=Sampling(agent=ACEBENCH_ROLE_SAMPLING, user=ACEBENCH_ROLE_SAMPLING),
)
# EnvScaler's evaluation of ACEBench-Agent: native function calling, and the agent ends with "Task Completed". Its
# prompts are EnvScaler's preset's own (the agent's and the user's), its user sees its own lines as "assistant".
ACEBENCH_ENVSCALER_RULES = ACEBENCH_RULES.model_copy(
    update={
        "name": "acebench-envscaler",
        "agent_stop_phrases": ("Task Completed", ACEBENCH_STOP),
        "prompts": RulesPrompts(agent=agent_system_prompt, user=envscaler_user_system_prompt),
        "user_own_role": "assistant",
        "user_opening": ACEBENCH_USER_OPENING,
        # EnvScaler's evaluation: the project's sampling (--temperature for both roles).
        "sampling": None,
    }
)

# ACEBench's own setting: the agent gets upstream's text prompt (tools listed in it) and writes its calls as text
# (harness/benchmarks/acebench/agents.py); the loop, the user's opening and stop, the ending and the scoring are
# ACEBENCH_RULES'.
ACEBENCH_TEXT_RULES = ACEBENCH_RULES.model_copy(
    update={
        "name": "acebench-text",
        # The agent gets upstream's text prompt; the simulated user is upstream's, as under ACEBENCH_RULES.
        "prompts": RulesPrompts(agent=text_system_prompt, user=user_system_prompt, opening=user_opening),
        "agent_kinds": ("acebench-text",),
    }
)
