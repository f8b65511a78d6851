"""What τ-bench's and ACEBench's own runners send a model, next to what ``harness run`` sends, field by field.

    python bench/wire_parity.py --taubench DIR --acebench DIR [--tasks 2] [--keep FOLDER]

``DIR`` are real checkouts (sierra-research/tau-bench, chenchen0103/ACEBench). Their own agent and user code runs
in a venv of its own (``litellm``, ``openai`` and what ACEBench's inference imports, from PyPI; built once and cached
under ``~/.cache/envharness``), never in this process; ``harness import`` + ``harness run`` run in subprocesses.
Both talk to one recording OpenAI-compatible server on 127.0.0.1 (``tests/doubles/mock_openai.py``) whose
scripted replies are the same for both runners, so the two conversations are the same and every request can be
paired with the other runner's:

- τ-bench (``--rules taubench``, ``--agent function_calling``), airline's first ``--tasks`` test tasks, driven as
  ``run.py`` drives them (``RunConfig`` defaults, ``agent_factory``, ``get_env``, ``agent.solve``): the user says
  two lines and then ``###STOP###``; the agent makes the task's first gold call and then answers with text.
- ACEBench (``--rules acebench-text``, ``--agent acebench-text``), en multi_turn's first ``--tasks`` tasks driven
  by ``APIModelInference.multi_turn_inference`` as ``generate.py`` calls it: the agent asks a question, makes the
  task's first milestone call, then says "finish conversation"; the user says two lines.

For each role it prints: the number of requests, the system prompt, the messages' roles and contents, the tools,
``tool_choice`` and every other key of the request body (the sampling parameters), equal or how they differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.doubles.mock_openai import (  # noqa: E402
    MockOpenAIServer,
    PolicyRequest,
    ReplayPolicy,
    SimulatedUserPolicy,
)
from tests.support.cached_venv import cached_venv  # noqa: E402

VENV_NAME = f"wire-parity-py{sys.version_info[0]}{sys.version_info[1]}"
VENV_INSTALLS = [["litellm", "openai", "tqdm", "python-dotenv", "wcwidth"]]
BODY_KEYS = ("model", "messages", "tools", "tool_choice")
TB_USER_LINES = ["Hi, I need some help with a reservation.", "That is all I can tell you."]
ACE_USER_LINES = ["Hello, I have something to get done.", "Please go ahead with what I asked."]
ACE_QUESTION = "Could you tell me exactly what you need?"
FINISH = "finish conversation"

TAUBENCH_DRIVER = """
import sys
from tau_bench.envs import get_env
from tau_bench.run import agent_factory
from tau_bench.types import RunConfig

env_name, index, agent_model, user_model = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
config = RunConfig(model_provider="openai", user_model_provider="openai", model=agent_model, user_model=user_model,
                   env=env_name)
env = get_env(config.env, user_strategy=config.user_strategy, user_model=config.user_model,
              task_split=config.task_split, user_provider=config.user_model_provider, task_index=index)
agent = agent_factory(tools_info=env.tools_info, wiki=env.wiki, config=config)
result = agent.solve(env=env, task_index=index)
print("reward", result.reward)
"""

ACEBENCH_DRIVER = """
import json, sys
from model_inference.apimodel_inference import APIModelInference

data, index, agent_model, user_model = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
test_case = [json.loads(line) for line in open(data, encoding="utf-8") if line.strip()][index]
# generate.py: inference_map[model](model, model_path, temperature, top_p, max_tokens, max_dialog_turns, user_model,
# language), its argparse defaults, then inference(question, functions, time="", profile="", test_case, id).
handler = APIModelInference(agent_model, None, 0.7, 1, 1200, 40, user_model, "en")
functions = test_case["function"]
if isinstance(functions, (dict, str)):
    functions = [functions]
