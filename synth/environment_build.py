"""One theme's environment, built stage by stage (plan, model, assess and repair, validate), each stage's output
kept in a stage store under a content key: what ``harness synth envs`` runs here and its cluster executors run
elsewhere."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.llm import LLMClient, LLMError
from harness.sandbox import EnvironmentLoadError, SandboxError, SandboxPool
from harness.schema import Environment, ModelSettings, Provenance, StateEntity, Usage
from harness.toolspec import derive_tools
from harness.validate import validate_environment
from synth.answers import AnswerError, Asker
from synth.assessment import AssessmentInconclusive, assess_environment
from synth.costs import DEFAULT_PRICE_MODEL
from synth.discovery import judge_task, merge_into_themes
from synth.modeling import (
    CheckedMethod,
    ModelingError,
    assemble,
    generate_initial_state,
    load_check,
    write_methods,
)
from synth.planning import plan_environment
from synth.records import AssessmentReport, EnvironmentPlan, ModelingResult, Rejection, TaskOutcome, Theme
from synth.stages import StageStore, content_key
from synth.templates import load_template, prompt_versions
from synth.vectors import TextVectors

logger = logging.getLogger(__name__)

PIPELINE_VERSION = "envs-1"
COST_STAGES = ("discovery", "planning", "modeling", "assessment", "repair")


class SynthEnvsConfig(BaseModel):
    """Every flag of ``harness synth envs`` has its keyword here."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="JSON Lines file of tasks, or a Hub dataset id / dataset folder.")
    model: str
    out: Path
    column: str | None = None
    rounds: int = Field(default=100, ge=1)
    threshold: float = Field(default=0.85, ge=0.0, le=1.0)
    tests_per_tool: int = Field(default=10, ge=1, description="Cap on assessment rounds per tool.")
    similarity: float = Field(default=0.9, gt=0.0, le=1.0)
    max_envs: int | None = Field(default=None, ge=1, description="At most this many themes are built.")
    max_tasks: int | None = Field(default=None, ge=1)
    concurrency: int = Field(default=8, ge=1, description="Environments built in flight.")
    max_requests: int = Field(default=8, ge=1, description="Model requests in flight per endpoint.")
    rpm: int | None = Field(default=None, ge=1)
    repairs: int = Field(default=3, ge=0)
    method_attempts: int = Field(default=3, ge=1)
    answer_retries: int = Field(default=2, ge=0)
    temperature: float | None = 0.0
    max_tokens: int | None = None
    embedding_model: str | None = None
    price_model: str = DEFAULT_PRICE_MODEL
    sandbox_workers: int | None = None
    cache_answers: bool = True
    timeout: float = Field(default=120.0, gt=0, description="Seconds one model request may take.")
    cost_limit: float | None = Field(
        default=None,
        ge=0,
        description="Start no task discovery or environment build once this invocation has spent this many USD "
        "(answers cached by an earlier invocation cost nothing when replayed). The model needs a price.",
    )


def environment_id(plan: EnvironmentPlan, theme: Theme) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", plan.name.lower()).strip("_")[:40] or "environment"
    return f"{slug}_{theme.id.removeprefix('theme-')[:6]}"


def _usage_dump(usage: Usage) -> dict[str, Any]:
    return usage.model_dump(mode="json")


