"""The user of a trainer's conversational rollouts, built from plain settings (a YAML entry's keywords).

A trainer adapter in the engine (the verl agent loop, the TRL ``rollout_func``) takes a function from the
scenario to a user policy; this builds one the way ``harness run --mode conv`` picks its user: the scenario's
scripted turns when it has them, else the simulated user on ``model`` through :mod:`harness.llm`. verl's agent
loop entry names it with hydra's ``_target_``::

    user:
      _target_: agents.training_user.conversation_user
      model: qwen3-8b                 # an alias of models.toml, or a litellm string (hosted_vllm/NAME, ...)
      api_base: http://localhost:8001/v1
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from agents.run_adapters import user_factory
from harness.llm import LLMClient
from harness.rules.protocols import UserPolicy
from harness.schema import AgentSettings, JSONValue, ModelSettings, Scenario

_clients: dict[str | None, LLMClient] = {}
_clients_lock = threading.Lock()


def shared_client(cache_dir: str | None = None) -> LLMClient:
    """One model client per process (and response cache): verl builds the loop, and so the user, per rollout."""
    with _clients_lock:
        if cache_dir not in _clients:
            _clients[cache_dir] = LLMClient(cache_dir=cache_dir)
        return _clients[cache_dir]


def conversation_user(
    model: str,
    *,
    api_base: str | None = None,
    api_key_env: str | None = None,
    temperature: float | None = 0.0,
    max_tokens: int | None = None,
    system_prompt_version: str = "1",
    cache_dir: str | None = None,
) -> Callable[[Scenario], UserPolicy]:
    """A function from the scenario to its user: scripted turns, or the simulated user on ``model`` (at
    ``api_base``, with the key in the variable ``api_key_env`` when the endpoint needs one)."""
    routing = {"api_base": api_base, "api_key_env": api_key_env}
    extra: dict[str, JSONValue] = {key: value for key, value in routing.items() if value}
    settings = AgentSettings(
        kind="simulated_user",
        role="user",
        model=ModelSettings(model=model, temperature=temperature, max_tokens=max_tokens, extra=extra),
        system_prompt_version=system_prompt_version,
    )

    def user_for(scenario: Scenario) -> UserPolicy:
        return user_factory(scenario, shared_client(cache_dir), settings)

    return user_for
