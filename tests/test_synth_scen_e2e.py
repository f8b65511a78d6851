"""Scenario synthesis and chains-to-scenarios end to end, with scripted models behind litellm.

The scripted scenario writer answers from the seed library (its states, tasks and checks); the scripted
teacher replays the seed reference actions; the scripted query model picks arguments from the state and earlier
results and writes and refines requests by rule. The synthesized scenarios must pass ``harness validate`` and be
solved by the oracle.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from agents.oracle import OracleAgent
from harness.cli_synth_scenarios import register
from harness.episode import EpisodeConfig, run_episode
from harness.library import load_library
from harness.llm import LLMClient, register_python_model
from harness.sandbox import SandboxPool
from harness.validate import validate_library
from synth.graph import ToolGraph, build_graph
from synth.queries import QueryConfig, synthesize_queries
from synth.sampling import SamplingParams
from synth.scenarios import ScenarioSynthesisConfig, state_text, synthesize_scenarios

LIBRARY = load_library()
_names = itertools.count()


def _reply(payload: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": json.dumps(payload),
        "usage": {"prompt_tokens": 1200, "completion_tokens": 400},
    }


def _tool_call(name: str, arguments: dict[str, Any], number: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"t{number}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        ],
        "usage": {"prompt_tokens": 900, "completion_tokens": 40},
    }


class ScriptedScenarioWriter:
    """Writes states, tasks and checks taken from the seed library: variation N gets the state and the task of
    the environment's N-th seed scenario (the N-th among those whose state the prompt shows)."""

    def __init__(self, environment_ids: list[str]):
        self.by_name = {LIBRARY.environments[e].name: e for e in environment_ids}
        self.scenarios = {e: LIBRARY.scenarios_for(e) for e in environment_ids}

    def _environment(self, text: str) -> str:
        for name, environment_id in self.by_name.items():
            if f"Environment: {name}" in text:
                return environment_id
        raise AssertionError("unknown environment in the prompt")

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        system = request["messages"][0]["content"]
        user = request["messages"][1]["content"]
        if system.startswith("You write initial states"):
            environment_id = self._environment(user)
            variation = int(re.search(r"Variation (\d+)", user).group(1))  # type: ignore[union-attr]
            scenarios = self.scenarios[environment_id]
            return _reply({"initial_state": scenarios[variation % len(scenarios)].initial_state})
        if system.startswith("You write tasks"):
            environment_id = self._environment(user)
            fitting = [s for s in self.scenarios[environment_id] if state_text(s.initial_state) in user]
            variation = int(re.search(r"task variation (\d+)", user).group(1))  # type: ignore[union-attr]
            scenario = fitting[variation % len(fitting)]
            return _reply(
                {
                    "task": scenario.task,
                    "user_profile": scenario.user_profile.model_dump() if scenario.user_profile else {},
                    "checklist": [c.description for c in scenario.checks],
                }
            )
        if system.startswith("You write check functions"):
            scenario = next(s for items in self.scenarios.values() for s in items if f"Task: {s.task}\n" in user)
            return _reply({"checks": [{"item": c.description, "source": c.source} for c in scenario.checks]})
        raise AssertionError(f"unexpected prompt: {system[:80]}")


class ScriptedTeacher:
    """Replays the seed reference actions of the scenario whose task it is given."""

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        scenario = next(s for s in LIBRARY.scenarios if s.task == task)
        done = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
        if done < len(scenario.reference_actions):
            action = scenario.reference_actions[done]
            return _tool_call(action.name, action.arguments, done)
        return {"role": "assistant", "content": "All done.", "usage": {"prompt_tokens": 900, "completion_tokens": 5}}


_PREVIOUS_CALL = re.compile(r"^(\d+)\. ([a-z_0-9]+)\((\{.*?\})\) -> (.*)$", re.MULTILINE)
_STEP = re.compile(r"^- ([a-z_0-9]+)\((\{.*?\})\) -> ", re.MULTILINE)
_OPEN_STATUSES = ("pending", "processing", "active", "open", "confirmed", "booked", "scheduled", "available", "new")


