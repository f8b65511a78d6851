"""Scenario synthesis (the skeleton paper's generator): initial states, tasks, checklists and check functions, gated.

For every environment and variation index: the model writes an initial state (it must conform to the
environment's state definition and load in the sandbox), then a task with a conversational user profile and a
checklist, then one check function per checklist item. The scenario is kept only if it passes the gates of
:mod:`synth.gates`; with a teacher model, the teacher must also solve it, and its calls become the reference
actions. Every attempt, kept or rejected, is appended to a journal keyed by a content hash, so a re-run skips
what is done; rejected candidates are kept with the gate and reason that refused them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, Field

from harness.sandbox import SandboxError, SandboxPool
from harness.schema import (
    Check,
    Environment,
    ModelSettings,
    Provenance,
    Scenario,
    Usage,
    UserProfile,
    utc_now,
)
from synth.answers import AnswerError, Asker
from synth.cluster import AttemptCluster, AttemptUnit
from synth.costs import DEFAULT_PRICE_MODEL, dollars
from synth.dedup import DEFAULT_SIMILARITY, find_duplicates, mark_duplicates
from synth.gates import (
    GATES,
    GateOutcome,
    gate_checks_run,
    gate_false_at_reset,
    gate_reference,
    gate_single_call,
    gate_state_conforms,
    gate_state_loads,
    gate_teacher,
)
from synth.graph import state_keys
from synth.records import Answer, Reasoned
from synth.spending import recorded_spend, synthesis_spend
from synth.templates import allowed_modules_text, load_template
from synth.vectors import TextVectors

if TYPE_CHECKING:
    from harness.llm import LLMClient
    from harness.schema import Trajectory

logger = logging.getLogger(__name__)

SCENARIO_TEMPLATES = ("scen_state", "scen_task", "scen_checks")
SKELETON_TAG = "skeleton-synthesis"
"""The tag of a scenario this pipeline made: the skeleton paper's scenario generator."""
PUBLISHED_USD_PER_SCENARIO = 0.06
"""The skeleton paper's published cost of one scenario."""
STATE_TEXT_LIMIT = 24_000
CODE_TEXT_LIMIT = 12_000


# ------------------------------------------------------------------------------------------ model answers


class StateAnswer(Reasoned):
    initial_state: dict[str, Any]


class ProfileAnswer(Answer):
    persona: str = Field(min_length=3)
    goal: str = Field(min_length=3)
    known_info: list[str] = Field(default_factory=list)
    withheld_info: list[str] = Field(default_factory=list)
    instructions: str = ""


class TaskAnswer(Reasoned):
    task: str = Field(min_length=10)
    user_profile: ProfileAnswer
    checklist: list[str] = Field(min_length=1)


class CheckAnswer(Answer):
    item: str = ""
    source: str = Field(min_length=10)


class ChecksAnswer(Reasoned):
    checks: list[CheckAnswer] = Field(min_length=1)


# ------------------------------------------------------------------------------------------------ journal


class AttemptRecord(BaseModel):
    """One attempt at one scenario, as appended to the journal."""

    key: str
    environment_id: str
    index: int
    accepted: bool
    rejected_by: str | None = None
    reason: str | None = None
    gates: list[GateOutcome] = Field(default_factory=list)
    scenario: Scenario | None = Field(default=None, description="The candidate, kept or rejected.")
    usage: Usage = Field(default_factory=Usage)