class EnvironmentBuild:
    """The shared state of one synthesis run (settings, model asker, sandbox pool, stage store) and the
    building of each theme's environment through it."""

    def __init__(
        self, config: SynthEnvsConfig, client: LLMClient, pool: SandboxPool | None, store: StageStore | None = None
    ):
        self.config = config
        self.client = client
        self._pool = pool
        self.store = store or StageStore(config.out)
        self.asker = Asker(
            client,
            ModelSettings(model=config.model, temperature=config.temperature, max_tokens=config.max_tokens),
            retries=config.answer_retries,
        )
        self.limit = asyncio.Semaphore(config.concurrency)
        self.fresh = Usage()
        self.versions = prompt_versions()
        self.vectors = TextVectors(config.embedding_model)

    @property
    def pool(self) -> SandboxPool:
        if self._pool is None:
            raise RuntimeError("this run plans only: its environments are built elsewhere")
        return self._pool

    def _versions(self, *names: str) -> dict[str, str]:
        return {name: load_template(name).version for name in names}

    async def _stage(
        self, stage: str, key: str, compute: Callable[[Usage], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """The stage's persisted output, computing (and persisting) it only when it is not on disk."""
        stored = self.store.load(stage, key)
        if stored is not None:
            return stored
        usage = Usage()
        data = await compute(usage)
        data["usage"] = _usage_dump(usage)
        self.store.save(stage, key, data)
        self.fresh.add(usage)
        return data

    # ------------------------------------------------------------------------------------- discovery

    async def discover(self, task: str) -> tuple[TaskOutcome, Usage]:
        key = content_key(
            "discovery",
            task,
            self.config.model,
            self.config.temperature,
            self._versions("filter_task", "infer_environment"),
            self.config.answer_retries,
        )

        async def compute(usage: Usage) -> dict[str, Any]:
            async with self.limit:
                outcome = await judge_task(self.asker, task, usage)
            if outcome.keep and outcome.description:
                self.vectors.add(outcome.description)  # embedded while other tasks still wait on the model
            return {"outcome": outcome.model_dump(mode="json")}

        try:
            data = await self._stage("discovery", key, compute)
        except LLMError as exc:
            logger.warning("discovery of a task failed for want of the model: %s", exc)
            return TaskOutcome(task=task, keep=False, reason="model unavailable", error=str(exc)), Usage()
        return TaskOutcome.model_validate(data["outcome"]), Usage.model_validate(data["usage"])

    async def themes(self, outcomes: list[TaskOutcome]) -> list[Theme]:
        kept = [(o.task, o.description) for o in outcomes if o.keep]
        key = content_key("themes", kept, self.config.similarity, self.config.embedding_model)

        async def compute(_usage: Usage) -> dict[str, Any]:
            themes = await merge_into_themes(
                outcomes, self.config.similarity, self.config.embedding_model, self.vectors.embed
            )
            return {"themes": [t.model_dump(mode="json") for t in themes]}

        data = await self._stage("themes", key, compute)
        return [Theme.model_validate(t) for t in data["themes"]]

    # ----------------------------------------------------------------------------- one environment

    def plan_key(self, theme: Theme) -> str:
        return content_key(
            "planning",
            theme.model_dump(mode="json"),
            self.config.model,
            self.config.temperature,
            self._versions("plan_environment"),
            self.config.answer_retries,
        )

    def model_key(self, plan_key: str) -> str:
        return content_key(
            "modeling",
            plan_key,
            self.config.model,
            self.config.temperature,
            self._versions("write_method", "initial_state"),
            self.config.method_attempts,
        )

    def assess_key(self, plan_key: str, modeled: ModelingResult) -> str:
        return content_key(
            "assessment",
            plan_key,
            modeled.code,
            modeled.initial_state,
            self.config.model,
            self.config.temperature,
            self.config.rounds,
            self.config.threshold,
            self.config.tests_per_tool,
            self.config.repairs,
            self.config.method_attempts,
            self._versions("test_call", "check_call", "write_method"),
        )

    def stored_stages(self, theme: Theme) -> dict[tuple[str, str], dict[str, Any]]:
        """The stage outputs of ``theme`` already on disk (planning, then modeling, then assessment): what a
        build elsewhere needs to skip finished work."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        plan_key = self.plan_key(theme)
        planned = self.store.load("planning", plan_key)
        if planned is None:
            return found
        found["planning", plan_key] = planned
        if planned.get("plan") is None:
            return found
        model_key = self.model_key(plan_key)
        modeled = self.store.load("modeling", model_key)
        if modeled is None:
            return found
        found["modeling", model_key] = modeled
        result = ModelingResult.model_validate({k: v for k, v in modeled.items() if k != "usage"})
        if result.ok:
            assess_key = self.assess_key(plan_key, result)
            assessed = self.store.load("assessment", assess_key)
            if assessed is not None:
                found["assessment", assess_key] = assessed
        return found

    async def plan(self, theme: Theme) -> dict[str, Any]:
        key = self.plan_key(theme)

        async def compute(usage: Usage) -> dict[str, Any]:
            try:
                plan = await plan_environment(self.asker, theme, usage)
            except AnswerError as exc:
                return {"plan": None, "reason": str(exc)}
            return {"plan": plan.model_dump(mode="json")}

        data = await self._stage("planning", key, compute)
        data["key"] = key
        return data

    async def model(self, plan: EnvironmentPlan, plan_key: str, env_id: str) -> tuple[ModelingResult, Usage]:
        key = self.model_key(plan_key)

        async def compute(usage: Usage) -> dict[str, Any]:
            result = await self._model(plan, env_id, usage)
            return result.model_dump(mode="json", exclude={"usage"})

        data = await self._stage("modeling", key, compute)
        return ModelingResult.model_validate({k: v for k, v in data.items() if k != "usage"}), Usage.model_validate(
            data["usage"]
        )

    async def _model(self, plan: EnvironmentPlan, env_id: str, usage: Usage) -> ModelingResult:
        try:
            methods = await write_methods(self.asker, plan, plan.operations, usage, self.config.method_attempts)
            code = assemble(plan, methods)
            state = await generate_initial_state(self.asker, plan, usage, self.config.method_attempts)
            await load_check(self.pool, self._environment(plan, code, env_id), state)
        except ModelingError as exc:
            return ModelingResult(ok=False, reason=str(exc), attempts=exc.attempts)
        except AnswerError as exc:
            return ModelingResult(ok=False, reason=str(exc))
        return ModelingResult(
            ok=True,
            code=code,
            methods={name: m.source for name, m in methods.items()},
            initial_state=state,
            imports={name: m.imports for name, m in methods.items()},
        )

    def _environment(
        self, plan: EnvironmentPlan, code: str, env_id: str, provenance: Provenance | None = None
    ) -> Environment:
        return Environment(
            id=env_id,
            name=plan.name,
            domain=plan.domain,
            summary=plan.summary,
            introduction=plan.introduction,
            rules=plan.rules,
            state_entities=[
                StateEntity(name=e.name, attributes=[a.name for a in e.attributes], description=e.description)
                for e in plan.entities
            ],
            tools=derive_tools(code, plan.class_name),
            class_name=plan.class_name,
            code=code,
            provenance=provenance or Provenance(source="synth.envs"),
        )

    async def assess(
        self, plan: EnvironmentPlan, theme: Theme, modeled: ModelingResult, plan_key: str
    ) -> dict[str, Any]:
        key = self.assess_key(plan_key, modeled)

        async def compute(usage: Usage) -> dict[str, Any]:
            repair_usage = Usage()
            data = await self._assess_and_repair(plan, theme, modeled, usage, repair_usage)
            data["repair_usage"] = _usage_dump(repair_usage)
            self.fresh.add(repair_usage)
            return data

        return await self._stage("assessment", key, compute)

    async def _assess_and_repair(
        self, plan: EnvironmentPlan, theme: Theme, modeled: ModelingResult, usage: Usage, repair_usage: Usage
    ) -> dict[str, Any]:
        assert modeled.code is not None and modeled.initial_state is not None
        state = modeled.initial_state
        methods = {
            name: CheckedMethod(source=source, imports=modeled.imports.get(name, []))
            for name, source in modeled.methods.items()
        }
        code = modeled.code
        reports: list[AssessmentReport] = []
        outcome: dict[str, Any] = {"accepted": False}
        for attempt in range(self.config.repairs + 1):
            environment = self._environment(plan, code, environment_id(plan, theme))
            try:
                report = await assess_environment(
                    self.asker,
                    self.pool,
                    environment,
                    {n: m.source for n, m in methods.items()},
                    state,
                    rounds=self.config.rounds,
                    threshold=self.config.threshold,
                    attempt=attempt,
                    usage=usage,
                    tests_per_tool=self.config.tests_per_tool,
                )
            except AssessmentInconclusive as exc:
                outcome.update(stage="assessment", reason=f"assessment could not run: {exc}")
                break
            reports.append(report)
            if report.passed:
                outcome = {"accepted": True}
                break
            failing = {name: reasons for name, reasons in report.failing_methods().items() if name in methods}
            below = "; ".join(report.problems)
            if attempt == self.config.repairs or not failing:
                if attempt == 0:
                    heading = "below threshold" if report.score < self.config.threshold else "incomplete"
                    reason = f"assessment {heading}: {below}"
                else:
                    reason = f"repair exhausted: {below} after {attempt} repair round(s)"
                if not failing:
                    reason += " (no failing method to repair)"
                outcome.update(stage="assessment", reason=reason)
                break
            try:
                repaired = await write_methods(
                    self.asker,
                    plan,
                    [op for op in plan.operations if op.name in failing],
                    repair_usage,
                    self.config.method_attempts,
                    feedback=_repair_feedback(methods, failing, attempt + 1, self.config.repairs),
                )
                methods.update(repaired)
                code = assemble(plan, methods)
                await load_check(self.pool, self._environment(plan, code, environment_id(plan, theme)), state)
            except ModelingError as exc:
                outcome.update(stage="repair", reason=f"repair {attempt + 1} failed: {exc}")
                break
        outcome.update(
            code=code,
            methods={n: m.source for n, m in methods.items()},
            reports=[r.model_dump(mode="json") for r in reports],
            created_at=datetime.now(UTC).isoformat(),
        )
        return outcome

    async def build(self, theme: Theme, discovery_usage: Usage) -> tuple[Environment | Rejection, dict[str, Usage]]:
        """The environment for one theme or its rejection, and what each stage spent on it."""
        costs: dict[str, Usage] = {stage: Usage() for stage in COST_STAGES}
        costs["discovery"] = discovery_usage
        async with self.limit:
            try:
                return await self._build(theme, costs), costs
            except (LLMError, SandboxError, EnvironmentLoadError) as exc:
                logger.warning("building theme %s failed on infrastructure: %s", theme.id, exc)
                return Rejection(
                    theme_id=theme.id, stage="infrastructure", reason=f"{type(exc).__name__}: {exc}"
                ), costs

    async def _build(self, theme: Theme, costs: dict[str, Usage]) -> Environment | Rejection:
        planned = await self.plan(theme)
        costs["planning"] = Usage.model_validate(planned["usage"])
        if planned.get("plan") is None:
            return Rejection(theme_id=theme.id, stage="planning", reason=planned.get("reason", "no plan"))
        plan = EnvironmentPlan.model_validate(planned["plan"])
        modeled, modeling_usage = await self.model(plan, planned["key"], environment_id(plan, theme))
        costs["modeling"] = modeling_usage
        if not modeled.ok:
            return Rejection(
                theme_id=theme.id,
                name=plan.name,
                stage="modeling",
                reason=modeled.reason or "modeling failed",
                details={"attempts": [a.model_dump(mode="json") for a in modeled.attempts]},
            )
        assessed = await self.assess(plan, theme, modeled, planned["key"])
        costs["assessment"] = Usage.model_validate(assessed["usage"])
        costs["repair"] = Usage.model_validate(assessed.get("repair_usage") or {})
        reports = assessed.get("reports", [])
        if not assessed["accepted"]:
            return Rejection(
                theme_id=theme.id,
                name=plan.name,
                stage=assessed["stage"],
                reason=assessed["reason"],
                details={"assessment": [AssessmentReport.model_validate(r).summary() for r in reports]},
            )
        provenance = Provenance(
            source="synth.envs",
            model=self.config.model,
            prompt_version=PIPELINE_VERSION,
            created_at=datetime.fromisoformat(assessed["created_at"]),
            upstream_id=theme.id,
            details={
                "pipeline": PIPELINE_VERSION,
                "prompt_versions": self.versions,
                "theme": theme.model_dump(mode="json"),
                "plan": plan.model_dump(mode="json"),
                "assessment": {
                    "rounds": self.config.rounds,
                    "threshold": self.config.threshold,
                    "tests_per_tool": self.config.tests_per_tool,
                    "repairs_used": max(0, len(reports) - 1),
                    "reports": reports,
                },
                "costs": {stage: _usage_dump(u) for stage, u in costs.items()},
                "sample_initial_state": modeled.initial_state,
            },
        )
        environment = self._environment(plan, assessed["code"], environment_id(plan, theme), provenance)
        validation = await validate_environment(self.pool, environment, modeled.initial_state or {})
        if not validation.ok:
            return Rejection(
                theme_id=theme.id, name=plan.name, stage="validation", reason="; ".join(validation.problems)
            )
        return environment


def _repair_feedback(
    methods: dict[str, CheckedMethod], failing: dict[str, list[str]], repair: int, repairs: int
) -> dict[str, str]:
    feedback = {}
    for name, reasons in failing.items():
        shown = "\n".join(f"- {r}" for r in reasons[:8])
        feedback[name] = (
            f"\nRepair round {repair} of {repairs}. "
            "The current version of this method failed the assessment:\n```python\n"
            + methods[name].source
            + "\n```\nThe checking agent's reasons:\n"
            + shown
            + "\nWrite a corrected version that follows the rules."
        )
    return feedback
