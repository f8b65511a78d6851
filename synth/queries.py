"""Chains to scenarios (EnvFactory's QueryGen).

A chain sampled on the tool dependency graph is executed in the sandbox on a generated initial state, with
arguments chosen by the model from the state and the earlier results: that gives the reference actions and the
gold final state. The chain is split into turns of 1 to ``turn_max_tools`` calls; each turn becomes a request
(sub-goals first, then the person's words), refined by the four rules of :mod:`synth.refine`. Checks are
derived from the gold final state (the records the chain touched, and nothing else touched in their
collections, a guard gated on the collection's first change: :mod:`synth.gold_checks`), so the scenario scores
by state; the reference actions, with free-text arguments masked, support trajectory matching.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, Field

from harness.sandbox import SandboxError, SandboxPool
from harness.schema import (
    Environment,
    ModelSettings,
    Provenance,
    ReferenceAction,
    Scenario,
    ToolCall,
    Usage,
    UserProfile,
    utc_now,
)
from synth.answers import AnswerError, Asker
from synth.cluster import AttemptCluster, AttemptUnit
from synth.costs import DEFAULT_PRICE_MODEL
from synth.dedup import DEFAULT_SIMILARITY
from synth.gates import GateOutcome, gate_checks_run, gate_false_at_reset, gate_reference
from synth.gold_checks import checks_from_gold
from synth.graph import ToolGraph, is_identifier_name
from synth.mentions import gate_mentions, required_mentions, scalar_texts
from synth.records import Reasoned
from synth.refine import RULES, RefineContext, RefinementStep, refine_request
from synth.sampling import ChainSampler, ChainSamplingError, SamplingParams, ToolChain
from synth.scenarios import (
    AttemptRecord,
    Journal,
    SynthesisReport,
    content_key,
    finish_synthesis,
    prepare_state,
    rules_text,
    state_text,
    template_versions,
)
from synth.spending import recorded_spend, synthesis_spend
from synth.templates import load_template
from synth.vectors import TextVectors
from synth.verification import minimize_reference, verify_by_rollouts

if TYPE_CHECKING:
    from harness.llm import LLMClient

logger = logging.getLogger(__name__)

QUERY_TEMPLATES = (
    "scen_state",
    "query_args",
    "query_turn",
    *(f"query_refine_{rule}" for rule in RULES),
)
FREE_TEXT_NAMES = frozenset({"reason", "note", "notes", "comment", "comments", "description", "message", "details"})
RESULT_TEXT_LIMIT = 1500
OPTIONAL_BINDING = "optional: leave it out unless the call cannot succeed without it"


class ArgumentsAnswer(Reasoned):
    arguments: dict[str, Any] = Field(default_factory=dict)


class TurnAnswer(Reasoned):
    subgoals: list[str] = Field(default_factory=list)
    request: str = Field(min_length=3)


class ExecutedCall(BaseModel):
    name: str
    arguments: dict[str, Any]
    result: Any = None
    changed_state: bool = False
    user_arguments: list[str] = Field(default_factory=list, description="Arguments the user provides.")
    masked_arguments: list[str] = Field(default_factory=list)


class Turn(BaseModel):
    index: int
    calls: list[int]
    subgoals: list[str] = Field(default_factory=list)
    logical_request: str
    request: str
    analysis: str = Field(default="", description="The query writer's reasoning before its answer.")
    refinements: list[RefinementStep] = Field(default_factory=list)


class ChainRejected(Exception):
    def __init__(self, gate: str, reason: str):
        super().__init__(reason)
        self.gate = gate
        self.reason = reason


class QueryConfig(BaseModel):
    model: str
    chains: int = Field(default=10, ge=1)
    seed: int = 0
    turn_max_tools: int = Field(default=5, ge=1)
    concurrency: int = Field(default=4, ge=1)
    temperature: float | None = None
    price_model: str = DEFAULT_PRICE_MODEL
    retries: int = Field(default=2, ge=0)
    argument_tries: int = Field(default=3, ge=1, description="Argument choices per call before the chain fails.")
    solve_with: str | None = Field(
        default=None, description="Solver model: a scenario is kept only if one of its rollouts reaches the gold state."
    )
    rollouts: int = Field(default=3, ge=1, description="Solver rollouts per scenario (k); the solve rate is recorded.")
    solver_temperature: float | None = Field(default=1.0, description="Sampling temperature of the solver rollouts.")
    dedup_similarity: float | None = Field(
        default=DEFAULT_SIMILARITY, gt=0, le=1, description="Embedding similarity of duplicate tasks; None: text only."
    )
    embedding_model: str | None = Field(default=None, description="Embedding model (None: offline all-MiniLM-L6-v2).")
    sampling: SamplingParams = Field(default_factory=lambda: SamplingParams(max_tools=6, max_environments=1))
    cost_limit: float | None = Field(
        default=None,
        ge=0,
        description="Start no attempt once the spend recorded for the output folder reaches this many USD "
        "(attempts in flight finish; a rerun with a higher limit continues). Every model called needs a price.",
    )


# ---------------------------------------------------------------------------------------------- execution


def is_free_text(name: str, value: Any) -> bool:
    return isinstance(value, str) and (name in FREE_TEXT_NAMES or (" " in value.strip() and len(value) > 40))


def _result_text(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= RESULT_TEXT_LIMIT else text[:RESULT_TEXT_LIMIT] + " …"


async def execute_chain(
    pool: SandboxPool,
    asker: Asker,
    environment: Environment,
    graph: ToolGraph,
    chain: ToolChain,
    state: dict[str, Any],
    usage: Usage,
    tries: int = 3,
) -> tuple[list[ExecutedCall], dict[str, Any]]:
    """Run the chain from ``state`` with model-chosen arguments; every call must succeed (each gets ``tries``
    choices, the later ones told why the earlier failed)."""
    session = await pool.open_session(environment, state)
    executed: list[ExecutedCall] = []
    try:
        for index, step in enumerate(chain.steps):
            name = graph.tool(step.tool).name
            spec = environment.tool(name)
            if spec is None:
                raise ChainRejected("chain_execution", f"{name} is not a tool of {environment.id}")
            bindings = {
                b.name: (OPTIONAL_BINDING if b.source == "skipped" else "given by the user")
                if b.producer is None
                else f"from call {b.producer + 1} ({graph.tool(chain.steps[b.producer].tool).name})"
                for b in step.inputs
            }
            previous = "\n".join(
                f"{n}. {c.name}({json.dumps(c.arguments)}) -> {_result_text(c.result)}"
                for n, c in enumerate(executed, start=1)
            )
            feedback = ""
            for _try in range(tries):
                current = await session.state()
                messages = load_template("query_args").render(
                    environment=environment.name,
                    rules=rules_text(environment),
                    tool=json.dumps(spec.model_dump(mode="json")["function"]),
                    bindings=json.dumps(bindings),
                    previous=previous or "(none)",
                    state=state_text(current),
                    feedback=feedback,
                )
                answer = await asker.json(messages, ArgumentsAnswer, "query_args", usage)
                arguments = dict(answer.arguments)
                observation, diff = await session.call(ToolCall(id=f"chain_{index}", name=name, arguments=arguments))
                if observation.ok:
                    user_given = [
                        k
                        for k in arguments
                        if (
                            k in graph.tool(step.tool).inputs
                            and graph.parameter(step.tool, "input", k).source == "user"
                        )
                    ]
                    executed.append(
                        ExecutedCall(
                            name=name,
                            arguments=arguments,
                            result=observation.content,
                            changed_state=bool(diff),
                            user_arguments=user_given,
                            masked_arguments=[k for k, v in arguments.items() if is_free_text(k, v)],
                        )
                    )
                    break
                feedback = f"\nThe previous choice {json.dumps(arguments)} failed: {observation.error}. Choose again."
            else:
                raise ChainRejected("chain_execution", f"call {index + 1} ({name}) failed: {feedback.strip()}")
        final = await session.state()
    finally:
        await session.close()
    if not any(c.changed_state for c in executed):
        raise ChainRejected("chain_execution", "the chain changes nothing: a scenario must be scored by state")
    return executed, final


def split_turns(count: int, max_per_turn: int, rng: random.Random) -> list[list[int]]:
    """Consecutive groups of 1..max_per_turn call indices covering 0..count-1."""
    turns: list[list[int]] = []
    start = 0
    while start < count:
        size = rng.randint(1, min(max_per_turn, count - start))
        turns.append(list(range(start, start + size)))
        start += size
    return turns


def refine_contexts(
    executed: list[ExecutedCall], turns: list[list[int]], tool_names: list[str], initial_state: dict[str, Any]
) -> list[RefineContext]:
    """Per turn: the values the request must keep (first said in this turn; see :mod:`synth.mentions`), the
    values earlier turns established, and the identifiers the agent can look up."""
    required = required_mentions(executed, initial_state)
    contexts: list[RefineContext] = []
    said: list[str] = []
    for number, indices in enumerate(turns):
        calls = [executed[i] for i in indices]
        must_keep = [v for i in indices for v in required[i] if v not in said]
        must_keep = [v for n, v in enumerate(must_keep) if v not in must_keep[:n]]
        lookup: list[str] = []
        for call in calls:
            for name, value in call.arguments.items():
                if name in call.masked_arguments or name in call.user_arguments or not is_identifier_name(name):
                    continue
                for text in scalar_texts(value):
                    if text not in lookup and text not in must_keep and len(text) >= 3:
                        lookup.append(text)
        referable = [v for v in said if v not in must_keep and len(v) >= 3]
        for call in calls:
            for text in scalar_texts(call.arguments):
                if text not in said:
                    said.append(text)
        contexts.append(
            RefineContext(
                turn=number,
                tool_names=tool_names,
                must_keep=must_keep,
                referable=referable,
                lookup_values=lookup,
                calls=[c.model_dump() for c in calls],
            )
        )
    return contexts


# ---------------------------------------------------------------------------------------------- pipeline


class QuerySynthesizer:
    def __init__(self, client: LLMClient, pool: SandboxPool, graph: ToolGraph, config: QueryConfig):
        self.client = client
        self.pool = pool
        self.graph = graph
        self.config = config
        self.asker = Asker(client, ModelSettings(model=config.model, temperature=config.temperature), config.retries)
        self.versions = template_versions(QUERY_TEMPLATES)
        self.sampler = ChainSampler(graph, config.sampling)
        self.graph_hash = hashlib.sha256(orjson.dumps(graph.model_dump(mode="json"))).hexdigest()

    def key(self, seed: int, environments: dict[str, Environment]) -> str:
        codes = {e: hashlib.sha256(env.code.encode()).hexdigest() for e, env in sorted(environments.items())}
        settings = self.config.model_dump(mode="json", exclude={"dedup_similarity", "embedding_model"})
        return content_key("query", seed, codes, self.graph_hash, settings, self.versions)

    async def attempt(self, seed: int, environments: dict[str, Environment], key: str) -> AttemptRecord:
        usage = Usage()
        gates: list[GateOutcome] = []
        scenario: Scenario | None = None
        environment_id = ""

        def rejected(gate: str | None = None, reason: str | None = None) -> AttemptRecord:
            failing = next((g for g in gates if not g.passed), None)
            return AttemptRecord(
                key=key,
                environment_id=environment_id,
                index=seed,
                accepted=False,
                rejected_by=gate or (failing.gate if failing else "model_answer"),
                reason=reason or (failing.reason if failing else None),
                gates=gates,
                scenario=scenario,
                usage=usage,
            )

        try:
            chain = self.sampler.sample(seed)
        except ChainSamplingError as exc:
            return rejected("chain_sampling", str(exc))
        environment_id = chain.environments[0]
        if len(chain.environments) > 1:
            return rejected("chain_sampling", "a scenario runs in one environment; the chain spans several")
        environment = environments[environment_id]
        try:
            state = await prepare_state(self.pool, self.asker, environment, seed, usage, gates)
            if state is None:
                return rejected()
            executed, gold = await execute_chain(
                self.pool, self.asker, environment, self.graph, chain, state, usage, self.config.argument_tries
            )
            gates.append(GateOutcome(gate="chain_execution", passed=True, details={"calls": len(executed)}))
            turns = await self._turns(environment, executed, state, random.Random(seed), usage)
            masked = {str(c.arguments[k]) for c in executed for k in c.masked_arguments}
            scenario = self._scenario(environment, seed, chain, state, gold, executed, turns, masked)
            gates.append(gate_mentions(scenario.task, [v for vs in required_mentions(executed, state) for v in vs]))
            if not gates[-1].passed:
                return rejected()
            outcome, reset_results = await gate_checks_run(self.pool, scenario.checks, state)
            gates.append(outcome)
            if not outcome.passed:
                return rejected()
            gates.append(gate_false_at_reset(reset_results))
            if not gates[-1].passed:
                return rejected()
            scenario = await minimize_reference(self.pool, environment, scenario, executed, [t.calls for t in turns])
            gates.append(await gate_reference(self.pool, scenario, environment))
            if not gates[-1].passed:
                return rejected()
            if self.config.solve_with:
                outcome, scenario = await verify_by_rollouts(
                    self.pool, self.client, environment, scenario, self._solver(), self.config.rollouts, usage
                )
                gates.append(outcome)
                if not outcome.passed:
                    return rejected()
        except ChainRejected as exc:
            gates.append(GateOutcome(gate=exc.gate, passed=False, reason=exc.reason))
            return rejected()
        except AnswerError as exc:
            return rejected(reason=f"model answer: {exc}")
        except SandboxError as exc:
            return rejected(reason=f"sandbox: {exc}")
        except Exception as exc:
            # One broken chain must not stop the run; it is kept with the error as its reason.
            logger.exception("chain %d failed", seed)
            return rejected(reason=f"unexpected error: {type(exc).__name__}: {exc}")
        scenario.provenance.details["gates"] = [g.model_dump() for g in gates]
        return AttemptRecord(
            key=key,
            environment_id=environment_id,
            index=seed,
            accepted=True,
            gates=gates,
            scenario=scenario,
            usage=usage,
        )

    def _solver(self) -> ModelSettings:
        assert self.config.solve_with is not None
        return ModelSettings(model=self.config.solve_with, temperature=self.config.solver_temperature)

    async def _turns(
        self,
        environment: Environment,
        executed: list[ExecutedCall],
        initial_state: dict[str, Any],
        rng: random.Random,
        usage: Usage,
    ) -> list[Turn]:
        groups = split_turns(len(executed), self.config.turn_max_tools, rng)
        contexts = refine_contexts(executed, groups, environment.tool_names, initial_state)
        turns: list[Turn] = []
        previous: list[str] = []
        for number, (indices, context) in enumerate(zip(groups, contexts, strict=True)):
            steps = "\n".join(
                f"- {executed[i].name}({json.dumps(executed[i].arguments)}) -> {_result_text(executed[i].result)}"
                for i in indices
            )
            messages = load_template("query_turn").render(
                environment=environment.name,
                previous="\n".join(f"{n}. {r}" for n, r in enumerate(previous, start=1)) or "(this is the first turn)",
                steps=steps,
                user_values=json.dumps(context.must_keep),
            )
            answer = await self.asker.json(messages, TurnAnswer, "query_turn", usage)
            context.previous_requests = list(previous)
            lost = [v for v in context.must_keep if v.lower() not in answer.request.lower()]
            if lost:
                # The request must let the agent find what only the user knows.
                answer.request = answer.request.rstrip() + " (" + ", ".join(lost) + ")"
            refined, steps_done = await refine_request(self.asker, answer.request, context, usage)
            turns.append(
                Turn(
                    index=number,
                    calls=indices,
                    subgoals=answer.subgoals,
                    logical_request=answer.request,
                    request=refined,
                    analysis=answer.analysis,
                    refinements=steps_done,
                )
            )
            previous.append(refined)
        return turns

    def _scenario(
        self,
        environment: Environment,
        seed: int,
        chain: ToolChain,
        state: dict[str, Any],
        gold: dict[str, Any],
        executed: list[ExecutedCall],
        turns: list[Turn],
        masked: set[str],
    ) -> Scenario:
        requests = [t.request for t in turns]
        must_keep = [value for values in required_mentions(executed, state) for value in values]
        profile = UserProfile(
            persona=f"A person who uses {environment.name}.",
            goal=" ".join(requests),
            known_info=sorted(set(must_keep)),
            instructions=(
                "Make your requests one at a time, in this order, moving to the next only when the agent has "
                "handled the current one:\n" + "\n".join(f"{n}. {r}" for n, r in enumerate(requests, start=1))
            ),
        )
        return Scenario(
            id=f"{environment.id}-chain-{seed:05d}",
            environment_id=environment.id,
            initial_state=state,
            task="\n".join(requests),
            user_profile=profile,
            checks=checks_from_gold(state, gold, masked),
            reference_actions=[
                ReferenceAction(name=c.name, arguments=c.arguments, masked_arguments=c.masked_arguments)
                for c in executed
            ],
            gold_final_state=gold,
            tags=["synthesized", "envfactory", f"turns:{len(turns)}", f"calls:{len(executed)}"],
            provenance=Provenance(
                source="synth.queries",
                model=self.config.model,
                prompt_version=",".join(f"{k}@{v}" for k, v in self.versions.items()),
                created_at=utc_now(),
                details={
                    "chain": chain.model_dump(mode="json"),
                    "turns": [t.model_dump(mode="json") for t in turns],
                },
            ),
        )


async def synthesize_queries(
    environments: Sequence[Environment],
    graph: ToolGraph,
    config: QueryConfig,
    out: Path,
    *,
    client: LLMClient,
    pool: SandboxPool | None = None,
    cluster: AttemptCluster | None = None,
) -> SynthesisReport:
    """Sample ``config.chains`` chains (seeds ``seed``, ``seed + 1``, …) and turn each into a scenario; resumable.

    Chains run here in ``pool``, or with ``cluster`` on its executors (this process still plans them and is the
    only writer of ``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    by_id = {e.id: e for e in environments}
    sampling = config.sampling
    known = [e for e in (sampling.environments or graph.environment_ids) if e in by_id]
    config = config.model_copy(update={"sampling": sampling.model_copy(update={"environments": known})})
    synthesizer = QuerySynthesizer(client, pool, graph, config)  # type: ignore[arg-type]  # no pool: plans only
    journal = Journal(out / "attempts.jsonl")
    spend = synthesis_spend(
        config.cost_limit, client, [config.model, config.solve_with], recorded_spend(journal.records.values())
    )
    limit = asyncio.Semaphore(config.concurrency)
    keys = {seed: synthesizer.key(seed, by_id) for seed in range(config.seed, config.seed + config.chains)}
    pending = [seed for seed, key in keys.items() if key not in journal]

    vectors = TextVectors(config.embedding_model)

    def journaled(record: AttemptRecord) -> None:
        journal.append(record)
        if record.accepted and record.scenario is not None and config.dedup_similarity is not None:
            vectors.add(record.scenario.task)  # embedded while other chains still wait on the model

    async def run(seed: int) -> None:
        async with limit:
            if not spend.allows_start():
                return
            record = await synthesizer.attempt(seed, by_id, keys[seed])
        journaled(record)

    try:
        if cluster is not None and pending:
            await cluster.start("queries", config, list(environments), client, graph=graph)
            units = [AttemptUnit("", seed, keys[seed]) for seed in pending]
            spend.not_started += await cluster.execute(units, journaled, spend.gate())
        elif cluster is None:
            if pool is None:
                raise ValueError("synthesize_queries needs a sandbox pool or a cluster")
            await asyncio.gather(*(run(seed) for seed in pending))
        records = [journal.records[k] for k in keys.values() if k in journal]
        report = await finish_synthesis(
            out, environments, records, config.price_model, config.dedup_similarity, config.embedding_model, vectors
        )
        return report.model_copy(update={"not_started": spend.not_started})
    finally:
        await vectors.aclose()
