"""``harness synth scenarios|queries --ray``: attempts on the test cluster's executors give the local outputs,
the driver alone writes the output folder, a re-run over it does nothing twice, and a cluster that cannot be
reached is one line before any work.

The scripted models of ``tests.doubles.scripted_scenarios`` answer behind the mock OpenAI-compatible server, so the
executors' own model clients reach them over HTTP exactly as the driver's does."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.distributed.cluster import NAMESPACE
from harness.library import load_library
from tests.doubles.mock_openai import MockOpenAIServer, PolicyRequest
from tests.doubles.scripted_scenarios import ScriptedQueryModel, ScriptedScenarioWriter, ScriptedTeacher
from tests.doubles.scripted_synth import ScriptedSynthModel
from tests.support.ray_cluster import cli

ENVIRONMENT = "retail_orders"


class Scripted:
    """A scripted synthesis model (a callable on the request body) as a policy of the mock server."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        reply = dict(self.handler({"messages": request.messages}))
        reply.pop("usage", None)  # the server counts tokens itself
        return reply


def serve_models(tmp_path: Path, mock: MockOpenAIServer, models: dict[str, Any]) -> dict[str, str]:
    """Each scripted model as the alias ``mock-NAME``; the environment that points the CLI at them."""
    lines = []
    for name, handler in models.items():
        mock.set_policy(name, Scripted(handler))
        lines.append(f'[aliases.mock-{name}]\nmodel = "hosted_vllm/{name}"\napi_base = "{mock.base_url}"\n')
    path = tmp_path / "models.toml"
    path.write_text("\n".join(lines))
    return {"HARNESS_MODELS_FILE": str(path)}


def counts(usage: dict[str, Any]) -> dict[str, Any]:
    """A usage record's counts (requests and tokens), without its timings."""
    return {k: v for k, v in usage.items() if "tokens" in k or "requests" in k}


def scrubbed(record: dict[str, Any]) -> dict[str, Any]:
    """A record (or the scenario or environment inside it) without its creation time, and with its usage and
    costs as counts only."""
    inner = record.get("scenario") or record
    provenance = inner.get("provenance")
    if isinstance(provenance, dict):
        provenance.pop("created_at", None)
        details = provenance.get("details") or {}
        if details.get("usage"):
            details["usage"] = counts(details["usage"])
        if details.get("costs"):
            details["costs"] = {stage: counts(usage) for stage, usage in details["costs"].items()}
    if isinstance(record.get("usage"), dict):
        record["usage"] = counts(record["usage"])
    return record


def jsonl(path: Path, key: str) -> list[dict[str, Any]]:
    return sorted((scrubbed(orjson.loads(line)) for line in path.read_bytes().splitlines()), key=lambda r: r[key])


def synthesis_output(out: Path) -> dict[str, Any]:
    """What a synthesis command wrote to ``out``, without creation times and model latencies, in a stable order:
    the one comparison of a cluster's output with a local run's, for ``scenarios``, ``queries`` and ``envs``."""
    if (out / "attempts.jsonl").exists():
        scenarios = sorted(
            (scrubbed(s.model_dump(mode="json")) for s in load_library(out).scenarios), key=lambda s: s["id"]
        )
        return {
            "attempts": jsonl(out / "attempts.jsonl", "key"),
            "scenarios": scenarios,
            "rejected": jsonl(out / "rejected.jsonl", "key"),
            "report": scrubbed(orjson.loads((out / "report.json").read_bytes())),
        }
    environments = {
        p.name: scrubbed(orjson.loads(p.read_bytes())) for p in sorted((out / "environments").glob("*.json"))
    }
    return {
        "environments": environments,
        "code": {path.name: path.read_text() for path in sorted((out / "environments").glob("*.py"))},
        "rejected": (out / "rejected.jsonl").read_text(),
        "themes": (out / "themes.json").read_text(),
        "stages": sorted(str(p.relative_to(out)) for p in (out / "stages").rglob("*.json")),
        "cost totals": counts(orjson.loads((out / "costs.json").read_bytes())["total"]),
    }


