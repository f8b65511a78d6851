"""Runs on a Ray cluster (two worker nodes in this process tree) against the mock OpenAI-compatible server:
the same results as a local run, exactly one result per episode whatever dies, limits held cluster-wide,
secrets kept out of the run folder and logs, and a clear line for every kind of bad cluster."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.run_adapters import agent_factory, user_factory
from harness.distributed import ClusterUnavailable, RayBackend
from harness.llm import AliasTable, EndpointLimits, LLMClient
from harness.llm.aliases import AliasEntry
from harness.results.metrics import read_results
from harness.run import RunConfig, run
from harness.schema import Trajectory
from tests.doubles.mock_openai import MockOpenAIServer
from tests.harness.run.test_runner import LIBRARY, client_for, register_scenarios
from tests.support.ray_cluster import cli, kill_when_lines

VOLATILE_KEYS = {"run_id", "started_at", "ended_at", "id", "tool_call_id"}


def comparable(value: Any) -> Any:
    """A trajectory without what legitimately differs between two runs: timings, the run id, and the ids
    the mock server mints for completions and tool calls."""
    if isinstance(value, dict):
        return {
            key: comparable(item)
            for key, item in value.items()
            if key not in VOLATILE_KEYS and not key.endswith(("seconds", "_ms"))
        }
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


def by_episode(trajectories: list[Trajectory]) -> dict[str, Any]:
    return {t.episode_id: comparable(t.model_dump(mode="json")) for t in trajectories}


@pytest.fixture
def server():
    mock = MockOpenAIServer(record_bodies=False, latency=0.02)
    register_scenarios(mock)
    with mock.running_in_thread():
        yield mock


def config(tmp_path: Path, name: str, **overrides: Any) -> RunConfig:
    values: dict[str, Any] = {"model": "mock-agent", "user_model": "mock-user", "out": tmp_path / name, "workers": 1}
    values.update(overrides)
    return RunConfig(**values)


def assert_exactly_once(run_dir: Path, planned: int) -> list[Trajectory]:
    lines = (run_dir / "results.jsonl").read_bytes().splitlines()
    ids = [orjson.loads(line)["episode_id"] for line in lines]
    assert len(ids) == len(set(ids)) == planned
    results = read_results(run_dir / "results.jsonl")
    assert all(t.reward is not None and t.reward.success for t in results), [
        (t.scenario_id, t.termination, t.errors) for t in results if not (t.reward and t.reward.success)
    ][:3]
    return results


async def test_a_run_over_two_nodes_equals_a_local_run(ray_cluster, server, tmp_path):
    client = client_for(server)
    local = await run(
        config(tmp_path, "local", mode="both", limit=8),
        agent_factory=agent_factory,
        user_factory=user_factory,
        client=client,
        library=LIBRARY,
    )
    backend = RayBackend(ray_cluster.address)
    distributed = await run(
        config(tmp_path, "ray", mode="both", limit=8, ray=ray_cluster.address),
        agent_factory=agent_factory,
        user_factory=user_factory,
        client=client,
        library=LIBRARY,
        backend=backend,
    )
    await client.aclose()
    assert distributed.ran == local.ran == 16
    here = by_episode(read_results(local.run_dir / "results.jsonl"))
    there = by_episode(read_results(distributed.run_dir / "results.jsonl"))
    assert there.keys() == here.keys()
    for episode_id, trajectory in here.items():
        assert there[episode_id] == trajectory, episode_id
    assert distributed.summary.overall.model_dump() == local.summary.overall.model_dump()
    manifest = orjson.loads((distributed.run_dir / "manifest.json").read_bytes())
    cluster = manifest["cluster"]
    assert cluster["ray_version"] == "2.60.0"
    assert len(cluster["nodes"]) == 2 and all(node["executors"] == 1 for node in cluster["nodes"])
    assert all(node["resources"]["CPU"] == 1.0 for node in cluster["nodes"])
    assert orjson.loads((local.run_dir / "manifest.json").read_bytes())["cluster"] is None
    # Both executors scored from the driver's screening rather than recomputing what held at reset.
    assert backend.reset_results_adopted == [8, 8]


async def test_an_executor_killed_mid_run_leaves_exactly_one_result_per_episode(ray_cluster, tmp_path):
    mock = MockOpenAIServer(record_bodies=False, latency=0.1)
    register_scenarios(mock)
    backend = RayBackend(ray_cluster.address)
    killed: list[int] = []

    def kill_one_executor(progress: Any) -> None:
        if progress.done >= 3 and not killed:
            victim = backend.executors[0]
            killed.append(victim.pid)
            os.kill(victim.pid, signal.SIGKILL)

    with mock.running_in_thread():
        client = client_for(mock)
        outcome = await run(
            config(tmp_path, "run", limit=24, concurrency=6, ray=ray_cluster.address),
            agent_factory=agent_factory,
            client=client,
            library=LIBRARY,
            backend=backend,
            on_progress=kill_one_executor,
        )
        await client.aclose()
    assert killed
    assert_exactly_once(outcome.run_dir, 24)
    assert outcome.summary.overall.success_rate == 1.0


async def test_a_node_removed_mid_run_leaves_exactly_one_result_per_episode(ray_cluster, tmp_path):
    extra = ray_cluster.add_node(num_cpus=1)
    ray_cluster.wait_for_nodes()
    mock = MockOpenAIServer(record_bodies=False, latency=0.1)
    register_scenarios(mock)
    backend = RayBackend(ray_cluster.address)
    removed = threading.Event()

    def remove_the_extra_node(progress: Any) -> None:
        if progress.done >= 3 and not removed.is_set():
            removed.set()
            threading.Thread(target=ray_cluster.remove_node, args=(extra, False)).start()

    with mock.running_in_thread():
        client = client_for(mock)
        outcome = await run(
            config(tmp_path, "run", limit=30, concurrency=9, ray=ray_cluster.address),
            agent_factory=agent_factory,
            client=client,
            library=LIBRARY,
            backend=backend,
            on_progress=remove_the_extra_node,
        )
        await client.aclose()
    assert removed.is_set()
    assert len(outcome.manifest.cluster.nodes) == 3
    assert_exactly_once(outcome.run_dir, 30)


async def test_rpm_is_held_across_the_cluster(ray_cluster, server, tmp_path):
    window, rpm = 2.0, 10
    client = client_for(server, concurrency=64, rpm=rpm, window_seconds=window)
    await run(
        config(tmp_path, "run", limit=8, concurrency=8, ray=ray_cluster.address),
        agent_factory=agent_factory,
        client=client,
        library=LIBRARY,
    )
    await client.aclose()
    times = sorted(r.t for r in server.chat_requests())
    assert len(times) > 3 * rpm
    # Two executors each allowed the full rate would put 2 x rpm in a window; the server sees at most rpm.
    for index, start in enumerate(times):
        assert sum(1 for t in times[index:] if t - start < window * 0.9) <= rpm


async def test_alias_max_episodes_bounds_episodes_in_flight_across_the_cluster(ray_cluster, tmp_path):
    mock = MockOpenAIServer(record_bodies=False, latency=0.05)
    register_scenarios(mock)
    with mock.running_in_thread():
        aliases = AliasTable(
            {"mock-agent": AliasEntry(model="hosted_vllm/replay", api_base=mock.base_url, max_episodes=2)}, environ={}
        )
        client = LLMClient(aliases=aliases, default_limits=EndpointLimits(concurrency=64))
        outcome = await run(
            config(tmp_path, "run", limit=10, concurrency=16, ray=ray_cluster.address),
            agent_factory=agent_factory,
            client=client,
            library=LIBRARY,
        )
        await client.aclose()
    assert_exactly_once(outcome.run_dir, 10)
    # One request in flight per episode at most: two executors, but never more than two episodes at once.
    assert 1 <= mock.max_in_flight <= 2


async def test_a_node_without_a_package_the_run_needs_is_one_line_before_any_episode(ray_cluster, server, tmp_path):
    """The agent factory lives in a package installed on the driver only: the check names the node and the
    package before any model is called, instead of every episode failing on the executors."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "lab_agents.py").write_text(
        "from agents.run_adapters import agent_factory as factory\n\n\n"
        "def lab_agent_factory(scenario, client, settings):\n    return factory(scenario, client, settings)\n"
    )
    sys.path.append(str(tmp_path / "site"))
    try:
        from lab_agents import lab_agent_factory  # type: ignore[import-not-found]

        client = client_for(server)
        with pytest.raises(
            ClusterUnavailable, match=r"^node \S+ \(\w+\) cannot import lab_agents \(No module named"
        ) as caught:
            await run(
                config(tmp_path, "run", limit=2, ray=ray_cluster.address),
                agent_factory=lab_agent_factory,
                client=client,
                library=LIBRARY,
            )
        await client.aclose()
    finally:
        sys.path.remove(str(tmp_path / "site"))
    assert "\n" not in str(caught.value)
    assert not server.chat_requests()
    assert not (tmp_path / "run" / "results.jsonl").exists() and not (tmp_path / "run" / "manifest.json").exists()
    # Executors are started while nodes are checked: the refusal stops them too.
    assert executors_alive_within(10.0) == []


