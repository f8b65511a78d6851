"""Run in the released τ²-bench's venv: the system prompts upstream's own classes make for each domain named on the
command line (the agent's, and the user's of every task), as JSON on stdout."""

from __future__ import annotations

import json
import sys

from tau2.agent.llm_agent import LLMAgent
from tau2.registry import registry
from tau2.run import load_tasks
from tau2.user.user_simulator import UserSimulator


def main() -> None:
    out = {}
    for domain in sys.argv[1:]:
        environment = registry.get_env_constructor(domain)()
        agent = LLMAgent(tools=environment.get_tools(), domain_policy=environment.get_policy(), llm="none")
        try:  # as tau2/run.py does: a domain without user tools gives its user none
            user_tools = environment.get_user_tools()
        except Exception:
            user_tools = None
        users = {
            str(task.id): UserSimulator(
                tools=user_tools, instructions=str(task.user_scenario), llm="none"
            ).system_prompt
            for task in load_tasks(domain)
        }
        out[domain] = {"agent": agent.system_prompt, "users": users}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