def run(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    process = cli(args, env)
    stdout, stderr = process.communicate(timeout=600)
    return process.returncode, stdout, stderr


def test_scenarios_over_the_cluster_match_a_local_run_and_resume_without_work(ray_cluster, tmp_path):
    mock = MockOpenAIServer(record_bodies=False)
    with mock.running_in_thread():
        env = serve_models(
            tmp_path, mock, {"writer": ScriptedScenarioWriter([ENVIRONMENT]), "teacher": ScriptedTeacher()}
        )
        common = ["synth", "scenarios", "--env", ENVIRONMENT, "--per-env", "4", "--model", "mock-writer"]
        common += ["--solve-with", "mock-teacher", "--attempts", "1", "--workers", "1", "--dedup-similarity", "0"]
        outputs = {}
        for name, extra in (("local", []), ("ray", ["--ray", ray_cluster.address])):
            code, stdout, stderr = run([*common, "--out", str(tmp_path / name), *extra], env)
            assert code == 0, stdout + stderr
            outputs[name] = synthesis_output(tmp_path / name)
        assert outputs["ray"] == outputs["local"]
        assert outputs["local"]["report"]["attempted"] == 4
        assert outputs["local"]["report"]["accepted"] == len(outputs["local"]["scenarios"]) >= 1
        files = {
            name: sorted(str(f.relative_to(tmp_path / name)) for f in (tmp_path / name).rglob("*")) for name in outputs
        }
        assert files["ray"] == [f for f in files["local"] if not f.startswith("llm_cache")]  # no cache in OUT

        requests = len(mock.chat_requests())
        journal = (tmp_path / "ray" / "attempts.jsonl").read_bytes()
        code, stdout, stderr = run([*common, "--out", str(tmp_path / "ray"), "--ray", ray_cluster.address], env)
        assert code == 0, stdout + stderr
        assert len(mock.chat_requests()) == requests  # every attempt was in the journal: no model call
        assert (tmp_path / "ray" / "attempts.jsonl").read_bytes() == journal


def test_queries_over_the_cluster_match_a_local_run(ray_cluster, tmp_path):
    graph = tmp_path / "graph.json"
    code, stdout, stderr = run(["synth", "graph", "--env", ENVIRONMENT, "--out", str(graph)], {})
    assert code == 0, stdout + stderr
    mock = MockOpenAIServer(record_bodies=False)
    with mock.running_in_thread():
        env = serve_models(tmp_path, mock, {"querier": ScriptedQueryModel([ENVIRONMENT])})
        common = ["synth", "queries", "--env", ENVIRONMENT, "--graph", str(graph), "--model", "mock-querier"]
        common += ["--chains", "4", "--seed", "3", "--workers", "1", "--dedup-similarity", "0"]
        common += ["--no-cache"]  # chains repeat requests; over Ray they are never answered from a cache
        outputs = {}
        for name, extra in (("local", []), ("ray", ["--ray", ray_cluster.address])):
            code, stdout, stderr = run([*common, "--out", str(tmp_path / name), *extra], env)
            assert code == 0, stdout + stderr
            outputs[name] = synthesis_output(tmp_path / name)
    assert outputs["ray"] == outputs["local"]
    assert outputs["local"]["report"]["attempted"] == 4


@pytest.mark.parametrize("command", ["scenarios", "envs"])
def test_an_unreachable_cluster_is_one_line_before_any_work(command, tmp_path):
    out = tmp_path / "out"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(orjson.dumps({"task": TASKS[0]}).decode() + "\n")
    given = ["--env", ENVIRONMENT] if command == "scenarios" else ["--from", str(tasks)]
    args = ["synth", command, *given, "--model", "nobody/never-called", "--out", str(out)]
    code, stdout, stderr = run([*args, "--ray", "127.0.0.1:9"], {})
    assert code == 2, stdout + stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot reach a Ray cluster at 127.0.0.1:9" in lines[0], stderr
    assert not out.exists()


TASKS = [
    "Please cancel my parking permit P-1, I moved to another city.",
    "Cancel the parking permit P-2 for me, I sold the car.",
    "What is 17 times 23?",
]


def test_envs_over_the_cluster_match_a_local_run_and_resume_without_work(ray_cluster, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(orjson.dumps({"task": task}).decode() + "\n" for task in TASKS))
    mock = MockOpenAIServer(record_bodies=False)
    with mock.running_in_thread():
        env = serve_models(tmp_path, mock, {"builder": ScriptedSynthModel()})
        common = ["synth", "envs", "--from", str(tasks), "--model", "mock-builder", "--rounds", "9"]
        common += ["--concurrency", "4", "--workers", "1", "--no-cache"]
        outputs = {}
        for name, extra in (("local", []), ("ray", ["--ray", ray_cluster.address])):
            code, stdout, stderr = run([*common, "--out", str(tmp_path / name), *extra], env)
            assert code == 0, stdout + stderr
            outputs[name] = synthesis_output(tmp_path / name)
        assert outputs["ray"] == outputs["local"]
        assert len(outputs["local"]["code"]) == 1 and outputs["local"]["stages"]

        requests = len(mock.chat_requests())
        code, stdout, stderr = run([*common, "--out", str(tmp_path / "ray"), "--ray", ray_cluster.address], env)
        assert code == 0, stdout + stderr
        assert len(mock.chat_requests()) == requests  # every stage was on disk: no model call
        assert synthesis_output(tmp_path / "ray") == outputs["ray"]


def running_executors() -> set[str]:
    """Names of the fleet executors alive on the test cluster (the CLI's driver names them in Ray's namespace)."""
    import ray

    return {
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == NAMESPACE and actor["name"].startswith("harness-executor-")
    }


def kill_executor(name: str) -> int:
    """SIGKILL one executor's process (every node of the test cluster is on this machine); returns its pid."""
    import ray

    status = ray.get(ray.get_actor(name, namespace=NAMESPACE).ready.remote(), timeout=60)
    os.kill(status.pid, signal.SIGKILL)
    return status.pid


def test_a_synthesis_executor_killed_mid_run_is_replaced_and_the_output_equals_a_local_run(ray_cluster, tmp_path):
    mock = MockOpenAIServer(record_bodies=False, latency=0.2)
    with mock.running_in_thread():
        env = serve_models(
            tmp_path, mock, {"writer": ScriptedScenarioWriter([ENVIRONMENT]), "teacher": ScriptedTeacher()}
        )
        common = ["synth", "scenarios", "--env", ENVIRONMENT, "--per-env", "8", "--model", "mock-writer"]
        common += ["--solve-with", "mock-teacher", "--attempts", "1", "--workers", "1", "--dedup-similarity", "0"]
        common += ["--concurrency", "1"]  # one attempt in flight per executor: the killed one holds work
        code, stdout, stderr = run([*common, "--out", str(tmp_path / "local")], env)
        assert code == 0, stdout + stderr

        before = running_executors()
        requests = len(mock.chat_requests())
        process = cli([*common, "--out", str(tmp_path / "ray"), "--ray", ray_cluster.address], env)
        started: set[str] = set()
        while process.poll() is None and (len(started) < 2 or len(mock.chat_requests()) <= requests):
            started = running_executors() - before
            time.sleep(0.05)
        assert len(started) == 2, "the run ended before both executors were working"
        victim = sorted(started)[0]
        killed = kill_executor(victim)
        replacements: set[str] = set()
        while process.poll() is None:
            replacements |= running_executors() - before - started
            time.sleep(0.05)
        stdout, stderr = process.communicate(timeout=600)
    assert code == 0 and process.returncode == 0, stdout + stderr
    assert killed and replacements, stderr
    assert f"replaces {victim}" in stderr, stderr
    assert synthesis_output(tmp_path / "ray") == synthesis_output(tmp_path / "local")
    assert synthesis_output(tmp_path / "local")["report"]["attempted"] == 8


async def test_the_synthesis_rate_limiter_sits_on_the_drivers_node(ray_cluster):
    import ray

    from harness.llm import EndpointLimits, LLMClient
    from harness.sandbox import JailSpec
    from synth.distributed import RaySynthesis
    from synth.scenarios import ScenarioSynthesisConfig

    library = load_library()
    environment = library.environments[ENVIRONMENT]
    client = LLMClient(default_limits=EndpointLimits(rpm=600, tpm=100_000))
    synthesis = RaySynthesis(ray_cluster.address, jail=JailSpec(workers=1))
    try:
        await synthesis.start("scenarios", ScenarioSynthesisConfig(model="nobody/never-called"), [environment], client)
        limiter = synthesis.fleet.limiter
        assert limiter is not None
        where = await asyncio.wrap_future(limiter.node_id.remote().future())
        assert where == ray.get_runtime_context().get_node_id()
        executor_nodes = {executor.node_id for executor in synthesis.fleet.executors if executor.alive}
        assert len(executor_nodes) == 2 and where not in executor_nodes  # the head offers no CPUs: none there
    finally:
        await synthesis.close()
        await client.aclose()