handler.inference(test_case["question"], functions, "", "", test_case, test_case["id"])
"""


@dataclass
class AceStepScript:
    """ACEBench's multi_step text agent, scripted: makes ``call``, then finishes (by how many execution results
    the history holds)."""

    call: str

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        history = request.messages[-1].get("content") or ""
        return {"role": "assistant", "content": FINISH if "execution result:" in history else self.call}


@dataclass
class AceAgentScript:
    """ACEBench's text agent, scripted: asks, makes ``call``, then finishes (by how many ``agent:`` lines the
    history holds)."""

    call: str

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        history = request.messages[-1].get("content") or ""
        said = history.count("\nagent:") + history.startswith("agent:")
        replies = [ACE_QUESTION, self.call, FINISH]
        return {"role": "assistant", "content": replies[min(said, len(replies) - 1)]}


def run(command: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 1800) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise SystemExit(f"{' '.join(command[:4])} … failed ({done.returncode}):\n{tail}")
    return done.stdout


def harness_env(extra: dict[str, str]) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "COLUMNS": "200", **extra}


def harness(*args: str, env: dict[str, str] | None = None) -> str:
    return run([sys.executable, "-m", "harness.cli", *args], harness_env(env or {}))


def models_file(folder: Path, server: MockOpenAIServer, names: list[str]) -> Path:
    """The aliases of ``names`` on ``server`` (and a fresh ``folder/out`` for the run)."""
    shutil.rmtree(folder / "out", ignore_errors=True)
    lines = []
    for name in names:
        lines += [f'[aliases."{name}"]', f'model = "hosted_vllm/{name}"', f'api_base = "{server.base_url}"']
    path = folder / "models.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def upstream(python: Path, checkout: Path, driver: str, args: list[str], cwd: Path, server: MockOpenAIServer) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)},
        "PYTHONPATH": str(checkout),
        "OPENAI_API_KEY": "wire-parity",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_BASE": server.base_url,
        "GPT_API_KEY": "wire-parity",
        "GPT_AGENT_API_KEY": "wire-parity",
        "GPT_BASE_URL": server.base_url,
        "GPT_AGENT_BASE_URL": server.base_url,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    run([str(python), "-c", driver, *args], env, cwd=cwd)


# ------------------------------------------------------------------------------------------------ comparison


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def first_difference(a: str, b: str) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"first difference at char {at}: upstream {a[at : at + 50]!r} / harness {b[at : at + 50]!r}"


def shown(value: Any) -> str:
    return "absent" if value is _ABSENT else json.dumps(value, ensure_ascii=False)[:80]


_ABSENT = object()


def compare_role(label: str, theirs: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[str]:
    """One line per field of ``label``'s requests: equal, or where and how they differ."""
    lines = [f"{label}: {len(theirs)} requests upstream, {len(ours)} harness"]
    pairs = list(zip(theirs, ours, strict=False))

    def field(name: str, verdicts: list[str]) -> None:
        lines.append(f"  {name:<22} {verdicts[0] if len(set(verdicts)) == 1 else '; '.join(dict.fromkeys(verdicts))}")

    systems = []
    for a, b in pairs:
        sa = a["messages"][0]["content"] if a["messages"][0].get("role") == "system" else None
        sb = b["messages"][0]["content"] if b["messages"][0].get("role") == "system" else None
        if sa == sb:
            systems.append(f"equal ({len(sa or '')} chars, sha256 {digest(sa or '')})")
        elif sa is None or sb is None:
            systems.append(
                f"differ: upstream {'no' if sa is None else 'a'} system prompt, harness {'no' if sb is None else 'a'}"
            )
        else:
            systems.append(f"DIFFER ({len(sa)} vs {len(sb)} chars; {first_difference(sa, sb)})")
    field("system prompt", systems or ["no pairs"])
    roles = []
    contents = []
    for number, (a, b) in enumerate(pairs, 1):
        ra, rb = [m.get("role") for m in a["messages"]], [m.get("role") for m in b["messages"]]
        roles.append("equal" if ra == rb else f"DIFFER in request {number}: upstream {ra} / harness {rb}")
        verdict = "equal"
        for index, (ma, mb) in enumerate(zip(a["messages"], b["messages"], strict=False)):
            if ma == mb:
                continue
            keys = sorted(set(ma) | set(mb))
            diffs = [
                f"{k}: upstream {shown(ma.get(k, _ABSENT))} / harness {shown(mb.get(k, _ABSENT))}"
                for k in keys
                if ma.get(k, _ABSENT) != mb.get(k, _ABSENT)
            ]
            verdict = f"DIFFER in request {number} message {index} ({ma.get('role')}): " + "; ".join(diffs)
            break
        contents.append(verdict)
    field("message roles/order", roles or ["no pairs"])
    field("message contents", contents or ["no pairs"])
    for key in ("tools", "tool_choice"):
        verdicts = []
        for a, b in pairs:
            va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
            if va == vb:
                verdicts.append(
                    "equal"
                    + (f" ({len(va)} tools)" if key == "tools" and va is not _ABSENT else "")
                    + (" (absent in both)" if va is _ABSENT else "")
                )
            else:
                verdicts.append(f"DIFFER: upstream {shown(va)} / harness {shown(vb)}")
        field(key, verdicts or ["no pairs"])
    sampling = sorted({k for body in theirs + ours for k in body} - set(BODY_KEYS))
    for key in sampling:
        verdicts = []
        for a, b in pairs:
            va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
            verdicts.append(("equal: " if va == vb else "DIFFER: ") + f"upstream {shown(va)} / harness {shown(vb)}")
        field(key, verdicts or ["no pairs"])
    return lines