def executors_alive_within(seconds: float) -> list[str]:
    """The run's executors still alive, polled until none is left or ``seconds`` pass (killing is asynchronous)."""
    import ray

    deadline = time.monotonic() + seconds
    while True:
        alive = [
            actor["name"]
            for actor in ray.util.list_named_actors(all_namespaces=True)
            if actor["name"].startswith("harness-executor-")
        ]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def write_aliases(path: Path, server: MockOpenAIServer, key_variable: str | None = None) -> None:
    key = f'api_key_env = "{key_variable}"\n' if key_variable else ""
    path.write_text(f'[aliases.mock-agent]\nmodel = "hosted_vllm/replay"\napi_base = "{server.base_url}"\n{key}')


def test_driver_sigkill_then_resume_on_the_cluster(ray_cluster, tmp_path):
    mock = MockOpenAIServer(record_bodies=False, latency=0.2)
    register_scenarios(mock)
    with mock.running_in_thread():
        models = tmp_path / "models.toml"
        write_aliases(models, mock)
        out = tmp_path / "run"
        args = ["run", "--model", "mock-agent", "--out", str(out), "--limit", "24", "--concurrency", "3"]
        args += ["--workers", "1", "--ray", ray_cluster.address]
        env = {"HARNESS_MODELS_FILE": str(models)}
        kill_when_lines(cli(args, env), out / "results.jsonl", 5)
        partial = (out / "results.jsonl").read_bytes().count(b"\n")
        assert 5 <= partial < 24
        resumed = cli([*args, "--resume"], env)
        _, stderr = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, stderr
    assert_exactly_once(out, 24)
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert {node["address"] for node in manifest["cluster"]["nodes"]}


