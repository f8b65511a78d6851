"""Score a τ-bench results file (``harness export taubench``) as upstream would have: replay each record's
conversation through an ``Env`` of the checkout and take the reward upstream's tool-calling agent loop ends with.

    python tests/support/taubench_scorer.py --checkout DIR --domain D --split S --results FILE [--official]

Each record's ``traj`` is replayed as ``ToolCallingAgent.solve`` plays a conversation: ``Env.reset`` gives the
user's first message (never an ending), then each assistant message becomes one action (its first tool call, else a
``respond`` with its text) for ``Env.step``, at most 30 of them. A ``respond`` is answered by the transcript's next
user message; the conversation ends only when ``Env.step`` says ``done`` (``###STOP###`` in the user's message, or a
terminate tool), and its reward is then ``calculate_reward``'s; a transcript that stops before that is one upstream
would have gone on with, rewarded 0 as its loop's last step is.

``--official`` imports the checkout's own ``tau_bench`` (``get_env``, ``Env.step``, ``calculate_reward``,
``message_to_action``): run it with a Python that has ``litellm`` and ``pydantic`` (``tests/support/taubench_venv.py``).
Without it, an ``Env`` written here from upstream's rules does the same over the checkout's own tools, data and
tasks: for the made-up checkout of ``tests/support/taubench_checkout.py``, which has no ``Env`` of its own. It
imports nothing of this project, so that it runs in the scorer's own venv.

Prints one JSON object: per record its ``task_id``, ``trial``, the ``reward`` it gets, how the replay ``ended``
(``user_stop``, ``terminate_tool``, ``transcript_ends``, ``max_steps``, ``agent_error``) and the tool results that
differ from the transcript's (``tool_mismatches``).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import sys
from collections.abc import Callable
from hashlib import sha256
from pathlib import Path
from typing import Any

STOP = "###STOP###"
RESPOND = "respond"
MAX_STEPS = 30  # ToolCallingAgent.solve's max_num_steps


class TranscriptEnds(Exception):
    """The user is asked to speak and the transcript holds no further message of the user."""


class ReplayUser:
    """Upstream's user interface (``reset``, ``step``, ``get_total_cost``) answering with a transcript's user
    messages, in order."""

    def __init__(self, said: list[str]) -> None:
        self.said = list(said)

    def reset(self, instruction: str | None = None) -> str:
        return self._next()

    def step(self, content: str) -> str:
        return self._next()

    def get_total_cost(self) -> float:
        return 0.0

    def _next(self) -> str:
        if not self.said:
            raise TranscriptEnds
        return self.said.pop(0)


class Action:
    """``tau_bench.types.Action`` for the rules' Env (name and kwargs)."""

    def __init__(self, name: str, kwargs: dict[str, Any]) -> None:
        self.name = name
        self.kwargs = kwargs


def message_action(message: dict[str, Any]) -> Action:
    """The first tool call of the message, else a reply with its text (``json.loads`` of the arguments raises on
    text that is not JSON, as upstream's does)."""
    calls = message.get("tool_calls") or []
    if calls and calls[0].get("function") is not None:
        function = calls[0]["function"]
        return Action(function["name"], json.loads(function["arguments"]))
    return Action(RESPOND, {"content": message.get("content")})


def hashable(item: Any) -> Any:
    if isinstance(item, dict):
        return tuple((key, hashable(value)) for key, value in sorted(item.items()))
    if isinstance(item, list):
        return tuple(hashable(element) for element in item)
    return item