def bodies(server: MockOpenAIServer, model: str) -> list[dict[str, Any]]:
    return [r.body for r in server.chat_requests(model) if r.body]


# ------------------------------------------------------------------------------------------------ τ-bench


def taubench(checkout: Path, python: Path, server: MockOpenAIServer, work: Path, tasks: int) -> list[str]:
    library = work / "tb-airline"
    if not library.exists():
        harness("import", "taubench", "--source", str(checkout), "--domain", "airline", "--out", str(library))
    records = [json.loads(line) for line in (library / "scenarios" / "taubench-airline.jsonl").read_text().splitlines()]
    by_index = {
        int(r["provenance"]["details"]["task_index"]): r
        for r in records
        if r["provenance"]["details"]["split"] == "test"
    }
    out: list[str] = []
    for index in range(tasks):
        record = by_index[index]
        gold = [{"name": a["name"], "arguments": a["arguments"]} for a in record["reference_actions"][:1]]
        names = {role: {side: f"tb-{side}-{role}-{index}" for side in ("up", "h")} for role in ("agent", "user")}
        for side in ("up", "h"):
            server.set_policy(names["agent"][side], ReplayPolicy(actions=gold, final_text="I have looked into it."))
            server.set_policy(names["user"][side], SimulatedUserPolicy(turns=TB_USER_LINES))
        upstream(
            python,
            checkout,
            TAUBENCH_DRIVER,
            ["airline", str(index), names["agent"]["up"], names["user"]["up"]],
            work,
            server,
        )
        folder = work / f"tb-run-{index}"
        folder.mkdir(exist_ok=True)
        models = models_file(folder, server, [names["agent"]["h"], names["user"]["h"]])
        harness(
            "run",
            "--envs",
            str(library),
            "--out",
            str(folder / "out"),
            "--mode",
            "conv",
            "--rules",
            "taubench",
            "--agent",
            "function_calling",
            "--model",
            names["agent"]["h"],
            "--user-model",
            names["user"]["h"],
            "--scenario",
            record["id"],
            "--concurrency",
            "1",
            env={"HARNESS_MODELS_FILE": str(models)},
        )
        theirs_user = bodies(server, names["user"]["up"])
        # LLMUserSimulationEnv.__init__ calls reset() without an instruction: one request whose reply is dropped,
        # made when get_env builds the env, before the task's reset.
        construction = theirs_user.pop(0)
        out.append(
            f"τ-bench airline test {index}, user: upstream's construction-time request (no instruction; reply "
            f"dropped), not made by harness: {[m['role'] for m in construction['messages']]}"
        )
        out += compare_role(
            f"τ-bench airline test {index}, agent",
            bodies(server, names["agent"]["up"]),
            bodies(server, names["agent"]["h"]),
        )
        out += compare_role(f"τ-bench airline test {index}, user", theirs_user, bodies(server, names["user"]["h"]))
    return out


# ------------------------------------------------------------------------------------------------ ACEBench


