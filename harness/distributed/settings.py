"""What an executor of the fleet is started with: one config object, built on the driver from its model client.

Every setting an executor needs (model aliases as the driver resolved them, retry policy, rpm/tpm/concurrency
limits, the request timeout, the sandbox's size and jail, the forwarded API-key variables, and the job's own
plan) travels in :class:`ExecutorConfig`, so none of them can reach one kind of executor and miss another.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.llm import EndpointLimits, LLMClient, RetryPolicy
from harness.llm.aliases import AliasEntry
from harness.llm.transport import DIRECT_ROUTE_VARIABLE, OPENAI_COMPATIBLE
from harness.sandbox.spec import JailSpec


@dataclass(frozen=True)
class WorkUnit:
    """An opaque piece of work for an executor: ``work`` names the executor method that runs ``payload``.

    ``key`` identifies the unit within one dispatch: its result is taken once, by this key. Units of one ``group``
    go to the executor that already holds one of the group's, while it holds fewer than ``GROUP_ON_ONE_EXECUTOR``
    of them (a run's trials of one task: one check process scores them)."""

    key: str
    work: str
    payload: Any
    group: str | None = None


@dataclass(frozen=True)
class ExecutorConfig:
    """Everything an executor gets once, at start (a library travels separately, by object reference).

    ``environment`` holds the variables the driver forwards (API keys named by the models' aliases); an executor
    sets them in its process and never logs them. ``job`` is the plan of the executor's kind of work."""

    aliases: dict[str, AliasEntry]
    retry: RetryPolicy
    default_limits: EndpointLimits
    timeout: float
    cache_dir: Path | None
    jail: JailSpec
    """What each executor's sandbox pool is made of (the trust rule already applied on the driver)."""
    environment: dict[str, str]
    job: Any

    @property
    def shares_a_limiter(self) -> bool:
        """Whether the rpm/tpm window is the cluster's (held by one limiter actor) rather than per process."""
        return bool(self.default_limits.rpm or self.default_limits.tpm)


def executor_config(
    client: LLMClient,
    models: list[str],
    job: Any,
    *,
    timeout: float | None = None,
    cache_dir: Path | None = None,
    jail: JailSpec | None = None,
) -> ExecutorConfig:
    """The config that makes every executor reach ``models`` as ``client`` does on the driver: its aliases,
    retry policy and limits, ``timeout`` (the client's when not given), and the variables those models need."""
    models = sorted(set(models))
    names = forwarded_variables(client, models)
    return ExecutorConfig(
        aliases=alias_entries_for(client, models),
        retry=client.retry,
        default_limits=client.default_limits,
        timeout=client.timeout if timeout is None else timeout,
        cache_dir=cache_dir,
        jail=jail or JailSpec(),
        environment={name: os.environ[name] for name in names if name in os.environ},
        job=job,
    )


def alias_entries_for(client: LLMClient, models: list[str]) -> dict[str, AliasEntry]:
    """The driver's alias table, with the models fixed to what they resolve to here (environment overrides of
    api_base included), so executors resolve them exactly as the driver did."""
    entries = dict(client.aliases.entries)
    for model in models:
        resolved = client.resolve(model)
        if resolved.alias is not None:
            entries[model] = AliasEntry(
                model=resolved.provider_model,
                api_base=resolved.api_base,
                api_key_env=resolved.api_key_env,
                params=resolved.params,
                max_episodes=resolved.max_episodes,
                input_usd_per_million=prices[0] if (prices := resolved.usd_per_million_tokens) else None,
                output_usd_per_million=prices[1] if prices else None,
            )
    return entries


def forwarded_variables(client: LLMClient, models: list[str]) -> list[str]:
    """Names of the environment variables executors need from the driver: the API keys the models' aliases
    name, the providers' usual key variables, and the model-transport switch."""
    names = {DIRECT_ROUTE_VARIABLE}
    for model in models:
        resolved = client.resolve(model)
        if resolved.api_key_env:
            names.add(resolved.api_key_env)
        provider = resolved.provider
        names.update(OPENAI_COMPATIBLE.get(provider, ((), None))[0])
        if provider:
            names.add(f"{provider.upper()}_API_KEY")
    return sorted(names)
