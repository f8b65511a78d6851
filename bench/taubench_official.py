"""Score our τ-bench exports with upstream's own ``calculate_reward``, on a real checkout of sierra-research/tau-bench.

    python bench/taubench_official.py --checkout /path/to/tau-bench [--domains retail airline] [--work DIR]

For each domain's test split: ``harness import taubench`` (every task), an oracle run (``--agent oracle
--user-model oracle-user``) and scripted imperfect runs (the mock OpenAI server replays each task's gold with one
kind of mistake, and a mock user states the task then stops), each ``harness export taubench``-ed and replayed by
``tests/support/taubench_scorer.py --official``: the checkout's own ``get_env``, ``Env.step``, ``calculate_reward``
and ``message_to_action``, in a venv of ``litellm`` and ``pydantic`` from PyPI (``tests/support/taubench_venv.py``),
with the checkout on ``PYTHONPATH``. Prints per domain and run how many tasks score 1.0 by us and by upstream, and
how many records agree, by (ours, upstream's) reward and by how upstream's replay ended. Exits 1 when the oracle
misses 1.0 under upstream's scorer for some task, or any record's rewards differ.

The scripted runs: ``drop-last`` leaves out the gold's last action; ``no-outputs`` plays the whole gold and then
says nothing of the outputs the user must be told; ``repeat-last`` plays the gold's last action twice (a write
twice is a different state, a read twice is not).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from harness.library import load_library  # noqa: E402
from harness.schema import Scenario  # noqa: E402
from tests.doubles.mock_openai import MockOpenAIServer  # noqa: E402
from tests.support.taubench_venv import taubench_venv  # noqa: E402

SCORER = HERE / "tests" / "support" / "taubench_scorer.py"
ORACLE = ["--agent", "oracle", "--user-model", "oracle-user"]
MODELS = ["--agent", "function_calling", "--model", "mock-agent", "--user-model", "mock-user"]


def gold(scenario: Scenario) -> list[dict[str, Any]]:
    return [{"name": a.name, "arguments": a.arguments} for a in scenario.reference_actions]


VARIANTS: dict[str, Callable[[Scenario], tuple[list[dict[str, Any]], str]]] = {
    "drop-last": lambda s: (gold(s)[:-1], s.reference_reply or "Done."),
    "no-outputs": lambda s: (gold(s), "Done."),
    "repeat-last": lambda s: (gold(s) + gold(s)[-1:], s.reference_reply or "Done."),
}


def harness(*args: str, env: dict[str, str] | None = None) -> None:
    command = [sys.executable, "-m", "harness.cli", *args]
    done = subprocess.run(command, cwd=HERE, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"harness {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def official_scores(python: Path, checkout: Path, domain: str, exported: Path) -> list[dict[str, Any]]:
    command = [str(python), str(SCORER), "--checkout", str(checkout), "--domain", domain, "--split", "test"]
    command += ["--results", str(exported), "--official"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    if done.returncode != 0:
        raise SystemExit(f"upstream's scorer failed on {exported}: {done.stderr.strip()[-2000:]}")
    records: list[dict[str, Any]] = json.loads(done.stdout)["records"]
    return records


def compare(label: str, exported: Path, scored: list[dict[str, Any]]) -> dict[str, Any]:
    ours = json.loads(exported.read_text(encoding="utf-8"))
    pairs = Counter((record["reward"], result["reward"]) for record, result in zip(ours, scored, strict=True))
    agree = sum(count for (a, b), count in pairs.items() if a == b)
    line = {
        "run": label,
        "records": len(ours),
        "ours_1": sum(1 for r in ours if r["reward"] == 1.0),
        "upstream_1": sum(1 for r in scored if r["reward"] == 1.0),
        "agree": agree,
        "pairs": {f"{a:g}/{b:g}": n for (a, b), n in sorted(pairs.items())},
        "ended": dict(Counter(r["ended"] for r in scored)),
        "tool_mismatches": sum(r["tool_mismatches"] for r in scored),
        "differ": [r["task_id"] for r, s in zip(ours, scored, strict=True) if r["reward"] != s["reward"]],
    }
    print(
        f"  {label:<12} records {line['records']:>3} · 1.0 ours {line['ours_1']:>3} upstream {line['upstream_1']:>3}"
        f" · agree {agree}/{len(ours)} · (ours/upstream) {line['pairs']} · upstream ended {line['ended']}"
        f" · tool results differing {line['tool_mismatches']}",
        flush=True,
    )
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", type=Path, required=True, help="a git clone of sierra-research/tau-bench")
    parser.add_argument("--domains", nargs="+", default=["retail", "airline"])
    parser.add_argument("--work", type=Path, default=Path("taubench-official"), help="folder for libraries and runs")
    parser.add_argument("--reuse", action="store_true", help="keep a library, run or export already in --work")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    checkout, work = args.checkout.resolve(), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    python = taubench_venv().python
    server = MockOpenAIServer(record_bodies=False)
    summary: dict[str, list[dict[str, Any]]] = {}
    ok = True
    with server.running_in_thread():
        models = work / "models.toml"
        models.write_text(
            f'[aliases.mock-agent]\nmodel = "hosted_vllm/replay"\napi_base = "{server.base_url}"\n'
            f'[aliases.mock-user]\nmodel = "hosted_vllm/user"\napi_base = "{server.base_url}"\n'
        )
        env = {"HARNESS_MODELS_FILE": str(models)}
        for domain in args.domains:
            library = work / f"{domain}-library"
            if not (args.reuse and library.is_dir()):
                harness("import", "taubench", "--source", str(checkout), "--domain", domain, "--out", str(library))
            scenarios = load_library(library).scenarios
            print(f"{domain}/test: {len(scenarios)} tasks imported", flush=True)
            lines = []
            for name in ["oracle", *args.variants]:
                out, exported = work / f"{domain}-{name}", work / f"{domain}-{name}.json"
                if not (args.reuse and exported.is_file()):
                    flags = ORACLE
                    if name != "oracle":
                        flags = MODELS
                        server.replays.clear()
                        server.replay_replies.clear()
                        server.user_scripts.clear()
                        for scenario in scenarios:
                            actions, reply = VARIANTS[name](scenario)
                            # The user says the task (a message's outer spaces are not kept), the agent knows it.
                            said = scenario.task.strip()
                            server.register_replay(said, actions, reply)
                            server.register_user(said, [said])
                    common = ["--mode", "conv", "--rules", "taubench", "--concurrency", str(args.concurrency)]
                    harness("run", "--envs", str(library), "--out", str(out), *common, *flags, env=env)
                    harness("export", "taubench", str(out), "--out", str(exported))
                line = compare(name, exported, official_scores(python, checkout, domain, exported))
                lines.append(line)
                ok = ok and not line["differ"] and (name != "oracle" or line["upstream_1"] == len(scenarios))
            summary[domain] = lines
    (work / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
