"""Scripted models of scenario and query synthesis, for tests and benchmarks.

The scenario writer answers from the seed library (its states, tasks and checks); the teacher replays the seed
reference actions; the query model picks arguments from the state and earlier results and writes and refines
requests by rule; the solver makes the calls of the chain the query model last wrote up. Each is a handler for
``harness.llm.register_python_model`` (``scripted`` registers one), so it is reached through litellm like any model.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from harness.library import load_library
from harness.llm import register_python_model
from synth.scenarios import state_text

LIBRARY = load_library()
_names = itertools.count()


def _reply(payload: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": json.dumps(payload),
        "usage": {"prompt_tokens": 1200, "completion_tokens": 400},
    }


def tool_call_reply(name: str, arguments: dict[str, Any], number: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"t{number}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        ],
        "usage": {"prompt_tokens": 900, "completion_tokens": 40},
    }


class ScriptedScenarioWriter:
    """Writes states, tasks and checks taken from the seed library: variation N gets the state and the task of
    the environment's N-th seed scenario (the N-th among those whose state the prompt shows)."""

    def __init__(self, environment_ids: list[str]):
        self.by_name = {LIBRARY.environments[e].name: e for e in environment_ids}
        self.scenarios = {e: LIBRARY.scenarios_for(e) for e in environment_ids}

    def _environment(self, text: str) -> str:
        for name, environment_id in self.by_name.items():
            if f"Environment: {name}" in text:
                return environment_id
        raise AssertionError("unknown environment in the prompt")

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        system = request["messages"][0]["content"]
        user = request["messages"][1]["content"]
        if system.startswith("You write initial states"):
            environment_id = self._environment(user)
            variation = int(re.search(r"Variation (\d+)", user).group(1))  # type: ignore[union-attr]
            scenarios = self.scenarios[environment_id]
            return _reply({"initial_state": scenarios[variation % len(scenarios)].initial_state})
        if system.startswith("You write tasks"):
            environment_id = self._environment(user)
            fitting = [s for s in self.scenarios[environment_id] if state_text(s.initial_state) in user]
            variation = int(re.search(r"task variation (\d+)", user).group(1))  # type: ignore[union-attr]
            scenario = fitting[variation % len(fitting)]
            return _reply(
                {
                    "task": scenario.task,
                    "user_profile": scenario.user_profile.model_dump() if scenario.user_profile else {},
                    "checklist": [c.description for c in scenario.checks],
                }
            )
        if system.startswith("You write check functions"):
            scenario = next(s for items in self.scenarios.values() for s in items if f"Task: {s.task}\n" in user)
            return _reply({"checks": [{"item": c.description, "source": c.source} for c in scenario.checks]})
        raise AssertionError(f"unexpected prompt: {system[:80]}")


class ScriptedTeacher:
    """Replays the seed reference actions of the scenario whose task it is given."""

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        scenario = next(s for s in LIBRARY.scenarios if s.task == task)
        done = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
        if done < len(scenario.reference_actions):
            action = scenario.reference_actions[done]
            return tool_call_reply(action.name, action.arguments, done)
        return {"role": "assistant", "content": "All done.", "usage": {"prompt_tokens": 900, "completion_tokens": 5}}


_PREVIOUS_CALL = re.compile(r"^(\d+)\. ([a-z_0-9]+)\((\{.*?\})\) -> (.*)$", re.MULTILINE)
STEP_LINE = re.compile(r"^- ([a-z_0-9]+)\((\{.*?\})\) -> ", re.MULTILINE)
_OPEN_STATUSES = ("pending", "processing", "active", "open", "confirmed", "booked", "scheduled", "available", "new")


def _line_after(prefix: str, text: str) -> str:
    return next(line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix))


def _records(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for c in state.values() if isinstance(c, dict) for r in c.values() if isinstance(r, dict)]