def _line_after(prefix: str, text: str) -> str:
    return next(line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix))


def _records(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for c in state.values() if isinstance(c, dict) for r in c.values() if isinstance(r, dict)]


class ScriptedQueryModel:
    """Picks arguments the way a careful person would with no insight into the rules (reuse what earlier calls
    used or returned, prefer open records of the same person, try another record after a refusal), and writes
    and refines requests by rule."""

    def __init__(self, environment_ids: list[str]):
        self.by_name = {LIBRARY.environments[e].name: e for e in environment_ids}
        self.chain_steps: list[tuple[str, dict[str, Any]]] = []  # the calls of the chain being written up

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        system = request["messages"][0]["content"]
        user = request["messages"][1]["content"]
        if system.startswith("You write initial states"):
            environment_id = next(e for n, e in self.by_name.items() if f"Environment: {n}" in user)
            return _reply({"initial_state": LIBRARY.scenarios_for(environment_id)[0].initial_state})
        if system.startswith("You choose the arguments"):
            return _reply({"arguments": self._arguments(user)})
        if system.startswith("You turn steps"):
            if "(this is the first turn)" in user:
                self.chain_steps = []
            self.chain_steps += [(m.group(1), json.loads(m.group(2))) for m in _STEP.finditer(user)]
            values = json.loads(user.split("user_values: ", 1)[1].strip())
            steps = re.findall(r"^- ([a-z_0-9]+)\(", user, re.MULTILINE)
            wording = ", then ".join(s.replace("_", " ") for s in steps)
            request_text = f"Please {wording}" + (f" for {', '.join(values)}" if values else "") + "."
            return _reply({"subgoals": [s.replace("_", " ") for s in steps], "request": request_text})
        if "refinement rule" in system:
            return _reply({"request": self._refine(system, user)})
        raise AssertionError(f"unexpected prompt: {system[:80]}")

    def _refine(self, system: str, user: str) -> str:
        text = user.split("Request: ", 1)[1].split("\n\nContext: ", 1)[0]
        context = json.loads(user.split("\n\nContext: ", 1)[1])
        keep = context["must_keep"]
        if "implicit reference" in system:
            for value in context["refer_to_implicitly"]:
                text = re.sub(re.escape(value), "the one from before", text, flags=re.IGNORECASE)
            return text
        if "action compression" in system:
            wanted = [step["name"].replace("_", " ") for step in context["steps"] if step["changes_state"]]
            goal = " and ".join(wanted) or "look into this"
            return f"Please {goal}" + (f" for {', '.join(keep)}" if keep else "") + "."
        if "ambiguity injection" in system:
            for value in context["may_be_vague"]:
                if value not in keep:
                    text = re.sub(re.escape(value), "the relevant one", text, flags=re.IGNORECASE)
            return text
        return "I'm sorting out my account this week, so here is what I need. " + text

    def _arguments(self, user: str) -> dict[str, Any]:
        tool = json.loads(_line_after("Tool: ", user))
        bindings = json.loads(_line_after("Input bindings: ", user))
        state = json.loads(user.split("Current state:\n", 1)[1].split("\nThe previous choice", 1)[0])
        previous = {int(m.group(1)): (json.loads(m.group(3)), m.group(4)) for m in _PREVIOUS_CALL.finditer(user)}
        refused = re.findall(r"The previous choice (\{.*?\}) failed", user)
        attempt = len(refused)
        used: dict[str, Any] = {}
        for arguments, _ in previous.values():
            used.update(arguments)
        properties = tool["parameters"].get("properties", {})
        required = set(tool["parameters"].get("required", []))
        chosen: dict[str, Any] = {}
        for name, prop in properties.items():
            binding = bindings.get(name, "given by the user")
            if (binding.startswith("optional") and not attempt) or (name not in required and name not in bindings):
                continue
            bound = re.match(r"from call (\d+)", binding)
            candidates: list[Any] = []
            if bound:
                arguments, result = previous[int(bound.group(1))]
                candidates += re.findall(rf'"{re.escape(name)}": "([^"]+)"', result)
            if name in used:
                candidates.insert(0, used[name])
            owner_ids = {v for k, v in used.items() if k.endswith("_id")}
            field = (
                name
                if any(name in r for r in _records(state))
                else next((f for r in _records(state) for f in r if f.endswith("_id") and name.endswith("_" + f)), name)
            )
            records = [r for r in _records(state) if field in r]
            records.sort(
                key=lambda r: (not (owner_ids & set(map(str, r.values()))), str(r.get("status")) not in _OPEN_STATUSES)
            )
            candidates += [r[field] for r in records]
            candidates = [c for i, c in enumerate(candidates) if c not in candidates[:i]]
            if name == "items" and isinstance(state.get("products"), dict):
                stocked = [p for p in state["products"].values() if p.get("stock", 0) > 0]
                product = stocked[attempt % len(stocked)]
                line = {"product_id": product["product_id"], "quantity": 1}
                chosen[name] = {product["product_id"]: 1} if prop.get("type") == "object" else [line]
            elif not candidates and name not in required:
                continue
            elif candidates:
                chosen[name] = candidates[min(attempt, len(candidates) - 1)]
            elif "enum" in prop:
                chosen[name] = prop["enum"][attempt % len(prop["enum"])]
            elif prop.get("type") == "integer":
                chosen[name] = 1
            elif prop.get("type") == "number":
                chosen[name] = 10.0
            elif prop.get("type") == "boolean":
                chosen[name] = True
            elif prop.get("type") == "array":
                chosen[name] = []
            elif "date" in name:
                chosen[name] = state.get("current_date", "2025-06-20")
            else:
                chosen[name] = "no longer needed" if name == "reason" else f"12 New Street, Springfield ({name})"
        return chosen


