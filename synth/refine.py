"""The four refinement rules that turn a logical, over-specified request into a natural one (EnvFactory).

Each rule is a separate step: :func:`applies` says whether the rule has anything to do on a request, the model
rewrites the request with the rule's own template, and :func:`problems` checks the rewrite deterministically.
A rewrite with problems is discarded (the request stays as it was) and the reason is recorded.

- ``implicit_reference``: values established in earlier turns are referred to, not repeated ("that order").
- ``action_compression``: the intermediate steps are not spelled out; the request states the goal.
- ``ambiguity_injection``: details the agent can look up are left vague, keeping what only the user knows.
- ``goal_expansion``: the request is framed by the person's wider goal and motivation, without new actions.

Throughout, the values only the user can give (``must_keep``) stay in the request, and tool names never appear.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.schema import Usage
from synth.answers import AnswerError, Asker
from synth.records import Reasoned
from synth.templates import load_template

Rule = Literal["implicit_reference", "action_compression", "ambiguity_injection", "goal_expansion"]
RULES: tuple[Rule, ...] = ("implicit_reference", "action_compression", "ambiguity_injection", "goal_expansion")


@dataclass
class RefineContext:
    """What the rules need to know about one turn."""

    turn: int
    tool_names: list[str]
    must_keep: list[str] = field(default_factory=list)
    referable: list[str] = field(default_factory=list)
    lookup_values: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    previous_requests: list[str] = field(default_factory=list)


class RefinementStep(BaseModel):
    rule: str
    applied: bool
    before: str
    after: str
    reason: str = ""
    analysis: str = ""


class RewriteAnswer(Reasoned):
    request: str = Field(min_length=3)


def mentions(text: str, value: str) -> bool:
    return value.lower() in text.lower()


def _tool_names_in(text: str, tool_names: list[str]) -> list[str]:
    return [name for name in tool_names if "_" in name and re.search(rf"\b{re.escape(name)}\b", text)]


def applies(rule: Rule, text: str, context: RefineContext) -> bool:
    if rule == "implicit_reference":
        return context.turn > 0 and any(mentions(text, v) for v in context.referable)
    if rule == "action_compression":
        return len(context.calls) > 1 or bool(_tool_names_in(text, context.tool_names))
    if rule == "ambiguity_injection":
        return any(mentions(text, v) for v in context.lookup_values)
    return True


def problems(rule: Rule, before: str, after: str, context: RefineContext) -> list[str]:
    """Why a rewrite is unusable; empty when it is kept."""
    found: list[str] = []
    if not after.strip():
        return ["the rewrite is empty"]
    if after.strip() == before.strip():
        found.append("the rewrite changes nothing")
    lost = [v for v in context.must_keep if mentions(before, v) and not mentions(after, v)]
    if lost:
        found.append(f"it drops what only the user can say: {lost}")
    if names := _tool_names_in(after, context.tool_names):
        found.append(f"it names tools: {names}")
    if rule == "implicit_reference":
        repeated = [v for v in context.referable if mentions(after, v) and v not in context.must_keep]
        if repeated:
            found.append(f"it still repeats values from earlier turns: {repeated}")
    elif rule == "action_compression":
        if len(after) > len(before) * 1.25 + 40:
            found.append("it is longer than the request it compresses")
    elif rule == "ambiguity_injection":
        kept = [v for v in context.lookup_values if mentions(before, v) and mentions(after, v)]
        if kept and len(kept) == len([v for v in context.lookup_values if mentions(before, v)]):
            found.append("every detail the agent could look up is still spelled out")
    elif rule == "goal_expansion" and len(after) <= len(before):
        found.append("it adds no context to the request")
    return found


async def refine_step(rule: Rule, asker: Asker, text: str, context: RefineContext, usage: Usage) -> RefinementStep:
    """One rule on one request."""
    if not applies(rule, text, context):
        return RefinementStep(rule=rule, applied=False, before=text, after=text, reason="nothing to do")
    messages = load_template(f"query_refine_{rule}").render(
        request=text,
        context=_context_payload(rule, context),
    )
    try:
        answer = await asker.json(messages, RewriteAnswer, f"refine_{rule}", usage)
    except AnswerError as exc:
        return RefinementStep(rule=rule, applied=False, before=text, after=text, reason=f"no usable answer: {exc}")
    found = problems(rule, text, answer.request, context)
    if found:
        return RefinementStep(rule=rule, applied=False, before=text, after=text, reason="; ".join(found))
    return RefinementStep(rule=rule, applied=True, before=text, after=answer.request.strip(), analysis=answer.analysis)


def _context_payload(rule: Rule, context: RefineContext) -> dict[str, Any]:
    payload: dict[str, Any] = {"must_keep": context.must_keep, "previous_requests": context.previous_requests}
    if rule == "implicit_reference":
        payload["refer_to_implicitly"] = [v for v in context.referable if v not in context.must_keep]
    elif rule == "action_compression":
        payload["steps"] = [{"name": c.get("name"), "changes_state": c.get("changed_state")} for c in context.calls]
    elif rule == "ambiguity_injection":
        payload["may_be_vague"] = context.lookup_values
    return payload


async def refine_request(
    asker: Asker, text: str, context: RefineContext, usage: Usage, rules: tuple[Rule, ...] = RULES
) -> tuple[str, list[RefinementStep]]:
    """The request after each rule in turn, and the record of every step."""
    steps: list[RefinementStep] = []
    for rule in rules:
        step = await refine_step(rule, asker, text, context, usage)
        steps.append(step)
        text = step.after
    return text, steps