class Journal:
    """Append-only JSON lines keyed by ``key``; a torn last line (a killed run) is dropped on opening."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        if path.exists():
            data = path.read_bytes()
            end = data.rfind(b"\n") + 1
            if end < len(data):
                logger.warning("%s ends with a partial line; it is dropped and that attempt re-run", path)
                with path.open("r+b") as handle:
                    handle.truncate(end)
                data = data[:end]
            for line in data.splitlines():
                if line.strip():
                    record = orjson.loads(line)
                    self.records[str(record["key"])] = record

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def append(self, record: BaseModel) -> None:
        payload = record.model_dump(mode="json")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as handle:
            handle.write(orjson.dumps(payload) + b"\n")
        self.records[str(payload["key"])] = payload


def content_key(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20]


# ------------------------------------------------------------------------------------------------- report


class GateTally(BaseModel):
    evaluated: int = 0
    passed: int = 0

    @property
    def rate(self) -> float | None:
        return self.passed / self.evaluated if self.evaluated else None


class SynthesisReport(BaseModel):
    attempted: int
    accepted: int
    gates: dict[str, GateTally]
    rejected_by: dict[str, int]
    usage: Usage
    price_model: str
    usd_total: float
    usd_per_accepted: float | None
    billed_usd_total: float
    reference_usd_per_scenario: float = PUBLISHED_USD_PER_SCENARIO
    duplicates: int = Field(default=0, description="Accepted candidates dropped as duplicates of earlier ones.")
    dedup: str = Field(default="", description="How duplicates were found.")
    not_started: int = Field(default=0, description="Attempts --cost-limit kept from starting (a rerun runs them).")


def summarize_attempts(records: Sequence[dict[str, Any]], price_model: str = DEFAULT_PRICE_MODEL) -> SynthesisReport:
    gates = {gate: GateTally() for gate in GATES}
    rejected_by: dict[str, int] = {}
    usage = Usage()
    accepted = 0
    for record in records:
        usage.add(Usage.model_validate(record.get("usage") or {}))
        accepted += bool(record.get("accepted"))
        if record.get("rejected_by"):
            rejected_by[record["rejected_by"]] = rejected_by.get(record["rejected_by"], 0) + 1
        for outcome in record.get("gates") or []:
            tally = gates.setdefault(outcome["gate"], GateTally())
            tally.evaluated += 1
            tally.passed += bool(outcome["passed"])
    total = dollars(usage, price_model)
    return SynthesisReport(
        attempted=len(records),
        accepted=accepted,
        gates={gate: tally for gate, tally in gates.items() if tally.evaluated},
        rejected_by=rejected_by,
        usage=usage,
        price_model=price_model,
        usd_total=round(total, 6),
        usd_per_accepted=round(total / accepted, 6) if accepted else None,
        billed_usd_total=round(usage.cost_usd, 6),
    )


def write_outputs(out: Path, environments: Sequence[Environment], records: Sequence[dict[str, Any]]) -> list[Scenario]:
    """The accepted scenarios in the seed layout (so ``harness validate OUT`` works) and ``rejected.jsonl``."""
    from harness.library import write_seed_layout

    accepted = [Scenario.model_validate(r["scenario"]) for r in records if r.get("accepted") and r.get("scenario")]
    write_seed_layout(list(environments), accepted, out)
    fields = ("key", "environment_id", "index", "rejected_by", "reason", "duplicate_of", "scenario", "gates")
    rejected = [orjson.dumps({k: r.get(k) for k in fields}) for r in records if not r.get("accepted")]
    (out / "rejected.jsonl").write_bytes(b"".join(line + b"\n" for line in rejected))
    return accepted


# ------------------------------------------------------------------------------------------- prompt text


def tools_text(environment: Environment) -> str:
    lines = []
    for tool in environment.tools:
        properties = tool.function.parameters.get("properties") or {}
        required = set(tool.function.parameters.get("required") or [])
        params = ", ".join(f"{n}{'' if n in required else '?'}: {p.get('type', 'any')}" for n, p in properties.items())
        lines.append(f"- {tool.name}({params}): {tool.function.description}")
    return "\n".join(lines)


def state_text(state: dict[str, Any], limit: int = STATE_TEXT_LIMIT) -> str:
    text = json.dumps(state, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + " …(truncated)"


def entities_text(environment: Environment) -> str:
    return "\n".join(f"- {e.name}: {', '.join(e.attributes)}. {e.description}" for e in environment.state_entities)


def rules_text(environment: Environment) -> str:
    return "\n".join(f"- {rule}" for rule in environment.rules) or "(none stated)"


def template_versions(names: Sequence[str]) -> dict[str, str]:
    return {name: load_template(name).version for name in names}


# ---------------------------------------------------------------------------------------------- pipeline


class ScenarioSynthesisConfig(BaseModel):
    model: str
    per_env: int = Field(default=3, ge=1)
    solve_with: str | None = None
    attempts: int = Field(default=3, ge=1)
    probes: int = Field(default=8, ge=0)
    concurrency: int = Field(default=4, ge=1)
    seed: int = 0
    temperature: float | None = None
    price_model: str = DEFAULT_PRICE_MODEL
    retries: int = Field(default=2, ge=0, description="Re-asks per model answer that does not parse.")
    dedup_similarity: float | None = Field(
        default=DEFAULT_SIMILARITY, gt=0, le=1, description="Embedding similarity of duplicate tasks; None: text only."
    )
    embedding_model: str | None = Field(default=None, description="Embedding model (None: offline all-MiniLM-L6-v2).")
    cost_limit: float | None = Field(
        default=None,
        ge=0,
        description="Start no attempt once the spend recorded for the output folder reaches this many USD "
        "(attempts in flight finish; a rerun with a higher limit continues). Every model called needs a price.",
    )


async def generate_initial_state(
    asker: Asker, environment: Environment, index: int, usage: Usage, role: str = "synth_state"
) -> dict[str, Any]:
    messages = load_template("scen_state").render(
        name=environment.name,
        domain=environment.domain,
        summary=environment.summary,
        state_keys=", ".join(state_keys(environment)),
        entities=entities_text(environment),
        rules=rules_text(environment),
        code=environment.code[:CODE_TEXT_LIMIT],
        index=str(index),
    )
    answer = await asker.json(messages, StateAnswer, role, usage)
    return answer.initial_state


async def prepare_state(
    pool: SandboxPool, asker: Asker, environment: Environment, index: int, usage: Usage, gates: list[GateOutcome]
) -> dict[str, Any] | None:
    """A generated initial state that conforms and loads, or None (the failing gate is appended)."""
    state = await generate_initial_state(asker, environment, index, usage)
    conforms = gate_state_conforms(environment, state)
    gates.append(conforms)
    if not conforms.passed:
        return None
    loads = await gate_state_loads(pool, environment, state)
    gates.append(loads)
    return state if loads.passed else None


class ScenarioSynthesizer:
    def __init__(self, client: LLMClient, pool: SandboxPool, config: ScenarioSynthesisConfig):
        self.client = client
        self.pool = pool
        self.config = config
        settings = ModelSettings(model=config.model, temperature=config.temperature)
        self.asker = Asker(client, settings, retries=config.retries)
        self.versions = template_versions(SCENARIO_TEMPLATES)

    def key(self, environment: Environment, index: int) -> str:
        c = self.config
        return content_key(
            "scenario",
            environment.id,
            hashlib.sha256(environment.code.encode()).hexdigest(),
            index,
            c.model,
            c.solve_with,
            c.attempts,
            c.probes,
            c.seed,
            self.versions,
        )

    async def attempt(self, environment: Environment, index: int) -> AttemptRecord:
        key = self.key(environment, index)
        usage = Usage()
        gates: list[GateOutcome] = []
        scenario: Scenario | None = None

        def rejected(reason: str | None = None) -> AttemptRecord:
            failing = next((g for g in gates if not g.passed), None)
            return AttemptRecord(
                key=key,
                environment_id=environment.id,
                index=index,
                accepted=False,
                rejected_by=failing.gate if failing else "model_answer",
                reason=reason or (failing.reason if failing else None),
                gates=gates,
                scenario=scenario,
                usage=usage,
            )

        try:
            state = await prepare_state(self.pool, self.asker, environment, index, usage, gates)
            if state is None:
                return rejected()
            scenario = await self._write_scenario(environment, index, state, usage)
            outcome, reset_results = await gate_checks_run(self.pool, scenario.checks, state)
            gates.append(outcome)
            if not outcome.passed:
                return rejected()
            gates.append(gate_false_at_reset(reset_results))
            if not gates[-1].passed:
                return rejected()
            if self.config.probes:
                gates.append(
                    await gate_single_call(
                        self.pool, environment, scenario, reset_results, probes=self.config.probes, seed=index
                    )
                )
                if not gates[-1].passed:
                    return rejected()
            if self.config.solve_with:
                outcome, actions = await gate_teacher(
                    lambda s, attempt: self._teacher_episode(environment, s, attempt, usage),
                    scenario,
                    self.config.attempts,
                )
                gates.append(outcome)
                if not outcome.passed:
                    return rejected()
                scenario = scenario.model_copy(update={"reference_actions": actions})
                gates.append(await gate_reference(self.pool, scenario, environment))
                if not gates[-1].passed:
                    return rejected()
        except AnswerError as exc:
            return rejected(f"model answer: {exc}")
        except SandboxError as exc:
            return rejected(f"sandbox: {exc}")
        except Exception as exc:
            # One broken candidate must not stop the run; it is kept with the error as its reason.
            logger.exception("scenario %s #%d failed", environment.id, index)
            return rejected(f"unexpected error: {type(exc).__name__}: {exc}")
        scenario.provenance.details.update({"gates": [g.model_dump() for g in gates], "usage": usage.model_dump()})
        return AttemptRecord(
            key=key,
            environment_id=environment.id,
            index=index,
            accepted=True,
            gates=gates,
            scenario=scenario,
            usage=usage,
        )

    async def _write_scenario(
        self, environment: Environment, index: int, state: dict[str, Any], usage: Usage
    ) -> Scenario:
        task_messages = load_template("scen_task").render(
            name=environment.name,
            introduction=environment.introduction,
            rules=rules_text(environment),
            tools=tools_text(environment),
            state=state_text(state),
            index=str(index),
        )
        task = await self.asker.json(task_messages, TaskAnswer, "synth_task", usage)
        checks_messages = load_template("scen_checks").render(
            task=task.task,
            checklist="\n".join(f"{n}. {item}" for n, item in enumerate(task.checklist, start=1)),
            state=state_text(state),
            allowed_modules=allowed_modules_text(),
        )
        answer = await self.asker.json(checks_messages, ChecksAnswer, "synth_checks", usage)
        checks = [
            Check(
                id=f"c{n}",
                description=(item.item or task.checklist[min(n - 1, len(task.checklist) - 1)]),
                source=item.source,
            )
            for n, item in enumerate(answer.checks, start=1)
        ]
        return Scenario(
            id=f"{environment.id}-syn-{index:03d}",
            environment_id=environment.id,
            initial_state=state,
            task=task.task,
            user_profile=UserProfile(**task.user_profile.model_dump()),
            checks=checks,
            tags=["synthesized", SKELETON_TAG],
            provenance=Provenance(
                source="synth.scenarios",
                model=self.config.model,
                prompt_version=",".join(f"{k}@{v}" for k, v in self.versions.items()),
                created_at=utc_now(),
                details={
                    "index": index,
                    "teacher": self.config.solve_with,
                    "analysis": {"task": task.analysis, "checks": answer.analysis},
                },
            ),
        )

    async def _teacher_episode(
        self, environment: Environment, scenario: Scenario, attempt: int, usage: Usage
    ) -> Trajectory:
        from agents.factory import build_agent
        from harness.episode_factory import EpisodeFactory, EpisodeRecipe
        from harness.library import Library

        assert self.config.solve_with is not None
        agent = build_agent(
            "function_calling",
            ModelSettings(model=self.config.solve_with, temperature=self.config.temperature),
            self.client,
            role="teacher",
        )
        factory = EpisodeFactory(EpisodeRecipe(), Library.of([environment], [scenario], source="synthesis"), self.pool)
        trajectory = await factory.play(
            scenario, agent, seed=attempt, trial=attempt, episode_id=f"{scenario.id}-teacher-{attempt}"
        )
        for spent in trajectory.usage.values():
            usage.add(spent)
        return trajectory


async def synthesize_scenarios(
    environments: Sequence[Environment],
    config: ScenarioSynthesisConfig,
    out: Path,
    *,
    client: LLMClient,
    pool: SandboxPool | None = None,
    cluster: AttemptCluster | None = None,
) -> SynthesisReport:
    """Run (or resume) scenario synthesis into ``out``; returns the report over every attempt in the journal.

    Attempts run here in ``pool``, or with ``cluster`` on its executors (this process still plans them and is
    the only writer of ``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    journal = Journal(out / "attempts.jsonl")
    spend = synthesis_spend(
        config.cost_limit, client, [config.model, config.solve_with], recorded_spend(journal.records.values())
    )
    synthesizer = ScenarioSynthesizer(client, pool, config)  # type: ignore[arg-type]  # no pool: plans only
    limit = asyncio.Semaphore(config.concurrency)
    jobs = []
    keys = []
    for environment in environments:
        for index in range(config.per_env):
            key = synthesizer.key(environment, index)
            keys.append(key)
            if key not in journal:
                jobs.append((environment, index, key))

    vectors = TextVectors(config.embedding_model)

    def journaled(record: AttemptRecord) -> None:
        journal.append(record)
        if record.accepted and record.scenario is not None and config.dedup_similarity is not None:
            vectors.add(record.scenario.task)  # embedded while other candidates still wait on the model
        outcome = "accepted" if record.accepted else f"rejected ({record.rejected_by})"
        logger.info("%s #%d: %s", record.environment_id, record.index, outcome)

    async def run(environment: Environment, index: int) -> None:
        async with limit:
            if not spend.allows_start():
                return
            record = await synthesizer.attempt(environment, index)
        journaled(record)

    try:
        if cluster is not None and jobs:
            await cluster.start("scenarios", config, list(environments), client)
            units = [AttemptUnit(e.id, index, key) for e, index, key in jobs]
            spend.not_started += await cluster.execute(units, journaled, spend.gate())
        elif cluster is None:
            if pool is None:
                raise ValueError("synthesize_scenarios needs a sandbox pool or a cluster")
            await asyncio.gather(*(run(environment, index) for environment, index, _ in jobs))
        records = [journal.records[k] for k in keys if k in journal]
        report = await finish_synthesis(
            out, environments, records, config.price_model, config.dedup_similarity, config.embedding_model, vectors
        )
        return report.model_copy(update={"not_started": spend.not_started})
    finally:
        await vectors.aclose()


async def finish_synthesis(
    out: Path,
    environments: Sequence[Environment],
    records: list[dict[str, Any]],
    price_model: str,
    dedup_similarity: float | None,
    embedding_model: str | None,
    vectors: TextVectors | None = None,
) -> SynthesisReport:
    """Drop duplicates, write the outputs and ``report.json``; returns the report. ``vectors`` holds the task
    embeddings started during the run (the others are computed here)."""
    from harness.llm.embeddings import EmbeddingsUnavailable

    how = f"normalized text, and embeddings at similarity >= {dedup_similarity}" if dedup_similarity else "text"
    vectors = vectors or TextVectors(embedding_model)
    try:
        duplicates = await find_duplicates(records, threshold=dedup_similarity, embed=vectors.embed)
    except EmbeddingsUnavailable as exc:
        logger.warning("duplicates are found by normalized text only: %s", exc)
        how = f"normalized text only ({exc})"
        duplicates = await find_duplicates(records, threshold=None)
    records = mark_duplicates(records, duplicates)
    write_outputs(out, environments, records)
    report = summarize_attempts(records, price_model)
    report.duplicates = len(duplicates)
    report.dedup = how
    (out / "report.json").write_bytes(orjson.dumps(report.model_dump(mode="json"), option=orjson.OPT_INDENT_2))
    return report