class ScriptedSolver:
    """A solver that makes the calls of the chain the query model last wrote up (chains run one at a time), or,
    when ``gives_up``, answers without calling any tool."""

    def __init__(self, query_model: ScriptedQueryModel, gives_up: bool = False):
        self.query_model = query_model
        self.gives_up = gives_up
        self.seeds: set[Any] = set()

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.seeds.add(request.get("seed"))
        done = sum(1 for m in request["messages"] if m["role"] == "assistant" and m.get("tool_calls"))
        steps = [] if self.gives_up else self.query_model.chain_steps
        if done < len(steps):
            return _tool_call(*steps[done], done)
        return {
            "role": "assistant",
            "content": "I could not do that.",
            "usage": {"prompt_tokens": 9, "completion_tokens": 5},
        }


def scripted(handler: Any) -> str:
    name = f"scen-{next(_names)}"
    register_python_model(name, handler)
    return f"python/{name}"


@pytest.fixture
async def pool():
    async with SandboxPool(workers=2) as sandbox:
        yield sandbox


ENVIRONMENTS = ["retail_orders", "banking"]


async def _oracle_solves(scenarios, pool: SandboxPool, library) -> None:
    for scenario in scenarios:
        environment = library.environments[scenario.environment_id]
        trajectory = await run_episode(
            scenario,
            environment,
            pool=pool,
            agent=OracleAgent(scenario),
            config=EpisodeConfig(mode="nonconv"),
            episode_id=f"oracle-{scenario.id}",
        )
        assert trajectory.reward is not None and trajectory.reward.success, (scenario.id, trajectory.termination_detail)


