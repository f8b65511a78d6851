"""Scenario synthesis figures: acceptance rate per gate, cost per accepted scenario and the share of wall time
spent outside model calls on the seed library with scripted models answering after a simulated latency (both
pipelines; queries verified by solver rollouts), and tool-graph build time and memory for 1,000 tools.

    python bench/synth_scenarios.py [--per-env N] [--chains N] [--rollouts K] [--latency-ms 100] [--concurrency 16]
                                    [--tools 1000] [--skip-graph]

Costs are token counts priced at the gpt-4.1 list price (the scripted models report 1,200 prompt and 400
completion tokens per answer), so the figure is comparable with EnvScaler's $0.06 per scenario only in method.
"Inside model calls" is the union of the intervals during which at least one scripted answer was being produced
(its latency included); everything else (litellm, sandbox, checks, rollouts' episode loop, persistence,
embedding for dedup) counts as outside.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.library import load_library
from harness.llm import LLMClient
from harness.llm.embeddings import embed
from harness.sandbox import JailSpec
from harness.schema import Environment, ToolSpec
from synth.graph import build_graph
from synth.queries import QueryConfig, synthesize_queries
from synth.sampling import SamplingParams
from synth.scenarios import ScenarioSynthesisConfig, SynthesisReport, synthesize_scenarios
from tests.doubles.scripted_scenarios import (
    STEP_LINE,
    ScriptedQueryModel,
    ScriptedScenarioWriter,
    ScriptedTeacher,
    scripted,
    tool_call_reply,
)


class ConcurrentQueryModel(ScriptedQueryModel):
    """The scripted query model, remembering for every request it writes or refines the calls of its turn, so
    that solvers of many chains in flight at once can each find their own."""

    def __init__(self, environment_ids: list[str]):
        super().__init__(environment_ids)
        self.steps_of: dict[str, list[tuple[str, dict[str, Any]]]] = {}

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        answer = super().__call__(request)
        system = request["messages"][0]["content"]
        user = request["messages"][1]["content"]
        if system.startswith("You turn steps"):
            steps = [(m.group(1), json.loads(m.group(2))) for m in STEP_LINE.finditer(user)]
            self.steps_of[json.loads(answer["content"])["request"]] = steps
        elif "refinement rule" in system:
            before = user.split("Request: ", 1)[1].split("\n\nContext: ", 1)[0]
            # The pipeline may have appended the values a request lost: the written request is a prefix.
            known = max((k for k in self.steps_of if before.startswith(k.rstrip(".").rstrip())), key=len, default=None)
            if known is not None:
                self.steps_of[json.loads(answer["content"])["request"]] = self.steps_of[known]
        return answer


class ConcurrentSolver:
    """Makes the calls behind each line of the request it is given (one line per turn)."""

    def __init__(self, query_model: ConcurrentQueryModel):
        self.query_model = query_model

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        task = next(m["content"] for m in request["messages"] if m["role"] == "user")
        steps = [step for line in task.split("\n") for step in self.query_model.steps_of.get(line, [])]
        done = sum(1 for m in request["messages"] if m["role"] == "assistant" and m.get("tool_calls"))
        if done < len(steps):
            return tool_call_reply(*steps[done], done)
        return {"role": "assistant", "content": "Done.", "usage": {"prompt_tokens": 9, "completion_tokens": 5}}


class Latency:
    """A scripted handler that answers after ``seconds`` (awaited, as a remote endpoint would) and records when
    each answer was being produced."""

    def __init__(self, handler: Any, seconds: float, intervals: list[tuple[float, float]]):
        self.handler = handler
        self.seconds = seconds
        self.intervals = intervals

    async def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            if self.seconds:
                await asyncio.sleep(self.seconds)
            answer: dict[str, Any] = self.handler(request)
            return answer
        finally:
            self.intervals.append((started, time.perf_counter()))


def covered(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def print_report(
    title: str, report: SynthesisReport, seconds: float, intervals: list[tuple[float, float]] | None = None
) -> None:
    print(f"\n== {title}: {report.accepted}/{report.attempted} accepted in {seconds:.1f}s")
    if intervals:
        outside = 1 - covered(intervals) / seconds
        print(f"   {len(intervals)} model answers; share of wall time outside model calls: {outside:.1%}")
    for gate, tally in report.gates.items():
        rate = f"{tally.rate:.0%}" if tally.rate is not None else "n/a"
        print(f"   gate {gate:16s} {tally.passed:4d}/{tally.evaluated:<4d} {rate}")
    print(f"   rejected by: {dict(sorted(report.rejected_by.items()))}; duplicates dropped: {report.duplicates}")
    per = f"${report.usd_per_accepted:.4f}" if report.usd_per_accepted is not None else "n/a"
    print(
        f"   {report.usage.requests} model calls, {report.usage.prompt_tokens:,} + {report.usage.completion_tokens:,}"
        f" tokens: ${report.usd_total:.4f} total, {per} per accepted scenario at {report.price_model} prices"
        f" (EnvScaler: ${report.reference_usd_per_scenario:.2f})"
    )


async def scenarios_run(per_env: int, chains: int, rollouts: int, latency: float, concurrency: int) -> None:
    library = load_library()
    environments = list(library.environments.values())
    ids = [e.id for e in environments]
    await embed(["warm up the embedding model (dedup) before the clock starts"])
    async with JailSpec().pool() as pool:
        with tempfile.TemporaryDirectory() as folder:
            intervals: list[tuple[float, float]] = []
            client = LLMClient(cache_dir=None)
            config = ScenarioSynthesisConfig(
                model=scripted(Latency(ScriptedScenarioWriter(ids), latency, intervals)),
                solve_with=scripted(Latency(ScriptedTeacher(), latency, intervals)),
                per_env=per_env,
                attempts=2,
                concurrency=concurrency,
            )
            started = time.perf_counter()
            report = await synthesize_scenarios(environments, config, Path(folder) / "scen", client=client, pool=pool)
            print_report(
                "harness synth scenarios (seed library, scripted writer and teacher)",
                report,
                time.perf_counter() - started,
                intervals,
            )
            await client.aclose()

            samples = {s.environment_id: s.initial_state for s in library.scenarios}
            graph = await build_graph(environments, sample_states=samples)
            intervals = []
            client = LLMClient(cache_dir=None)
            writer = ConcurrentQueryModel(ids)
            query_config = QueryConfig(
                model=scripted(Latency(writer, latency, intervals)),
                solve_with=scripted(Latency(ConcurrentSolver(writer), latency, intervals)),
                rollouts=rollouts,
                chains=chains,
                concurrency=concurrency,
                sampling=SamplingParams(max_tools=6, max_environments=1),
            )
            started = time.perf_counter()
            report = await synthesize_queries(
                environments, graph, query_config, Path(folder) / "q", client=client, pool=pool
            )
            print_report(
                f"harness synth queries (seed library graph, scripted model, {rollouts} solver rollouts each)",
                report,
                time.perf_counter() - started,
                intervals,
            )
            await client.aclose()


def _tagged_tool(tool: ToolSpec, copy: int) -> ToolSpec:
    """The tool with its parameter descriptions made distinct per copy, so every copy's texts are embedded."""
    data = tool.model_dump()
    for prop in (data["function"]["parameters"].get("properties") or {}).values():
        prop["description"] = f"{prop.get('description', '')} (branch {copy})"
    return ToolSpec.model_validate(data)


