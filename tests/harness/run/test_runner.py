"""The runner through real HTTP to the mock OpenAI-compatible server: scale, kills, faults, rate limits."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from agents.run_adapters import agent_factory, user_factory
from harness.cli import app
from harness.collector import YOUNG_THRESHOLD
from harness.library import load_library
from harness.llm import AliasTable, EndpointLimits, LLMClient, RetryPolicy
from harness.llm.aliases import AliasEntry
from harness.results.metrics import read_results
from harness.run import RunConfig, RunRefused, run
from harness.schema import TerminationReason
from tests.doubles.mock_openai import Fault, MockOpenAIServer

LIBRARY = load_library()


def register_scenarios(server: MockOpenAIServer) -> None:
    """The mock model replays each scenario's reference actions, found by the task text in the messages; the
    mock user, found by its profile's goal in its system prompt, opens with the task and stops once the agent
    answers."""
    for scenario in LIBRARY.scenarios:
        server.register_replay(
            scenario.task, [a.model_dump() for a in scenario.reference_actions], scenario.reference_reply
        )
        user_key = scenario.user_profile.goal if scenario.user_profile else scenario.task
        server.register_user(user_key, [scenario.task])


def client_for(server: MockOpenAIServer, **limits) -> LLMClient:
    aliases = AliasTable(
        {
            "mock-agent": AliasEntry(model="hosted_vllm/replay", api_base=server.base_url),
            "mock-user": AliasEntry(model="hosted_vllm/user", api_base=server.base_url),
        },
        environ={},
    )
    retry = RetryPolicy(max_attempts=limits.pop("attempts", 4), initial_backoff=0.01, max_backoff=0.05, jitter=0.0)
    return LLMClient(aliases=aliases, retry=retry, default_limits=EndpointLimits(**limits))


@pytest.fixture
def server():
    mock = MockOpenAIServer(record_bodies=False)
    register_scenarios(mock)
    with mock.running_in_thread():
        yield mock


def config(tmp_path: Path, **overrides) -> RunConfig:
    values = {"model": "mock-agent", "user_model": "mock-user", "out": tmp_path / "run", "workers": 2}
    values.update(overrides)
    return RunConfig(**values)


async def test_500_episodes_at_concurrency_200(server, tmp_path):
    cfg = config(tmp_path, trials=4, limit=125, concurrency=200)
    client = client_for(server, concurrency=200)
    outcome = await run(cfg, agent_factory=agent_factory, user_factory=user_factory, client=client, library=LIBRARY)
    await client.aclose()
    results = read_results(outcome.run_dir / "results.jsonl")
    assert outcome.ran == 500 and len(results) == 500
    assert len({t.episode_id for t in results}) == 500
    assert all(t.reward is not None and t.reward.success for t in results), [
        (t.scenario_id, t.termination, t.errors) for t in results if not (t.reward and t.reward.success)
    ][:5]
    assert outcome.summary.overall.success_rate == 1.0
    assert outcome.summary.overall.pass_hat_k == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    summary = orjson.loads((outcome.run_dir / "summary.json").read_bytes())
    assert summary["overall"]["scored"] == 500
    manifest = orjson.loads((outcome.run_dir / "manifest.json").read_bytes())
    assert manifest["episodes_planned"] == 500 and manifest["dataset"]["fingerprint"] == LIBRARY.source.fingerprint


async def test_an_error_recording_an_episode_still_ends_the_run_though_its_slot_was_free(server, tmp_path):
    """An episode frees its slot when it asks to be scored, and is recorded afterwards: an error there (here the
    caller's progress callback) ends the run as an error in the episode's own slot did, and is not lost."""
    recorded: list[int] = []

    def breaks_on_the_third(progress) -> None:
        recorded.append(progress.done)
        if len(recorded) == 3:
            raise RuntimeError("the progress display broke")

    cfg = config(tmp_path, trials=2, limit=6, concurrency=4)
    client = client_for(server)
    with pytest.raises(RuntimeError, match="the progress display broke"):
        await run(cfg, agent_factory=agent_factory, client=client, library=LIBRARY, on_progress=breaks_on_the_third)
    await client.aclose()
    assert len(recorded) >= 3
    assert len(read_results(tmp_path / "run" / "results.jsonl")) == len(recorded)


async def test_episodes_run_with_the_tuned_collector_and_the_run_restores_it(server, tmp_path):
    seen_thresholds: list[tuple[int, int, int]] = []

    def recording_agent_factory(*args, **kwargs):
        seen_thresholds.append(gc.get_threshold())
        return agent_factory(*args, **kwargs)

    before = gc.get_threshold()
    client = client_for(server)
    outcome = await run(
        config(tmp_path, limit=3), agent_factory=recording_agent_factory, client=client, library=LIBRARY
    )
    await client.aclose()
    assert outcome.ran == 3
    assert seen_thresholds and all(t[0] == YOUNG_THRESHOLD for t in seen_thresholds)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def test_both_modes_and_resume_runs_nothing_twice(server, tmp_path):
    cfg = config(tmp_path, mode="both", limit=6, concurrency=8)
    client = client_for(server)
    first = await run(cfg, agent_factory=agent_factory, user_factory=user_factory, client=client, library=LIBRARY)
    assert first.ran == 12
    modes = {t.mode for t in read_results(first.run_dir / "results.jsonl")}
    assert modes == {"nonconv", "conv"}
    conv = [t for t in read_results(first.run_dir / "results.jsonl") if t.mode == "conv"]
    assert all(t.termination is TerminationReason.USER_STOP and t.reward.success for t in conv)
    requests_before = len(server.chat_requests())
    again = await run(
        cfg.model_copy(update={"resume": True}),
        agent_factory=agent_factory,
        user_factory=user_factory,
        client=client,
        library=LIBRARY,
    )
    await client.aclose()
    assert again.ran == 0 and again.skipped == 12
    assert len(server.chat_requests()) == requests_before
    assert len((first.run_dir / "results.jsonl").read_text().splitlines()) == 12


async def test_resume_refuses_different_settings_and_names_them(server, tmp_path):
    client = client_for(server)
    await run(config(tmp_path, limit=1), agent_factory=agent_factory, client=client, library=LIBRARY)
    with pytest.raises(RunRefused, match="temperature"):
        await run(
            config(tmp_path, limit=1, resume=True, temperature=0.7),
            agent_factory=agent_factory,
            client=client,
            library=LIBRARY,
        )
    with pytest.raises(RunRefused, match="--resume"):
        await run(config(tmp_path, limit=1), agent_factory=agent_factory, client=client, library=LIBRARY)
    await client.aclose()


async def test_faults_end_as_scored_or_marked_and_retry_errors_finishes_them(server, tmp_path):
    server.inject(Fault(kind="server_error", times=None, probability=0.2))
    cfg = config(tmp_path, limit=40, concurrency=16)
    client = client_for(server, attempts=1)
    outcome = await run(cfg, agent_factory=agent_factory, user_factory=user_factory, client=client, library=LIBRARY)
    results = read_results(outcome.run_dir / "results.jsonl")
    assert len(results) == 40
    infra = [t for t in results if t.termination is TerminationReason.INFRA_ERROR]
    scored = [t for t in results if t.reward is not None]
    assert infra and len(infra) + len(scored) == 40
    assert all(t.reward is None for t in infra)
    assert outcome.summary.overall.infra_errors == len(infra)
    assert outcome.summary.overall.scored == len(scored)
    server.clear_faults()
    retried = await run(
        cfg.model_copy(update={"resume": True, "retry_errors": True}),
        agent_factory=agent_factory,
        user_factory=user_factory,
        client=client,
        library=LIBRARY,
    )
    await client.aclose()
    assert retried.ran == len(infra)
    final = read_results(outcome.run_dir / "results.jsonl")
    assert len(final) == 40 and all(t.reward is not None for t in final)


async def test_rpm_is_respected_on_the_server_side(server, tmp_path):
    window, rpm = 2.0, 10
    client = client_for(server, concurrency=64, rpm=rpm, window_seconds=window)
    cfg = config(tmp_path, limit=8, concurrency=8)
    await run(cfg, agent_factory=agent_factory, client=client, library=LIBRARY)
    await client.aclose()
    times = sorted(r.t for r in server.chat_requests())
    assert len(times) > 3 * rpm  # demand well above the limit
    # Admission is timed on the client; arrival on the server adds transit jitter (large on a loaded machine),
    # so the server-side window is taken 10% shorter than the limiter's.
    for index, start in enumerate(times):
        in_window = sum(1 for t in times[index:] if t - start < window * 0.9)
        assert in_window <= rpm


def write_alias_file(path: Path, server: MockOpenAIServer) -> None:
    path.write_text(f'[aliases.mock-agent]\nmodel = "hosted_vllm/replay"\napi_base = "{server.base_url}"\n')


def test_sigkill_mid_run_then_resume_has_every_episode_exactly_once(tmp_path):
    server = MockOpenAIServer(record_bodies=False, latency=0.2)
    register_scenarios(server)
    with server.running_in_thread():
        models = tmp_path / "models.toml"
        write_alias_file(models, server)
        out = tmp_path / "run"
        # At 0.2 s per request, 4 episodes in flight and about 5 requests per episode, the run lasts at least
        # 15 s: long enough to be killed part way whatever the machine's load.
        args = ["run", "--model", "mock-agent", "--out", str(out), "--limit", "60", "--concurrency", "4"]
        env = {**os.environ, "HARNESS_MODELS_FILE": str(models)}
        process = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        results = out / "results.jsonl"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if results.exists() and results.read_bytes().count(b"\n") >= 5:
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait()
        partial = results.read_bytes().count(b"\n")
        assert 5 <= partial < 60
        resumed = CliRunner().invoke(app, [*args, "--resume"], env={"HARNESS_MODELS_FILE": str(models)})
        assert resumed.exit_code == 0, resumed.output
    lines = [orjson.loads(line) for line in results.read_bytes().splitlines()]
    ids = [line["episode_id"] for line in lines]
    assert len(ids) == len(set(ids)) == 60
    assert all(line["reward"]["success"] for line in lines)


async def test_run_through_an_mcp_server(tmp_path):
    from harness.mcp.server import EnvironmentServer, running_http_server
    from harness.sandbox import JailSpec

    environment = LIBRARY.environments["banking"]
    async with JailSpec(workers=1).pool() as pool:
        server = EnvironmentServer(environment, pool=pool)
        async with running_http_server(server) as url:
            cfg = config(
                tmp_path, model="oracle", agent_kind="oracle", env=["banking"], limit=3, mcp=url, concurrency=3
            )
            outcome = await run(cfg, agent_factory=agent_factory, library=LIBRARY)
    results = read_results(outcome.run_dir / "results.jsonl")
    assert len(results) == 3
    assert all(t.reward is not None and t.reward.success for t in results), [(t.termination, t.errors) for t in results]
    # The manifest records the server without its credential (the URL's token path segment).
    recorded = orjson.loads((outcome.run_dir / "manifest.json").read_bytes())["config"]["mcp"]
    assert recorded == url.replace(url.split("/")[3], "[redacted]") and "[redacted]" in recorded


def test_an_alias_bounds_the_episodes_in_flight():
    from harness.run import episodes_in_flight

    aliases = AliasTable(
        {
            "serial": AliasEntry(model="hosted_vllm/x", api_base="http://127.0.0.1:9/v1", max_episodes=1),
            "wide": AliasEntry(model="hosted_vllm/y", api_base="http://127.0.0.1:9/v1"),
        },
        environ={},
    )
    client = LLMClient(aliases=aliases)
    assert episodes_in_flight(RunConfig(model="serial", concurrency=32), client) == 1
    assert episodes_in_flight(RunConfig(model="wide", concurrency=32), client) == 32
    assert episodes_in_flight(RunConfig(model="wide", user_model="serial", mode="conv", concurrency=32), client) == 1
    assert LLMClient().resolve("local").max_episodes == 1