def acebench(
    checkout: Path, python: Path, server: MockOpenAIServer, work: Path, tasks: int, category: str = "multi_turn"
) -> list[str]:
    multi_turn = category == "multi_turn"
    library = work / ("ace-mt-en" if multi_turn else "ace-ms-en")
    if not library.exists():
        harness(
            "import",
            "acebench",
            "--source",
            str(checkout),
            "--category",
            category,
            "--language",
            "en",
            "--out",
            str(library),
        )
    data = checkout / "data_all" / "data_en" / f"data_agent_{category}.json"
    answers = checkout / "data_all" / "data_en" / "possible_answer" / f"data_agent_{category}.json"
    milestones = {
        json.loads(line)["id"]: json.loads(line)["mile_stone"]
        for line in answers.read_text().splitlines()
        if line.strip()
    }
    cases = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    out: list[str] = []
    indices = list(range(tasks))
    if multi_turn:  # and the first task of Travel's user variant
        indices.append(next(i for i, c in enumerate(cases) if "BaseApi" not in c["involved_classes"]))
    for index in indices:
        case = cases[index]
        first = milestones[case["id"]][0]
        call = first[0] if isinstance(first, list) else first
        tag = "mt" if multi_turn else "ms"
        names = {role: {side: f"gpt-{side}-{tag}-{role}-{index}" for side in ("up", "h")} for role in ("agent", "user")}
        for side in ("up", "h"):
            server.set_policy(names["agent"][side], AceAgentScript(call) if multi_turn else AceStepScript(call))
            server.set_policy(names["user"][side], SimulatedUserPolicy(turns=ACE_USER_LINES, stop_token=FINISH))
        runs = work / f"ace-upstream-{tag}-{index}"
        runs.mkdir(exist_ok=True)
        upstream(
            python,
            checkout,
            ACEBENCH_DRIVER,
            [str(data), str(index), names["agent"]["up"], names["user"]["up"]],
            runs,
            server,
        )
        folder = work / f"ace-run-{tag}-{index}"
        folder.mkdir(exist_ok=True)
        models = models_file(folder, server, [names["agent"]["h"], names["user"]["h"]])
        scenario = f"acebench-{category.replace('_', '-')}-en-{case['id'].rsplit('_', 1)[-1]}"
        conversation = ["--mode", "conv", "--user-model", names["user"]["h"]] if multi_turn else ["--mode", "nonconv"]
        harness(
            "run",
            "--envs",
            str(library),
            "--out",
            str(folder / "out"),
            *conversation,
            "--rules",
            "acebench-text",
            "--agent",
            "acebench-text",
            "--model",
            names["agent"]["h"],
            "--scenario",
            scenario,
            "--concurrency",
            "1",
            env={"HARNESS_MODELS_FILE": str(models)},
        )
        classes = ",".join(case["involved_classes"])
        for role in ("agent", "user") if multi_turn else ("agent",):
            out += compare_role(
                f"ACEBench en {category} {index} ({classes}), {role}",
                bodies(server, names[role]["up"]),
                bodies(server, names[role]["h"]),
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--taubench", type=Path, help="a tau-bench checkout")
    parser.add_argument("--acebench", type=Path, help="an ACEBench checkout")
    parser.add_argument("--tasks", type=int, default=2, help="tasks per benchmark (default 2)")
    parser.add_argument("--keep", type=Path, help="keep the libraries, runs and request bodies in this folder")
    args = parser.parse_args()
    if args.taubench is None and args.acebench is None:
        parser.error("give --taubench DIR and/or --acebench DIR")
    for name in ("taubench", "acebench"):
        path = getattr(args, name)
        if path is not None and not path.is_dir():
            parser.error(f"--{name} {path}: not a folder")
    venv = cached_venv(VENV_NAME, VENV_INSTALLS)
    work = args.keep or Path(tempfile.mkdtemp(prefix="wire-parity-"))
    work.mkdir(parents=True, exist_ok=True)
    server = MockOpenAIServer()
    lines: list[str] = []
    with server.running_in_thread():
        if args.taubench is not None:
            lines += taubench(args.taubench.resolve(), venv.python, server, work, args.tasks)
        if args.acebench is not None:
            lines += acebench(args.acebench.resolve(), venv.python, server, work, args.tasks)
            lines += acebench(args.acebench.resolve(), venv.python, server, work, 1, "multi_step")
        requests = {}
        for record in server.chat_requests():
            requests.setdefault(record.model, []).append(record.body)
        (work / "requests.json").write_text(json.dumps(requests, ensure_ascii=False, indent=1))
    print("\n".join(lines))
    print(f"(request bodies: {work / 'requests.json'})")


if __name__ == "__main__":
    main()