class ScriptedQueryModel:
    """Picks arguments the way a careful person would with no insight into the rules (reuse what earlier calls
    used or returned, prefer open records of the same person, try another record after a refusal), and writes
    and refines requests by rule."""

    def __init__(self, environment_ids: list[str]):
        self.by_name = {LIBRARY.environments[e].name: e for e in environment_ids}
        self.chain_steps: list[tuple[str, dict[str, Any]]] = []  # the calls of the chain being written up

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        system = request["messages"][0]["content"]
        user = request["messages"][1]["content"]
        if system.startswith("You write initial states"):
            environment_id = next(e for n, e in self.by_name.items() if f"Environment: {n}" in user)
            return _reply({"initial_state": LIBRARY.scenarios_for(environment_id)[0].initial_state})
        if system.startswith("You choose the arguments"):
            return _reply({"arguments": self._arguments(user)})
        if system.startswith("You turn steps"):
            if "(this is the first turn)" in user:
                self.chain_steps = []
            self.chain_steps += [(m.group(1), json.loads(m.group(2))) for m in STEP_LINE.finditer(user)]
            values = json.loads(user.split("user_values: ", 1)[1].strip())
            steps = re.findall(r"^- ([a-z_0-9]+)\(", user, re.MULTILINE)
            wording = ", then ".join(s.replace("_", " ") for s in steps)
            request_text = f"Please {wording}" + (f" for {', '.join(values)}" if values else "") + "."
            return _reply({"subgoals": [s.replace("_", " ") for s in steps], "request": request_text})
        if "refinement rule" in system:
            return _reply({"request": self._refine(system, user)})
        raise AssertionError(f"unexpected prompt: {system[:80]}")

    def _refine(self, system: str, user: str) -> str:
        text = user.split("Request: ", 1)[1].split("\n\nContext: ", 1)[0]
        context = json.loads(user.split("\n\nContext: ", 1)[1])
        keep = context["must_keep"]
        if "implicit reference" in system:
            for value in context["refer_to_implicitly"]:
                text = re.sub(re.escape(value), "the one from before", text, flags=re.IGNORECASE)
            return text
        if "action compression" in system:
            wanted = [step["name"].replace("_", " ") for step in context["steps"] if step["changes_state"]]
            goal = " and ".join(wanted) or "look into this"
            return f"Please {goal}" + (f" for {', '.join(keep)}" if keep else "") + "."
        if "ambiguity injection" in system:
            for value in context["may_be_vague"]:
                if value not in keep:
                    text = re.sub(re.escape(value), "the relevant one", text, flags=re.IGNORECASE)
            return text
        return "I'm sorting out my account this week, so here is what I need. " + text

    def _arguments(self, user: str) -> dict[str, Any]:
        tool = json.loads(_line_after("Tool: ", user))
        bindings = json.loads(_line_after("Input bindings: ", user))
        state = json.loads(user.split("Current state:\n", 1)[1].split("\nThe previous choice", 1)[0])
        previous = {int(m.group(1)): (json.loads(m.group(3)), m.group(4)) for m in _PREVIOUS_CALL.finditer(user)}
        refused = re.findall(r"The previous choice (\{.*?\}) failed", user)
        attempt = len(refused)
        used: dict[str, Any] = {}
        for arguments, _ in previous.values():
            used.update(arguments)
        properties = tool["parameters"].get("properties", {})
        required = set(tool["parameters"].get("required", []))
        chosen: dict[str, Any] = {}
        for name, prop in properties.items():
            binding = bindings.get(name, "given by the user")
            if (binding.startswith("optional") and not attempt) or (name not in required and name not in bindings):
                continue
            bound = re.match(r"from call (\d+)", binding)
            candidates: list[Any] = []
            if bound:
                arguments, result = previous[int(bound.group(1))]
                candidates += re.findall(rf'"{re.escape(name)}": "([^"]+)"', result)
            if name in used:
                candidates.insert(0, used[name])
            owner_ids = {v for k, v in used.items() if k.endswith("_id")}
            field = (
                name
                if any(name in r for r in _records(state))
                else next((f for r in _records(state) for f in r if f.endswith("_id") and name.endswith("_" + f)), name)
            )
            records = [r for r in _records(state) if field in r]
            records.sort(
                key=lambda r: (not (owner_ids & set(map(str, r.values()))), str(r.get("status")) not in _OPEN_STATUSES)
            )
            candidates += [r[field] for r in records]
            candidates = [c for i, c in enumerate(candidates) if c not in candidates[:i]]
            if name == "items" and isinstance(state.get("products"), dict):
                stocked = [p for p in state["products"].values() if p.get("stock", 0) > 0]
                product = stocked[attempt % len(stocked)]
                line = {"product_id": product["product_id"], "quantity": 1}
                chosen[name] = {product["product_id"]: 1} if prop.get("type") == "object" else [line]
            elif not candidates and name not in required:
                continue
            elif candidates:
                chosen[name] = candidates[min(attempt, len(candidates) - 1)]
            elif "enum" in prop:
                chosen[name] = prop["enum"][attempt % len(prop["enum"])]
            elif prop.get("type") == "integer":
                chosen[name] = 1
            elif prop.get("type") == "number":
                chosen[name] = 10.0
            elif prop.get("type") == "boolean":
                chosen[name] = True
            elif prop.get("type") == "array":
                chosen[name] = []
            elif "date" in name:
                chosen[name] = state.get("current_date", "2025-06-20")
            else:
                chosen[name] = "no longer needed" if name == "reason" else f"12 New Street, Springfield ({name})"
        return chosen


class ScriptedSolver:
    """A solver that makes the calls of the chain the query model last wrote up (chains run one at a time), or,
    when ``gives_up``, answers without calling any tool."""

    def __init__(self, query_model: ScriptedQueryModel, gives_up: bool = False):
        self.query_model = query_model
        self.gives_up = gives_up
        self.seeds: set[Any] = set()

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.seeds.add(request.get("seed"))
        done = sum(1 for m in request["messages"] if m["role"] == "assistant" and m.get("tool_calls"))
        steps = [] if self.gives_up else self.query_model.chain_steps
        if done < len(steps):
            return tool_call_reply(*steps[done], done)
        return {
            "role": "assistant",
            "content": "I could not do that.",
            "usage": {"prompt_tokens": 9, "completion_tokens": 5},
        }


def scripted(handler: Any) -> str:
    """Register ``handler`` as a fresh python model; returns its model string."""
    name = f"scen-{next(_names)}"
    register_python_model(name, handler)
    return f"python/{name}"
