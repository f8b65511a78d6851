"""Cost of the TRL and OpenEnv adapters over the jail they forward to, one rollout at a time and as a generation batch.

    python bench/train_adapters.py [--calls 300] [--resets 30] [--batch 64] [--batch-calls 10] [--workers N]
                                   [--skip-openenv]

Per tool call, one rollout at a time: the same read-only call (``banking-001``'s first reference action) made

- directly on a jailed session inside the jail's loop (the bare jail call, the baseline);
- through a TRL environment object (a synchronous method, hopping to the jail's loop thread, schema-checked,
  recorded as an episode step);
- through ``harness serve banking --protocol openenv`` (the CLI in a subprocess) by OpenEnv 0.10's own
  ``MCPToolClient``, run from the cached client venv of ``tests/support/openenv_client.py`` (built there when
  missing), as ``step(CallToolAction)`` frames over ``/ws``: the client's serialization, the WebSocket round trip
  and the server's schema check and episode step are all in the figure. The times are taken in the client.

The overhead of an adapter is its percentile minus the bare call's same percentile. ``reset`` is timed through
each adapter (closing the previous episode, opening the scenario's jailed session); an OpenEnv episode is reset
every ``calls / resets`` calls (the episode's step limit is 30). Targets: overhead p50 ≤ 0.5 ms; ``reset`` p50
≤ 10 ms. CPU time of this process is printed beside the TRL figures; all wall-clock figures are noisy on a shared
machine.

``--batch N`` (0: skip) then serves a generation batch of N environments at once, the way a trainer's does: N
objects from one TRL ``environment_factory`` (one shared jail), each reset, called ``--batch-calls`` times and
scored (``get_reward``) from its own thread, all released together; and N concurrent OpenEnv sessions of one server
(``--max-sessions N``), each its own ``MCPToolClient`` in one asyncio loop of the client process, reset, called
``--batch-calls`` times over ``/ws`` and ended by ``finish`` (scored). Printed: the batch's wall time (from the
release to the last rollout's end), ``reset`` and per-call p50 / p90 under that concurrency, and the failures
(an exception, a rollout that ended early, an error answer), which must be 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.library import load_library  # noqa: E402
from harness.schema import ToolCall  # noqa: E402
from harness.train.trl_environment import environment_factory  # noqa: E402
from tests.support.openenv_client import SESSIONS_DRIVER, client_python, serve_openenv  # noqa: E402

ENV_ID = "banking"
SCENARIO_ID = "banking-001"
MS = 1000.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def line(label: str, values: list[float], extra: str = "") -> str:
    p50, p90 = statistics.median(values) * MS, percentile(values, 0.9) * MS
    return f"{label:<28} p50 {p50:8.3f} ms  p90 {p90:8.3f} ms{extra}"


def overhead(label: str, adapter: list[float], bare: list[float]) -> str:
    p50 = (statistics.median(adapter) - statistics.median(bare)) * MS
    p90 = (percentile(adapter, 0.9) - percentile(bare, 0.9)) * MS
    return f"{label:<28} p50 {p50:8.3f} ms  p90 {p90:8.3f} ms  (target p50 ≤ 0.5 ms)"


def trl_single(args: argparse.Namespace) -> list[float]:
    """The TRL figures, one rollout at a time; returns the bare jail call times."""
    library = load_library(None)
    factory = environment_factory(library, environments=[ENV_ID], workers=args.workers)
    assert callable(factory)
    environment: Any = factory()
    jail = environment.jail
    scenario = next(s for s in library.scenarios_for(ENV_ID) if s.id == SCENARIO_ID)
    action = scenario.reference_actions[0]

    async def bare_calls(count: int) -> tuple[list[float], float]:
        session = await jail.pool.open_session(library.environments[ENV_ID], scenario.initial_state)
        call = ToolCall(id="c", name=action.name, arguments=action.arguments)
        times: list[float] = []
        cpu = time.process_time()
        try:
            for _ in range(count):
                started = time.perf_counter()
                await session.call(call)
                times.append(time.perf_counter() - started)
        finally:
            await session.close()
        return times, time.process_time() - cpu

    environment.settings.max_steps = args.calls + 10  # one long episode: every call is a step
    environment.reset(scenario_id=scenario.id)
    method = getattr(environment, action.name)
    method(**action.arguments)  # warm
    bare, bare_cpu = jail.run(bare_calls(args.calls))
    adapter: list[float] = []
    cpu = time.process_time()
    for _ in range(args.calls):
        started = time.perf_counter()
        method(**action.arguments)
        adapter.append(time.perf_counter() - started)
    adapter_cpu = time.process_time() - cpu

    resets: list[float] = []
    for _ in range(args.resets):
        started = time.perf_counter()
        environment.reset(scenario_id=scenario.id)
        resets.append(time.perf_counter() - started)
    jail.close()

    print(f"one rollout at a time ({action.name} on {SCENARIO_ID}, {args.calls} calls, {args.resets} resets)")
    print(line("bare jail call", bare))
    print(line("TRL adapter call", adapter))
    print(overhead("TRL adapter overhead", adapter, bare))
    print(
        f"{'':<28} CPU of this process per call: bare {bare_cpu / args.calls * MS:.3f} ms, "
        f"adapter {adapter_cpu / args.calls * MS:.3f} ms"
    )
    print(line("TRL reset", resets, "  (target p50 ≤ 10 ms)"))
    return bare


def trl_batch(args: argparse.Namespace) -> None:
    library = load_library(None)
    factory = environment_factory(library, environments=[ENV_ID], workers=args.workers)
    assert callable(factory)
    environments: list[Any] = [factory() for _ in range(args.batch)]
    scenario = next(s for s in library.scenarios_for(ENV_ID) if s.id == SCENARIO_ID)
    action = scenario.reference_actions[0]
    environments[0].reset(scenario_id=scenario.id)  # the pool's zygote is up before the clock starts
    release = threading.Barrier(args.batch + 1)
    resets: list[float] = []
    calls: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def rollout(environment: Any) -> None:
        mine_resets: list[float] = []
        mine_calls: list[float] = []
        release.wait()
        try:
            started = time.perf_counter()
            task = environment.reset(scenario_id=scenario.id)
            mine_resets.append(time.perf_counter() - started)
            if task is None:
                raise RuntimeError(f"reset ended the rollout: {environment.outcome}")
            method = getattr(environment, action.name)
            for _ in range(args.batch_calls):
                started = time.perf_counter()
                text = method(**action.arguments)
                mine_calls.append(time.perf_counter() - started)
                if text.startswith("Error:"):
                    raise RuntimeError(text)
            environment.get_reward()
        except Exception as exc:
            with lock:
                failures.append(f"{type(exc).__name__}: {exc}")
        with lock:
            resets.extend(mine_resets)
            calls.extend(mine_calls)

    threads = [threading.Thread(target=rollout, args=(environment,)) for environment in environments]
    for thread in threads:
        thread.start()
    release.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    environments[0].jail.close()
    print(f"TRL: {args.batch} environment objects, one thread each, {args.batch_calls} calls each")
    print(f"{'batch wall time':<28} {wall * MS:10.1f} ms  failures {len(failures)}")
    print(line("reset under the batch", resets))
    print(line("call under the batch", calls))
    for failure in failures[:5]:
        print(f"  failure: {failure}")


def openenv_programs(count: int, resets: int, calls: int, finish: bool) -> list[list[dict[str, Any]]]:
    """``count`` sessions, each ``resets`` episodes of ``calls`` read-only calls (ended by ``finish`` if asked)."""
    library = load_library(None)
    scenario = next(s for s in library.scenarios_for(ENV_ID) if s.id == SCENARIO_ID)
    action = scenario.reference_actions[0]
    step = {"op": "step", "name": action.name, "arguments": dict(action.arguments)}
    episode = [{"op": "reset", "kwargs": {"scenario_id": SCENARIO_ID}}, *[step] * calls]
    if finish:
        episode.append({"op": "step", "name": "finish", "arguments": {"answer": "done"}})
    return [episode * resets for _ in range(count)]


def drive(python: Path, base_url: str, programs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    ran = subprocess.run(
        [str(python), str(SESSIONS_DRIVER), base_url], input=json.dumps(programs), capture_output=True, text=True
    )
    if ran.returncode != 0:
        raise SystemExit(f"the OpenEnv client failed: {ran.stderr.strip()}")
    report: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return report


def openenv_figures(
    programs: list[list[dict[str, Any]]], report: dict[str, Any]
) -> tuple[list[float], list[float], list[str]]:
    """Reset and tool call times (the finish calls, which score the episode, left out) and the failures."""
    resets: list[float] = []
    calls: list[float] = []
    failures: list[str] = []
    for program, session in zip(programs, report["sessions"], strict=True):
        if len(session) != len(program):
            failures.append(f"a session ran {len(session)} of its {len(program)} operations")
        for operation, entry in zip(program, session, strict=False):
            if "error" in entry:
                failures.append(entry["error"])
                continue
            observation = entry["result"]["observation"]
            if observation.get("error") is not None:
                failures.append(str(observation["error"]))
            if operation["op"] == "reset":
                resets.append(entry["seconds"])
            elif operation["name"] != "finish":
                calls.append(entry["seconds"])
                if entry["result"]["done"]:
                    failures.append("a read-only call ended the episode")
    return resets, calls, failures


def openenv_single(args: argparse.Namespace, python: Path, bare: list[float]) -> None:
    per_episode = max(1, min(25, -(-args.calls // args.resets)))
    extra = ["--workers", str(args.workers)] if args.workers else []
    with serve_openenv(python, ENV_ID, "--max-sessions", "1", *extra) as served:
        drive(python, served.base_url, openenv_programs(1, 2, 5, finish=False))  # warm both sides
        programs = openenv_programs(1, args.resets, per_episode, finish=False)
        report = drive(python, served.base_url, programs)
    resets, calls, failures = openenv_figures(programs, report)
    print(f"OpenEnv: MCPToolClient over /ws, {len(calls)} calls, {len(resets)} resets, failures {len(failures)}")
    print(line("OpenEnv adapter call", calls))
    print(overhead("OpenEnv adapter overhead", calls, bare))
    print(line("OpenEnv reset", resets, "  (target p50 ≤ 10 ms)"))


def openenv_batch(args: argparse.Namespace, python: Path) -> None:
    extra = ["--workers", str(args.workers)] if args.workers else []
    with serve_openenv(python, ENV_ID, "--max-sessions", str(args.batch), *extra) as served:
        drive(python, served.base_url, openenv_programs(1, 1, 1, finish=True))  # the pool's zygote is up
        programs = openenv_programs(args.batch, 1, args.batch_calls, finish=True)
        report = drive(python, served.base_url, programs)
    resets, calls, failures = openenv_figures(programs, report)
    print(
        f"OpenEnv: {args.batch} concurrent sessions over /ws (--max-sessions {args.batch}), "
        f"{args.batch_calls} calls and finish each, at most {report['max_in_flight']} operations in flight"
    )
    print(f"{'batch wall time':<28} {report['wall_seconds'] * MS:10.1f} ms  failures {len(failures)}")
    print(line("reset under the batch", resets))
    print(line("call under the batch", calls))
    for failure in failures[:5]:
        print(f"  failure: {failure}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--resets", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64, help="environments served at once (0: skip)")
    parser.add_argument("--batch-calls", type=int, default=10, help="tool calls per rollout of the batch")
    parser.add_argument("--workers", type=int, default=None, help="sandbox zygotes (default 1)")
    parser.add_argument("--skip-openenv", action="store_true", help="TRL only (no OpenEnv client venv)")
    args = parser.parse_args()

    bare = trl_single(args)
    python = None if args.skip_openenv else client_python()
    if python is not None:
        openenv_single(args, python, bare)
    if args.batch > 0:
        print(f"\ngeneration batch of {args.batch} environments served concurrently")
        trl_batch(args)
        if python is not None:
            openenv_batch(args, python)


if __name__ == "__main__":
    main()
