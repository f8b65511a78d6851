"""A scripted model that plays every role of environment synthesis, for tests and benchmarks.

Registered with ``harness.llm.register_python_model`` it is reached through litellm like any model. It
recognises its role from the first line of the system prompt, builds a parking-permit office environment,
and can be told to write faulty methods (syntax error, forbidden import, signature mismatch, a method that
breaks the rules) so that every gate of the pipeline can be exercised. It counts its calls per role.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

Fault = Literal["syntax", "forbidden_import", "signature", "buggy", "not_json", "undefined_name"]

ROLE_MARKERS = {
    "You are the task filter": "filter",
    "You are the environment inferrer": "infer",
    "You are the planner": "plan",
    "You are the programmer": "method",
    "You are the data generator": "initial_state",
    "You are the testing agent": "tester",
    "You are the checking agent": "checker",
}
STATEFUL_WORDS = ("permit", "parking")
DISTRICT = re.compile(r"district (\d+)", re.IGNORECASE)

RULES = [
    "A vehicle plate can hold at most one active permit.",
    "Permits are issued for zone A, B or C only.",
    "Only active or suspended permits can be cancelled; a cancelled permit stays cancelled.",
]

GET_PERMIT = '''def get_permit(self, permit_id: str) -> dict:
    """Look up one permit by its id.

    Args:
        permit_id: The permit's id, e.g. "P-1".

    Returns:
        permit_id (string): The permit's id.
        holder (string): The holder's full name.
        plate (string): The vehicle plate.
        zone (string): A, B or C.
        status (string): active, suspended or cancelled.
    """
    permit = self.permits.get(permit_id)
    if permit is None:
        return {"success": False, "error": f"No permit with id {permit_id}."}
    return {"success": True, "data": permit}
'''

LIST_PERMITS = '''def list_permits_by_holder(self, holder: str) -> dict:
    """List every permit of a holder (case-insensitive name match).

    Args:
        holder: The holder's full name.

    Returns:
        permit_id (string): The id of each of the holder's permits.
        status (string): Each permit's status.
    """
    wanted = holder.strip().lower()
    matches = [p for p in self.permits.values() if p["holder"].lower() == wanted]
    return {"success": True, "data": matches}
'''

ISSUE_PERMIT = '''def issue_permit(self, holder: str, plate: str, zone: str) -> dict:
    """Issue a parking permit for a vehicle plate in a zone.

    Args:
        holder: The holder's full name.
        plate: The vehicle plate, e.g. "KL-204".
        zone: The zone: A, B or C.

    Returns:
        permit_id (string): The new permit's id.
    """
    if zone not in ("A", "B", "C"):
        return {"success": False, "error": f"Unknown zone {zone}; permits are for zones A, B or C."}
    for permit in self.permits.values():
        if permit["plate"] == plate and permit["status"] == "active":
            return {"success": False, "error": f"Plate {plate} already has active permit {permit['permit_id']}."}
    number = len(self.permits) + 1
    while f"P-{number}" in self.permits:
        number += 1
    permit_id = f"P-{number}"
    self.permits[permit_id] = {
        "permit_id": permit_id, "holder": holder, "plate": plate, "zone": zone, "status": "active",
    }
    return {"success": True, "data": self.permits[permit_id]}
'''

CANCEL_PERMIT = '''def cancel_permit(self, permit_id: str, reason: Optional[str] = None) -> dict:
    """Cancel a permit that is active or suspended.

    Args:
        permit_id: The permit to cancel.
        reason: Why it is cancelled (optional).

    Returns:
        message (string): A confirmation.
    """
    permit = self.permits.get(permit_id)
    if permit is None:
        return {"success": False, "error": f"No permit with id {permit_id}."}
    if permit["status"] == "cancelled":
        return {"success": False, "error": f"Permit {permit_id} is already cancelled."}
    permit["status"] = "cancelled"
    return {"success": True, "message": f"Permit {permit_id} cancelled."}
'''

FAULTY_CANCEL: dict[str, str] = {
    "syntax": CANCEL_PERMIT.replace("if permit is None:", "if permit is None"),
    "forbidden_import": CANCEL_PERMIT.replace(
        "    permit = self.permits.get(permit_id)", "    import os\n    permit = self.permits.get(permit_id)"
    ),
    "signature": CANCEL_PERMIT.replace("permit_id: str, reason", "pid: str, reason").replace(
        "self.permits.get(permit_id)", "self.permits.get(pid)"
    ),
    # Breaks the rules: no existence check (raises on unknown ids) and re-cancels cancelled permits.
    "buggy": '''def cancel_permit(self, permit_id: str, reason: Optional[str] = None) -> dict:
    """Cancel a permit.

    Args:
        permit_id: The permit to cancel.
        reason: Why it is cancelled (optional).

    Returns:
        message (string): A confirmation.
    """
    permit = self.permits[permit_id]
    permit["status"] = "cancelled"
    return {"success": True, "message": f"Permit {permit_id} cancelled."}
''',
    "not_json": "I would rather not write code today.",
    # Passes every check on its own, but its default names a constant that does not exist, so the class body
    # raises NameError when it runs.
    "undefined_name": CANCEL_PERMIT.replace("reason: Optional[str] = None", "reason: Optional[str] = NO_REASON"),
}

METHODS = {
    "get_permit": GET_PERMIT,
    "list_permits_by_holder": LIST_PERMITS,
    "issue_permit": ISSUE_PERMIT,
    "cancel_permit": CANCEL_PERMIT,
}


def permit_plan(district: str | None) -> dict[str, Any]:
    suffix = f" District {district}" if district else ""
    return {
        "name": f"Parking Permits{suffix}",
        "class_name": "ParkingPermits",
        "domain": "municipal parking",
        "summary": f"A city parking office{suffix.lower()} that issues, looks up and cancels residents' permits.",
        "introduction": (
            "You are an assistant of the city parking office. You look up permits by id or holder, issue permits "
            "for a vehicle plate in zone A, B or C, and cancel permits. A plate can hold at most one active "
            "permit, and a cancelled permit cannot be cancelled again."
        ),
        "rules": RULES,
        "entities": [
            {
                "name": "Permit",
                "collection": "permits",
                "key": "permit_id",
                "description": "A parking permit; status active, suspended or cancelled.",
                "attributes": [
                    {"name": "permit_id", "type": "str", "description": "Id such as P-1"},
                    {"name": "holder", "type": "str", "description": "Holder's full name"},
                    {"name": "plate", "type": "str", "description": "Vehicle plate"},
                    {"name": "zone", "type": "str", "description": "A, B or C"},
                    {"name": "status", "type": "str", "description": "active, suspended or cancelled"},
                ],
            }
        ],
        "scalars": [{"name": "current_date", "type": "str", "description": "Today, ISO date"}],
        "operations": [
            {
                "name": "get_permit",
                "description": "Look up one permit by its id.",
                "kind": "query",
                "parameters": [{"name": "permit_id", "type": "str", "description": "The permit id", "required": True}],
            },
            {
                "name": "list_permits_by_holder",
                "description": "List the permits of a holder.",
                "kind": "query",
                "parameters": [{"name": "holder", "type": "str", "description": "Holder's name", "required": True}],
            },
            {
                "name": "issue_permit",
                "description": "Issue a permit for a plate in a zone.",
                "kind": "state_change",
                "parameters": [
                    {"name": "holder", "type": "str", "description": "Holder's name", "required": True},
                    {"name": "plate", "type": "str", "description": "Vehicle plate", "required": True},
                    {"name": "zone", "type": "str", "description": "A, B or C", "required": True},
                ],
            },
            {
                "name": "cancel_permit",
                "description": "Cancel an active or suspended permit.",
                "kind": "state_change",
                "parameters": [
                    {"name": "permit_id", "type": "str", "description": "The permit id", "required": True},
                    {"name": "reason", "type": "str", "description": "Why", "required": False},
                ],
            },
        ],
    }


INITIAL_STATE = {
    "current_date": "2025-03-01",
    "permits": {
        "P-1": {"permit_id": "P-1", "holder": "Ana Lima", "plate": "KL-204", "zone": "A", "status": "active"},
        "P-2": {"permit_id": "P-2", "holder": "Ben Okafor", "plate": "MX-771", "zone": "B", "status": "active"},
        "P-3": {"permit_id": "P-3", "holder": "Ana Lima", "plate": "KL-990", "zone": "C", "status": "suspended"},
        "P-4": {"permit_id": "P-4", "holder": "Chen Wei", "plate": "QT-118", "zone": "A", "status": "cancelled"},
    },
}


@dataclass
class ScriptedSynthModel:
    """``method_faults``: operation -> fault written on first attempts; ``fault_attempts``: how many attempts
    of that method carry the fault (a large number means every attempt); ``repairable``: whether a repair
    request (checker's reasons) gets the correct method; ``broken_roles``: roles that answer with prose only;
    ``raising_roles``: roles whose calls raise (an outage); ``narrow_tester``: the tester only ever calls the two
    read tools, whatever it is asked."""

    method_faults: dict[str, Fault] = field(default_factory=dict)
    fault_attempts: int = 1_000
    repairable: bool = True
    broken_roles: frozenset[str] = frozenset()
    raising_roles: frozenset[str] = frozenset()
    narrow_tester: bool = False
    calls: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _method_attempts: Counter[str] = field(default_factory=Counter)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        system = str(messages[0].get("content") or "")
        user = "\n".join(str(m.get("content") or "") for m in messages[1:] if m.get("role") == "user")
        role = next((r for marker, r in ROLE_MARKERS.items() if system.startswith(marker)), "unknown")
        with self._lock:
            self.calls[role] += 1
        if role in self.raising_roles:
            raise ConnectionError(f"the {role} endpoint is down")
        if role in self.broken_roles:
            content = "I am not sure what you need; could you rephrase?"
        else:
            content = getattr(self, f"_answer_{role}")(user)
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4
        return {
            "role": "assistant",
            "content": content,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": max(1, len(content) // 4)},
        }

    # ------------------------------------------------------------------------------------------ roles

    def _answer_unknown(self, _user: str) -> str:
        return "I do not know this role."

    def _answer_filter(self, user: str) -> str:
        keep = any(word in user.lower() for word in STATEFUL_WORDS)
        reason = (
            "It needs permit records that persist and are issued or cancelled."
            if keep
            else "It is a stateless question that needs no records."
        )
        return json.dumps({"keep": keep, "reason": reason})

    def _answer_infer(self, user: str) -> str:
        match = DISTRICT.search(user)
        where = f" for district {match.group(1)}" if match else ""
        return json.dumps(
            {
                "description": f"A municipal parking permit office{where} that keeps residents' permits by id, "
                "issues permits for vehicle plates in zones, and looks up and cancels permits."
            }
        )

    def _answer_plan(self, user: str) -> str:
        match = DISTRICT.search(user)
        return "Here is the plan:\n```json\n" + json.dumps(permit_plan(match.group(1) if match else None)) + "\n```"

    def _answer_method(self, user: str) -> str:
        name = next((n for n in METHODS if f'"name": "{n}"' in user), None)
        if name is None:
            return "No operation found."
        repair = "failed the assessment" in user
        with self._lock:
            self._method_attempts[name] += 1
            attempt = self._method_attempts[name]
        fault = self.method_faults.get(name)
        if repair:
            source = METHODS[name] if self.repairable else FAULTY_CANCEL.get(fault or "", METHODS[name])
        elif fault is not None and attempt <= self.fault_attempts:
            source = FAULTY_CANCEL[fault]
        else:
            source = METHODS[name]
        return f"```python\n{source}```"

    def _answer_initial_state(self, _user: str) -> str:
        return json.dumps(INITIAL_STATE)

    def _answer_tester(self, user: str) -> str:
        number = int(re.search(r"Round (\d+) of", user).group(1))  # type: ignore[union-attr]
        state = json.loads(user.split("Current state:\n```json\n", 1)[1].split("\n```", 1)[0])
        permits = list(state["permits"].values())
        active = [p for p in permits if p["status"] == "active"]
        cancelled = [p for p in permits if p["status"] == "cancelled"]
        probes: list[tuple[str, dict[str, Any], str]] = [
            ("get_permit", {"permit_id": permits[0]["permit_id"]}, "success"),
            ("get_permit", {"permit_id": "P-999"}, "refusal"),
            ("list_permits_by_holder", {"holder": permits[0]["holder"]}, "success"),
            ("issue_permit", {"holder": "Dara Quinn", "plate": f"NEW-{number}", "zone": "A"}, "success"),
            ("issue_permit", {"holder": "Eve Stone", "plate": f"ODD-{number}", "zone": "Z"}, "refusal"),
            ("cancel_permit", {"permit_id": "P-999"}, "refusal"),
        ]
        if active:
            probes.append(("cancel_permit", {"permit_id": active[0]["permit_id"], "reason": "moved"}, "success"))
            probes.append(("issue_permit", {"holder": "Sam Roe", "plate": active[-1]["plate"], "zone": "B"}, "refusal"))
        if cancelled:
            probes.append(("cancel_permit", {"permit_id": cancelled[0]["permit_id"]}, "refusal"))
        if self.narrow_tester:
            probes = [p for p in probes if p[0] in ("get_permit", "list_permits_by_holder")]
        else:
            allowed = re.search(r"Tools allowed this round: (.*)", user)
            names = set(allowed.group(1).split(", ")) if allowed else set()
            probes = [p for p in probes if p[0] in names] or probes
        tool, arguments, expect = probes[(number - 1) % len(probes)]
        return json.dumps({"tool": tool, "arguments": arguments, "expect": expect, "intent": f"probe {tool}"})

    def _answer_checker(self, user: str) -> str:
        expect = re.search(r"Tester expected: (\w+)", user).group(1)  # type: ignore[union-attr]
        kind = re.search(r"Returned \((\w+)\):", user).group(1)  # type: ignore[union-attr]
        if kind == "tool_exception":
            return json.dumps({"verdict": "fail", "reason": "The method raised an exception instead of refusing."})
        succeeded = kind == "ok"
        if expect == "refusal" and succeeded:
            return json.dumps({"verdict": "Fail", "reason": "The rules require this call to be refused."})
        if expect == "success" and not succeeded:
            return json.dumps({"verdict": "warning", "reason": "Refused a call the tester expected to work."})
        return json.dumps({"verdict": "pass", "reason": "Result and state change follow the rules."})