async def test_scenarios_end_to_end_pass_validation_and_the_oracle_solves_them(
    pool: SandboxPool, tmp_path: Path
) -> None:
    environments = [LIBRARY.environments[e] for e in ENVIRONMENTS]
    writer, teacher = scripted(ScriptedScenarioWriter(ENVIRONMENTS)), scripted(ScriptedTeacher())
    config = ScenarioSynthesisConfig(model=writer, per_env=5, solve_with=teacher, attempts=2, concurrency=1)
    out = tmp_path / "out"
    client = LLMClient(cache_dir=None)
    try:
        report = await synthesize_scenarios(environments, config, out, client=client, pool=pool)
    finally:
        await client.aclose()
    assert report.attempted == 10
    assert 0 < report.accepted < report.attempted  # the one-call tasks of the seed library are refused
    assert report.rejected_by.get("single_call", 0) >= 1
    assert report.gates["state_loads"].passed == 10
    assert report.gates["teacher"].passed == report.accepted
    assert report.usd_per_accepted is not None and report.usd_per_accepted > 0

    built = load_library(out)
    assert len(built.scenarios) == report.accepted
    for scenario in built.scenarios:
        assert scenario.reference_actions and scenario.user_profile is not None
        assert scenario.provenance.prompt_version and "scen_task@2+" in scenario.provenance.prompt_version
    validation = await validate_library(built, pool)
    assert validation.ok, [r.problems for r in validation.invalid]
    await _oracle_solves(built.scenarios, pool, built)
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    assert len(rejected) == report.attempted - report.accepted
    assert all(r["rejected_by"] and r["reason"] for r in rejected)

    # A second run over the same folder resumes: nothing is asked again.
    client = LLMClient(cache_dir=None)
    try:
        again = await synthesize_scenarios(environments, config, out, client=client, pool=pool)
    finally:
        await client.aclose()
    assert again.accepted == report.accepted
    assert sum(u.requests for u in client.usage_by_role().values()) == 0


@pytest.fixture(scope="module")
def retail_graph() -> ToolGraph:
    import asyncio

    environments = [LIBRARY.environments["retail_orders"]]
    samples = {"retail_orders": LIBRARY.scenarios_for("retail_orders")[0].initial_state}
    return asyncio.run(build_graph(environments, sample_states=samples))


async def test_queries_end_to_end_pass_validation_and_the_oracle_solves_them(
    pool: SandboxPool, tmp_path: Path, retail_graph: ToolGraph
) -> None:
    model = scripted(ScriptedQueryModel(["retail_orders"]))
    config = QueryConfig(
        model=model, chains=8, seed=3, concurrency=2, sampling=SamplingParams(max_tools=5, max_environments=1)
    )
    out = tmp_path / "queries"
    client = LLMClient(cache_dir=None)
    try:
        report = await synthesize_queries(
            [LIBRARY.environments["retail_orders"]], retail_graph, config, out, client=client, pool=pool
        )
    finally:
        await client.aclose()
    assert report.attempted == 8 and report.accepted >= 2, report.rejected_by
    built = load_library(out)
    validation = await validate_library(built, pool)
    assert validation.ok, [r.problems for r in validation.invalid]
    await _oracle_solves(built.scenarios, pool, built)
    for scenario in built.scenarios:
        assert scenario.gold_final_state is not None and scenario.reference_actions
        turns = scenario.provenance.details["turns"]
        assert scenario.task == "\n".join(t["request"] for t in turns)
        rules = [step["rule"] for t in turns for step in t["refinements"]]
        assert rules == ["implicit_reference", "action_compression", "ambiguity_injection", "goal_expansion"] * len(
            turns
        )
        assert any(step["applied"] for t in turns for step in t["refinements"])
        for name in LIBRARY.environments["retail_orders"].tool_names:
            assert name not in scenario.task or "_" not in name


async def _queries_with_solver(
    pool: SandboxPool, graph: ToolGraph, out: Path, gives_up: bool
) -> tuple[Any, ScriptedQueryModel]:
    writer = ScriptedQueryModel(["retail_orders"])
    solving = ScriptedSolver(writer, gives_up=gives_up)
    solver = scripted(solving)
    config = QueryConfig(
        model=scripted(writer),
        chains=6,
        seed=3,
        concurrency=1,
        solve_with=solver,
        rollouts=2,
        sampling=SamplingParams(max_tools=5, max_environments=1),
    )
    client = LLMClient(cache_dir=None)
    try:
        report = await synthesize_queries(
            [LIBRARY.environments["retail_orders"]], graph, config, out, client=client, pool=pool
        )
    finally:
        await client.aclose()
    assert solving.seeds == {0, 1}  # each rollout samples with its own seed
    return report, writer