def test_secrets_reach_executors_but_not_the_run_folder_or_logs(ray_cluster, tmp_path):
    secret = f"sk-test-{uuid.uuid4().hex}"
    mock = MockOpenAIServer(record_bodies=True)
    register_scenarios(mock)
    with mock.running_in_thread():
        models = tmp_path / "models.toml"
        write_aliases(models, mock, key_variable="ENVHARNESS_TEST_KEY")
        out = tmp_path / "run"
        args = ["-v", "run", "--model", "mock-agent", "--out", str(out), "--limit", "3", "--workers", "1"]
        process = cli(
            [*args, "--ray", ray_cluster.address], {"HARNESS_MODELS_FILE": str(models), "ENVHARNESS_TEST_KEY": secret}
        )
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
        sent = {r.headers.get("authorization") for r in mock.chat_requests() if r.headers}
    assert sent == {f"Bearer {secret}"}  # the executors had the key: the driver forwarded it by name
    assert "ENVHARNESS_TEST_KEY" in stderr  # -v names the variables forwarded ...
    assert secret not in stdout + stderr  # ... never their values
    for path in out.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    session = Path(ray_cluster.head_node.get_session_dir_path())
    for path in (session / "logs").rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert secret.encode() not in path.read_bytes(), path


def test_the_request_timeout_reaches_the_executors_model_clients(ray_cluster, tmp_path):
    # The endpoint answers each completion after 20 s: with --timeout 1 every request on the cluster times out (and
    # is tried once more), so the episodes end as infrastructure errors saying so, instead of waiting the 20 s.
    mock = MockOpenAIServer(latency=20.0)
    register_scenarios(mock)
    with mock.running_in_thread():
        models = tmp_path / "models.toml"
        write_aliases(models, mock)
        out = tmp_path / "run"
        args = ["run", "--model", "mock-agent", "--out", str(out), "--limit", "2", "--workers", "1", "--timeout", "1"]
        process = cli([*args, "--ray", ray_cluster.address], {"HARNESS_MODELS_FILE": str(models)})
        _, stderr = process.communicate(timeout=300)
    assert process.returncode == 1, stderr
    records = [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["termination"] == "infra_error", record["termination_detail"]
        assert "timed out after 1 s" in record["termination_detail"], record["termination_detail"]


def test_an_unreachable_address_is_one_line_and_no_run(tmp_path):
    out = tmp_path / "run"
    process = cli(["run", "--agent", "oracle", "--out", str(out), "--limit", "2", "--ray", "127.0.0.1:9"], {})
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 2
    assert stderr.strip().splitlines() == ["error: cannot reach a Ray cluster at 127.0.0.1:9: Connection refused"]
    assert "Traceback" not in stdout + stderr
    assert not (out / "results.jsonl").exists() and not (out / "manifest.json").exists()


def test_a_run_without_ray_never_imports_the_cluster_code(tmp_path):
    """``harness.run`` reaches ``harness.distributed`` (and Ray) only where ``--ray`` asks for it."""
    out = tmp_path / "run"
    process = cli(["run", "--agent", "oracle", "--out", str(out), "--limit", "1"], {"PYTHONPROFILEIMPORTTIME": "1"})
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stdout + stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}
    assert "harness.run.driver" in imported and "harness.sandbox" in imported  # the profile covers the run
    assert not {name for name in imported if name.startswith(("harness.distributed", "ray"))}
    assert len(read_results(out / "results.jsonl")) == 1


