"""A long run in bounded memory: ``harness run`` of many episodes against the mock model, watched from outside.

    python bench/long_run.py [--episodes 100000] [--mode conv] [--concurrency 256] [--latency 0.1]
        [--interval 30] [--ray local] [--keep DIR]

The harness runs as a user runs it (``python -m harness.cli run``, its own process) on the seed library, as many
trials as make ``--episodes``, against the mock OpenAI-compatible server (its own process: the agent replays each
scenario's reference actions, the simulated user says the task, then stops). Every ``--interval`` seconds the
bench prints the harness process's resident memory (RSS), its open files, its children (and how many of them are
zombies) and the episodes recorded so far (lines of ``results.jsonl``), and, once 2,000 episodes are recorded,
the RSS added per episode recorded since. At the end: the same figures over the whole run, the exit status, and
whether every planned episode was recorded once. With ``--ray local`` the episodes run on a local Ray instance and
the process watched is the run's driver (its children include Ray's own processes).

Target: at most 5 KB of RSS per episode after the first 2,000; open files and children flat.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.children import receive  # noqa: E402

WARM_UP_EPISODES = 2_000
HEADER = f"{'seconds':>8} {'episodes':>9} {'RSS MB':>9} {'files':>6} {'children':>9} {'zombies':>7} {'KB/episode':>11}"
SEED_SCENARIOS = 149


def serve(latency: float, ready: multiprocessing.Queue, stop: multiprocessing.Event) -> None:  # type: ignore[type-arg]
    from tests.doubles.mock_openai import MockOpenAIServer
    from tests.doubles.seed_replay import register_scenarios

    server = MockOpenAIServer(latency=latency, record_bodies=False)
    register_scenarios(server)
    with server.running_in_thread():
        ready.put(server.base_url)
        stop.wait()


@dataclass
class Sample:
    seconds: float
    episodes: int
    rss_kb: int
    open_files: int
    children: int
    zombies: int


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as children:
            found += [int(child) for child in children.read().split()]
    return found


def is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return False


class LineCounter:
    """Lines of a growing file, counted from the bytes appended since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0

    def count(self) -> int:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                while chunk := handle.read(1 << 20):
                    self.lines += chunk.count(b"\n")
                    self.offset += len(chunk)
        except FileNotFoundError:
            pass
        return self.lines


def episode_ids(results: Path) -> set[bytes]:
    """The episode ids of a results file, read a line at a time."""
    ids: set[bytes] = set()
    if results.exists():
        with results.open("rb") as handle:
            for line in handle:
                ids.add(line.split(b'"episode_id":"', 1)[-1].split(b'"', 1)[0])
    return ids


def sample(pid: int, started: float, counter: LineCounter) -> Sample:
    children = children_of(pid)
    return Sample(
        seconds=time.monotonic() - started,
        episodes=counter.count(),
        rss_kb=rss_kb(pid),
        open_files=len(os.listdir(f"/proc/{pid}/fd")),
        children=len(children),
        zombies=sum(is_zombie(child) for child in children),
    )


def per_episode_kb(first: Sample | None, last: Sample) -> str:
    if first is None or last.episodes <= first.episodes:
        return "–"
    return f"{(last.rss_kb - first.rss_kb) / (last.episodes - first.episodes):.2f}"


def print_sample(row: Sample, warm: Sample | None) -> None:
    print(
        f"{row.seconds:>8.0f} {row.episodes:>9} {row.rss_kb / 1024:>9.1f} {row.open_files:>6} {row.children:>9} "
        f"{row.zombies:>7} {per_episode_kb(warm, row):>11}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--mode", choices=["conv", "nonconv"], default="conv")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.1, help="the mock model's seconds per request")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--ray", default=None, help="run the episodes on Ray at this address (e.g. local)")
    parser.add_argument("--keep", type=Path, default=None, help="write the run folder here (else a temporary one)")
    args = parser.parse_args()
    trials = max(1, -(-args.episodes // SEED_SCENARIOS))
    planned = trials * SEED_SCENARIOS

    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    stop = context.Event()
    server = context.Process(target=serve, args=(args.latency, ready, stop))
    server.start()
    base_url = receive(ready, server, "the mock server")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        models = work / "models.toml"
        models.write_text(
            f'[aliases.mock-agent]\nmodel = "hosted_vllm/replay"\napi_base = "{base_url}"\n'
            f'[aliases.mock-user]\nmodel = "hosted_vllm/user"\napi_base = "{base_url}"\n'
        )
        out = args.keep or work / "run"
        command = [sys.executable, "-m", "harness.cli", "run", "--model", "mock-agent", "--mode", args.mode]
        command += ["--trials", str(trials), "--concurrency", str(args.concurrency), "--out", str(out)]
        if args.mode == "conv":
            command += ["--user-model", "mock-user"]
        if args.ray:
            command += ["--ray", args.ray]
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_MODELS_FILE": str(models)}
        print(
            f"harness run: {planned} episodes ({trials} trials of the seed's {SEED_SCENARIOS} scenarios, {args.mode}) "
            f"at concurrency {args.concurrency}{', on Ray ' + args.ray if args.ray else ''}; mock model at "
            f"{args.latency * 1000:.0f} ms per request",
            flush=True,
        )
        print(HEADER)
        with (work / "run.log").open("wb") as log:
            started = time.monotonic()
            process = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT)
            counter = LineCounter(out / "results.jsonl")
            samples: list[Sample] = []
            warm: Sample | None = None
            try:
                while process.poll() is None:
                    time.sleep(min(args.interval, 1.0) if warm is None else args.interval)
                    if process.poll() is not None:
                        break
                    try:
                        row = sample(process.pid, started, counter)
                    except (FileNotFoundError, ProcessLookupError):
                        break
                    if warm is None and row.episodes >= WARM_UP_EPISODES:
                        warm = row
                    if warm is not None or not samples or row.seconds - samples[-1].seconds >= args.interval:
                        samples.append(row)
                        print_sample(row, warm)
            except KeyboardInterrupt:
                process.send_signal(signal.SIGINT)
            status = process.wait()
        elapsed = time.monotonic() - started
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        recorded = counter.count()
        distinct = len(episode_ids(out / "results.jsonl"))
        tail = (work / "run.log").read_text(errors="replace").strip().splitlines()[-1:]
    stop.set()
    server.join()

    after = [row for row in samples if warm is not None and row.episodes >= warm.episodes]
    rate = recorded / max(elapsed, 1e-9)
    print(f"exit status {status} after {elapsed:.0f} s ({rate:.1f} episodes/s): {tail[0] if tail else ''}")
    print(f"recorded {recorded} lines for {distinct} distinct episodes of {planned} planned")
    print(f"peak RSS of the harness (or of a process it started): {peak_kb / 1024:.1f} MB")
    if warm is not None and after:
        last = after[-1]
        print(
            f"after the first {warm.episodes} episodes: RSS {warm.rss_kb / 1024:.1f} MB → {last.rss_kb / 1024:.1f} MB "
            f"over {last.episodes - warm.episodes} more episodes, {per_episode_kb(warm, last)} KB per episode "
            f"(target ≤ 5); open files {min(r.open_files for r in after)}–{max(r.open_files for r in after)}; "
            f"children {min(r.children for r in after)}–{max(r.children for r in after)}; "
            f"zombies at most {max(r.zombies for r in after)}"
        )
    else:
        print(f"the run recorded fewer than {WARM_UP_EPISODES} episodes while it was watched: no per-episode figure")


if __name__ == "__main__":
    main()