class RulesEnv:
    """Upstream's ``Env`` rules over a checkout's tools, data and tasks: ``step`` answers tools (an exception as
    ``Error: <message>``, an unknown name as ``Unknown action <name>``) and ends on ``###STOP###`` in the user's
    reply or a terminate tool; the reward compares the data's hash with the gold's replay and looks for each
    output in the replies (lower case, commas removed)."""

    def __init__(self, checkout: Path, domain: str, split: str) -> None:
        sys.path.insert(0, str(checkout))
        envs = checkout / "tau_bench" / "envs" / domain
        self.tools = {
            tool.get_info()["function"]["name"]: tool
            for tool in importlib.import_module(f"tau_bench.envs.{domain}.tools").ALL_TOOLS
        }
        data = importlib.import_module(f"tau_bench.envs.{domain}.data")
        self.load_data: Callable[[], dict[str, Any]] = data.load_data
        self.tasks = _tasks(envs / f"tasks_{split}.py")
        self.terminate_tools = _terminate_tools(envs / "env.py")
        self.user: Any = None
        self.data: dict[str, Any] = {}
        self.task: dict[str, Any] = {}
        self.actions: list[Action] = []

    def reset(self, task_index: int) -> Any:
        self.data = self.load_data()
        self.task = self.tasks[task_index]
        self.actions = []
        return self.user.reset(instruction=self.task["instruction"])

    def step(self, action: Action) -> Any:
        self.actions.append(action)
        done = False
        if action.name == RESPOND:
            observation = self.user.step(action.kwargs["content"])
            done = STOP in observation
        elif action.name in self.tools:
            try:
                observation = self.tools[action.name].invoke(data=self.data, **action.kwargs)
            except Exception as e:
                observation = f"Error: {e}"
            done = action.name in self.terminate_tools
        else:
            observation = f"Unknown action {action.name}"
        return argparse.Namespace(observation=observation, done=done, reward=self.reward() if done else 0.0)

    def data_hash(self) -> str:
        return sha256(str(hashable(self.data)).encode("utf-8")).hexdigest()

    def reward(self) -> float:
        reached = self.data_hash()
        self.data = self.load_data()
        for gold in self.task["actions"]:
            if gold["name"] not in self.terminate_tools:
                self.step(Action(gold["name"], gold["kwargs"]))
        reward = 1.0 if reached == self.data_hash() else 0.0
        replies = [str(a.kwargs["content"]) for a in self.actions if a.name == RESPOND]
        for output in self.task["outputs"]:
            if not any(output.lower() in reply.lower().replace(",", "") for reply in replies):
                reward = 0.0
        return reward


def _keywords(node: ast.expr) -> dict[str, Any]:
    assert isinstance(node, ast.Call)
    return {k.arg: k.value for k in node.keywords if k.arg is not None}


def _tasks(path: Path) -> list[dict[str, Any]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    listed = [n.value for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign) and isinstance(n.value, ast.List)]
    tasks = []
    for element in listed[-1].elts:
        fields = _keywords(element)
        actions = [
            {
                "name": ast.literal_eval(_keywords(a)["name"]),
                "kwargs": ast.literal_eval(_keywords(a)["kwargs"]) if "kwargs" in _keywords(a) else {},
            }
            for a in fields["actions"].elts  # type: ignore[attr-defined]
        ]
        tasks.append(
            {
                "instruction": ast.literal_eval(fields["instruction"]),
                "actions": actions,
                "outputs": ast.literal_eval(fields["outputs"]),
            }
        )
    return tasks


def _terminate_tools(path: Path) -> list[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "terminate_tools" for t in node.targets
        ):
            return [str(name) for name in ast.literal_eval(node.value)]
    return []


def replay(env: Any, to_action: Callable[[dict[str, Any]], Any], record: dict[str, Any]) -> dict[str, Any]:
    """One record's conversation through ``env``, as ``ToolCallingAgent.solve`` would have played it."""
    traj = record["traj"]
    env.user = ReplayUser([m["content"] for m in traj if m.get("role") == "user"])
    outcome: dict[str, Any] = {"task_id": record["task_id"], "trial": record["trial"], "tool_mismatches": 0}
    env.reset(task_index=record["task_id"])
    reward, ended = 0.0, "transcript_ends"
    agent = [(i, m) for i, m in enumerate(traj) if m.get("role") == "assistant"]
    for step, (position, message) in enumerate(agent):
        if step == MAX_STEPS:
            ended = "max_steps"
            break
        try:
            action = to_action(message)
        except Exception:
            ended = "agent_error"  # run.py records a raising solve with reward 0
            break
        try:
            response = env.step(action)
        except TranscriptEnds:
            break
        follow = traj[position + 1] if position + 1 < len(traj) else None
        if action.name != RESPOND and (follow is None or follow.get("content") != response.observation):
            outcome["tool_mismatches"] += 1
        reward = response.reward
        if response.done:
            ended = "user_stop" if action.name == RESPOND else "terminate_tool"
            break
    outcome.update(reward=float(reward), ended=ended)
    return outcome


def official_env(checkout: Path, domain: str, split: str) -> tuple[Any, Callable[[dict[str, Any]], Any]]:
    sys.path.insert(0, str(checkout))
    from tau_bench.agents.tool_calling_agent import message_to_action
    from tau_bench.envs import get_env

    # The human user strategy asks no model at construction; the replay user replaces it.
    env = get_env(domain, user_strategy="human", user_model="none", task_split=split, task_index=0)
    return env, message_to_action


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--domain", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--official", action="store_true", help="use the checkout's own tau_bench")
    args = parser.parse_args()
    records = json.loads(args.results.read_text(encoding="utf-8"))
    if args.official:
        env, to_action = official_env(args.checkout, args.domain, args.split)
    else:
        env, to_action = RulesEnv(args.checkout, args.domain, args.split), message_action
    scored = [replay(env, to_action, record) for record in records]
    print(json.dumps({"official": args.official, "records": scored}))


if __name__ == "__main__":
    main()