def replicated(environments: list[Environment], tools: int) -> list[Environment]:
    """Copies of the seed environments (renamed) until they hold ``tools`` tools."""
    copies: list[Environment] = []
    count = 0
    round_number = 0
    while count < tools:
        for environment in environments:
            if count >= tools:
                break
            keep = [_tagged_tool(t, round_number) for t in environment.tools[: tools - count]]
            entities = [
                e.model_copy(update={"description": f"Branch {round_number}: {e.description}"})
                for e in environment.state_entities
            ]
            copies.append(
                environment.model_copy(
                    update={"id": f"{environment.id}_{round_number}", "tools": keep, "state_entities": entities}
                )
            )
            count += len(keep)
        round_number += 1
    return copies


async def graph_run(tools: int) -> None:
    library = load_library()
    samples = {s.environment_id: s.initial_state for s in library.scenarios}
    environments = replicated(list(library.environments.values()), tools)
    copy_samples = {e.id: samples[e.id.rsplit("_", 1)[0]] for e in environments}
    await embed(["warm up"])  # load the model outside the measurement

    texts: list[str] = []

    async def recording_embed(batch: list[str]) -> list[list[float]]:
        texts.extend(batch)
        return [[1.0, 0.0]] * len(batch)

    await build_graph(environments, embed=recording_embed, sample_states=copy_samples, threshold=1.1)
    started = time.perf_counter()
    vectors = dict(zip(texts, await embed(texts), strict=True))
    embedding_seconds = time.perf_counter() - started

    async def cached_embed(batch: list[str]) -> list[list[float]]:
        return [vectors[t] for t in batch]

    tracemalloc.start()
    started = time.perf_counter()
    graph = await build_graph(environments, embed=cached_embed, sample_states=copy_samples)
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    details = graph.details
    print(f"\n== tool graph: {details['tools']} tools in {len(environments)} environments")
    print(
        f"   {details['parameters']} parameter nodes, {details['edges']} edges {details['edges_by_rule']}\n"
        f"   embedding {len(texts)} distinct texts with all-MiniLM-L6-v2 on CPU: {embedding_seconds:.2f}s\n"
        f"   graph build with those vectors (source reading, nodes, similarity, edges, classes): {seconds:.2f}s;"
        f" Python heap peak {peak / 2**20:.1f} MiB; process max RSS {rss:.0f} MiB (includes the embedding model)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-env", type=int, default=11)
    parser.add_argument("--chains", type=int, default=24)
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=100.0, help="simulated model latency per answer")
    parser.add_argument("--concurrency", type=int, default=16, help="candidates in flight at once (both pipelines)")
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--skip-graph", action="store_true")
    args = parser.parse_args()
    asyncio.run(scenarios_run(args.per_env, args.chains, args.rollouts, args.latency_ms / 1000, args.concurrency))
    if not args.skip_graph:
        asyncio.run(graph_run(args.tools))


if __name__ == "__main__":
    main()