def test_ray_without_an_address_means_a_local_cluster():
    from harness.cli import with_default_ray_address

    assert with_default_ray_address(["run", "--ray"]) == ["run", "--ray", "local"]
    assert with_default_ray_address(["run", "--ray", "--limit", "2"]) == ["run", "--ray", "local", "--limit", "2"]
    assert with_default_ray_address(["run", "--ray", "auto"]) == ["run", "--ray", "auto"]


def test_a_run_on_a_cluster_it_starts_prints_no_notice_from_ray(ray_cluster, tmp_path):
    """``--ray`` alone starts a cluster here even though RAY_ADDRESS (set by this test's own cluster) names
    another one, and the run's terminal shows no notice of Ray's."""
    mock = MockOpenAIServer()
    register_scenarios(mock)
    with mock.running_in_thread():
        models = tmp_path / "models.toml"
        write_aliases(models, mock)
        out = tmp_path / "run"
        args = ["run", "--model", "mock-agent", "--out", str(out), "--limit", "2", "--workers", "1", "--ray"]
        process = cli(args, {"HARNESS_MODELS_FILE": str(models)})
        _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    assert "Token authentication" not in stderr
    assert_exactly_once(out, 2)
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["cluster"]["address"] == "local"
    import ray

    ran_on = {node["node_id"] for node in manifest["cluster"]["nodes"]}
    assert len(ran_on) == 1 and not ran_on & {node["NodeID"] for node in ray.nodes()}


async def test_the_cost_limit_stops_sending_episodes_to_the_cluster(ray_cluster, server, tmp_path):
    """The fleet sends no episode once the spend its executors recorded reaches --cost-limit; every request the
    server saw belongs to a recorded episode, and a resume with a higher limit finishes the run exactly once."""
    priced = {"input_usd_per_million": 100.0, "output_usd_per_million": 100.0}
    aliases = AliasTable(
        {"mock-agent": AliasEntry(model="hosted_vllm/replay", api_base=server.base_url, **priced)}, environ={}
    )
    client = LLMClient(aliases=aliases)
    stopped = await run(
        config(tmp_path, "run", limit=16, concurrency=1, cost_limit=1.0, ray=ray_cluster.address),
        agent_factory=agent_factory,
        client=client,
        library=LIBRARY,
    )
    assert stopped.cost_limit is not None and stopped.cost_limit.not_started > 0
    recorded = read_results(stopped.run_dir / "results.jsonl")
    assert 1 <= len(recorded) < 16
    assert len(server.chat_requests()) == sum(u.requests for t in recorded for u in t.usage.values())
    finished = await run(
        config(tmp_path, "run", limit=16, concurrency=1, cost_limit=1000.0, resume=True, ray=ray_cluster.address),
        agent_factory=agent_factory,
        client=client,
        library=LIBRARY,
    )
    await client.aclose()
    assert finished.cost_limit is None
    assert_exactly_once(stopped.run_dir, 16)
