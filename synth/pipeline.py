"""``harness synth envs``: task set -> themes -> plans -> classes -> assessed, repaired, validated environments.

Every stage's output is persisted under ``OUT/stages/<stage>/<key>.json`` with ``key`` a content hash of its
inputs (the model, prompt versions and settings that shape it included), and model answers are cached under
``OUT/llm_cache``; a run started again over the same OUT spends nothing on finished work. Outputs:
``OUT/environments`` (seed layout), ``OUT/rejected.jsonl``, ``OUT/themes.json``, ``OUT/discovery.jsonl`` and
``OUT/costs.json``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

from harness.library import write_seed_layout
from harness.llm import EndpointLimits, LLMClient
from harness.sandbox import SandboxPool
from harness.sandbox.spec import CodeOrigin, JailSpec
from harness.schema import Environment, Usage
from synth.cluster import EnvironmentCluster
from synth.costs import CostReport, build_cost_report, price_for
from synth.discovery import load_tasks
from synth.environment_build import COST_STAGES, PIPELINE_VERSION, EnvironmentBuild, SynthEnvsConfig
from synth.records import Rejection, TaskOutcome, Theme
from synth.spending import synthesis_spend

__all__ = ["COST_STAGES", "PIPELINE_VERSION", "SynthEnvsConfig", "SynthEnvsResult", "synthesize_environments"]


class SynthEnvsResult(BaseModel):
    accepted: list[Environment]
    rejected: list[Rejection]
    themes: list[Theme]
    discovery: list[TaskOutcome]
    costs: CostReport
    fresh_usage: Usage = Field(description="What this invocation itself spent (zero when everything was on disk).")
    model_seconds: float = 0.0
    wall_seconds: float = 0.0
    not_started: int = Field(default=0, description="Discoveries and builds --cost-limit kept from starting.")


def _remove_stale_environments(out: Path, accepted: set[str]) -> None:
    """Environments a previous run over OUT accepted but this one (other settings) did not."""
    folder = out / "environments"
    for path in [*folder.glob("*.py"), *folder.glob("*.json")] if folder.exists() else []:
        if path.stem not in accepted:
            path.unlink()


def _write_jsonl(path: Path, records: list[BaseModel]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r.model_dump(mode="json")) + b"\n" for r in records))


async def synthesize_environments(
    config: SynthEnvsConfig,
    *,
    client: LLMClient | None = None,
    pool: SandboxPool | None = None,
    cluster: EnvironmentCluster | None = None,
) -> SynthEnvsResult:
    """Run (or resume) environment synthesis; see the module docstring for what lands in ``config.out``.

    With ``cluster``, each theme's environment is built (planned, modeled, assessed, validated) on the cluster's
    executors; this process discovers tasks, merges themes, and is the only writer of ``config.out``."""
    price_for(config.price_model)  # an unknown price model fails before any token is spent
    started = asyncio.get_running_loop().time()
    tasks = await asyncio.to_thread(load_tasks, config.source, config.column, config.max_tasks)  # before any output
    config.out.mkdir(parents=True, exist_ok=True)
    own_client = client is None
    llm = client or LLMClient(
        cache_dir=config.out / "llm_cache" if config.cache_answers else None,
        default_limits=EndpointLimits(concurrency=config.max_requests, rpm=config.rpm, tpm=None),
        timeout=config.timeout,
    )
    own_pool = pool is None and cluster is None
    # The environments are written by this run's model: code of this machine, under its jail.
    sandbox = JailSpec.for_code(CodeOrigin.LOCAL, workers=config.sandbox_workers).pool() if own_pool else pool
    run = EnvironmentBuild(config, llm, sandbox)
    spend = synthesis_spend(config.cost_limit, llm, [config.model])

    async def discover(task: Any) -> Any:
        return await run.discover(task) if spend.allows_start() else None

    async def build(theme: Theme, usage: Usage) -> Any:
        return await run.build(theme, usage) if spend.allows_start() else None

    try:
        if own_pool and sandbox is not None:
            await sandbox.start()
        discovered = [d for d in await asyncio.gather(*(discover(task) for task in tasks)) if d is not None]
        outcomes = [outcome for outcome, _ in discovered]
        usage_by_task = {outcome.task: usage for outcome, usage in discovered}
        themes = (await run.themes(outcomes))[: config.max_envs]
        await run.vectors.aclose()
        theme_usage = [_sum(usage_by_task.get(t, Usage()) for t in theme.tasks) for theme in themes]
        if cluster is not None:
            built = await cluster.build_environments(run, themes, theme_usage, spend.gate())
            spend.not_started += len(themes) - len(built)
        else:
            pairs = zip(themes, theme_usage, strict=True)
            built = [b for b in await asyncio.gather(*(build(t, u) for t, u in pairs)) if b is not None]
    finally:
        await run.vectors.aclose()
        if own_client:
            await llm.aclose()
        if own_pool and sandbox is not None:
            await sandbox.close()
    accepted = [item for item, _ in built if isinstance(item, Environment)]
    rejected = [item for item, _ in built if isinstance(item, Rejection)]
    by_stage = {stage: _sum(c[stage] for _, c in built) for stage in COST_STAGES}
    by_stage["discovery"] = _sum(usage_by_task.values())
    costs = build_cost_report(
        by_stage, {item.id: c for item, c in built if isinstance(item, Environment)}, config.price_model
    )
    _remove_stale_environments(config.out, {e.id for e in accepted})
    write_seed_layout(accepted, [], config.out)
    _write_jsonl(config.out / "rejected.jsonl", list(rejected))
    _write_jsonl(config.out / "discovery.jsonl", list(outcomes))
    (config.out / "themes.json").write_bytes(
        orjson.dumps([t.model_dump(mode="json") for t in themes], option=orjson.OPT_INDENT_2)
    )
    (config.out / "costs.json").write_bytes(orjson.dumps(costs.model_dump(mode="json"), option=orjson.OPT_INDENT_2))
    return SynthEnvsResult(
        accepted=accepted,
        rejected=rejected,
        themes=themes,
        discovery=outcomes,
        costs=costs,
        fresh_usage=run.fresh,
        model_seconds=run.fresh.model_seconds,
        wall_seconds=asyncio.get_running_loop().time() - started,
        not_started=spend.not_started,
    )


def _sum(usages: Any) -> Usage:
    total = Usage()
    for usage in usages:
        total.add(usage)
    return total