async def test_queries_are_kept_only_when_a_solver_rollout_reaches_the_gold_state(
    pool: SandboxPool, tmp_path: Path, retail_graph: ToolGraph
) -> None:
    report, _ = await _queries_with_solver(pool, retail_graph, tmp_path / "solved", gives_up=False)
    assert report.accepted >= 2 and report.gates["rollouts"].passed == report.accepted
    built = load_library(tmp_path / "solved")
    for scenario in built.scenarios:
        rollouts = scenario.provenance.details["rollouts"]
        assert rollouts["solve_rate"] == 1.0 and rollouts["rollouts"] == 2
        assert scenario.difficulty == "easy" and "solve_rate:1.00" in scenario.tags
        gates = {g["gate"]: g["passed"] for g in scenario.provenance.details["gates"]}
        assert gates["mentions"] and gates["rollouts"] and gates["reference"]
        dropped = scenario.provenance.details.get("dropped_calls", [])
        chain_calls = len(scenario.provenance.details["chain"]["steps"])
        assert len(scenario.reference_actions) + len(dropped) == chain_calls
    validation = await validate_library(built, pool)
    assert validation.ok, [r.problems for r in validation.invalid]


async def test_a_query_whose_rollouts_all_fail_is_rejected(
    pool: SandboxPool, tmp_path: Path, retail_graph: ToolGraph
) -> None:
    report, _ = await _queries_with_solver(pool, retail_graph, tmp_path / "unsolved", gives_up=True)
    assert report.accepted == 0 and report.rejected_by.get("rollouts", 0) >= 2
    rejected = [json.loads(line) for line in (tmp_path / "unsolved" / "rejected.jsonl").read_text().splitlines()]
    by_rollouts = [r for r in rejected if r["rejected_by"] == "rollouts"]
    assert all(r["reason"].startswith("none of 2 rollouts") for r in by_rollouts)


def test_cli_commands_are_registered_and_build_a_graph(tmp_path: Path) -> None:
    app = typer.Typer()
    synth_app = typer.Typer()
    register(synth_app)
    app.add_typer(synth_app, name="synth")
    runner = CliRunner()
    result = runner.invoke(app, ["synth", "--help"])
    assert result.exit_code == 0
    for command in ("scenarios", "graph", "queries"):
        assert command in result.output
    out = tmp_path / "graph.json"
    picture = tmp_path / "graph.png"
    result = runner.invoke(
        app,
        [
            "synth",
            "graph",
            "--out",
            str(out),
            "--env",
            "retail_orders",
            "--picture",
            str(picture),
            "--threshold",
            "0.85",
        ],
    )
    assert result.exit_code == 0, result.output
    graph = ToolGraph.load(out)
    assert graph.has_edge("retail_orders.find_user_by_email", "retail_orders.list_user_orders")
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_cli_runs_scenarios_and_queries_with_scripted_models(tmp_path: Path) -> None:
    app = typer.Typer()
    synth_app = typer.Typer()
    register(synth_app)
    app.add_typer(synth_app, name="synth")
    runner = CliRunner()
    writer, teacher = scripted(ScriptedScenarioWriter(["retail_orders"])), scripted(ScriptedTeacher())
    out = tmp_path / "scen"
    arguments = ["synth", "scenarios", "--env", "retail_orders", "--per-env", "3", "--model", writer]
    arguments += ["--out", str(out), "--solve-with", teacher, "--attempts", "1", "--concurrency", "1", "--workers", "1"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert "acceptance" in result.output and "per accepted scenario" in result.output
    report = json.loads((out / "report.json").read_text())
    assert report["attempted"] == 3 and report["accepted"] == len(load_library(out).scenarios) >= 1, result.output

    graph = tmp_path / "graph.json"
    result = runner.invoke(app, ["synth", "graph", "--env", "retail_orders", "--out", str(graph)])
    assert result.exit_code == 0, result.output
    queries = tmp_path / "queries"
    model = scripted(ScriptedQueryModel(["retail_orders"]))
    arguments = ["synth", "queries", "--env", "retail_orders", "--graph", str(graph), "--model", model]
    arguments += ["--out", str(queries), "--chains", "4", "--seed", "3", "--workers", "1"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    report = json.loads((queries / "report.json").read_text())
    assert report["attempted"] == 4
    assert (queries / "rejected.jsonl").exists()
