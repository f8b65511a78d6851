"""τ²'s ``NL_ASSERTION`` reward basis as an LLM-judged check (``tau2/evaluator/evaluator_nl_assertions.py``).

Upstream's judge is sent two messages: its system prompt and a user prompt naming the conversation (each message
as ``role: content``, one per line) and the task's ``nl_assertions`` (the Python list as text). Both texts, the
line format and the separator are read from the source the user downloaded, at import, with :mod:`ast` (the
function ``NLAssertionsEvaluator.evaluate_nl_assertions``), and kept in the check's ``prompts``; none is written
here. The reply is read as upstream's evaluator reads it (:func:`NlAssertionsJudge.parse`): ``json.loads``, then
each item of ``results`` as an ``NLAssertionCheck`` (``expectedOutcome``, ``metExpectation``, ``reasoning``,
validated by pydantic as upstream's model is). The task's factor is 1 when every returned item is met (no item:
1, as ``all([])``). A reply upstream's evaluator cannot read makes it raise, which stops the simulation unscored:
here :class:`harness.episode.judging.UnreadableReply`, an infrastructure error with no score.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from pydantic import BaseModel, ValidationError

from harness.benchmarks.tau2.source import Tau2Source, Tau2SourceError
from harness.episode.judging import UnreadableReply
from harness.schema import JudgedCheck, JudgeVerdict

KIND = "tau2-nl-assertions"
CHECK_ID = "nl_assertions"
JUDGED_BASIS = "NL_ASSERTION"
EVALUATOR_FILE = "evaluator/evaluator_nl_assertions.py"
EVALUATOR_FUNCTION = "evaluate_nl_assertions"

PROMPT_NAMES = ("system", "user", "message_line", "message_separator")
"""The texts read from upstream's function: the system prompt, the user prompt's template (``{trajectory_str}`` and
``{nl_assertions}``), the template of one message of the conversation (``{role}``, ``{content}``), and what joins
the messages."""


def _assigned(function: ast.FunctionDef, name: str) -> ast.expr:
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    raise Tau2SourceError(f"{EVALUATOR_FILE}: {EVALUATOR_FUNCTION} assigns no {name}")


def _template(node: ast.expr, what: str) -> str:
    """An f-string as a ``str.format`` template whose fields are the names (or ``x.attribute``s) it formats."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if not isinstance(node, ast.JoinedStr):
        raise Tau2SourceError(f"{EVALUATOR_FILE}: {what} is not a string")
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value.replace("{", "{{").replace("}", "}}"))
        elif isinstance(value, ast.FormattedValue) and value.conversion == -1 and value.format_spec is None:
            field = value.value
            if isinstance(field, ast.Name):
                parts.append("{" + field.id + "}")
            elif isinstance(field, ast.Attribute) and isinstance(field.value, ast.Name):
                parts.append("{" + field.attr + "}")
            else:
                raise Tau2SourceError(f"{EVALUATOR_FILE}: {what} formats an expression this import does not read")
        else:
            raise Tau2SourceError(f"{EVALUATOR_FILE}: {what} formats a value this import does not read")
    return "".join(parts)


def read_nl_prompts(source: Tau2Source) -> dict[str, str]:
    """Upstream's judge texts, read from its evaluator's source (never run)."""
    try:
        tree = ast.parse(source.read_python(EVALUATOR_FILE))
    except SyntaxError as exc:
        raise Tau2SourceError(f"{EVALUATOR_FILE} is not Python: {exc}") from None
    function = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == EVALUATOR_FUNCTION), None
    )
    if function is None:
        raise Tau2SourceError(f"{EVALUATOR_FILE} defines no {EVALUATOR_FUNCTION}")
    system = _assigned(function, "system_prompt")
    if not (isinstance(system, ast.Constant) and isinstance(system.value, str)):
        raise Tau2SourceError(f"{EVALUATOR_FILE}: the judge's system prompt is not a string")
    joined = _assigned(function, "trajectory_str")
    if not (
        isinstance(joined, ast.Call)
        and isinstance(joined.func, ast.Attribute)
        and joined.func.attr == "join"
        and isinstance(joined.func.value, ast.Constant)
        and isinstance(joined.func.value.value, str)
        and len(joined.args) == 1
        and isinstance(joined.args[0], ast.ListComp | ast.GeneratorExp)
    ):
        raise Tau2SourceError(f"{EVALUATOR_FILE}: the conversation is not joined as this import reads it")
    return {
        "system": system.value,
        "user": _template(_assigned(function, "user_prompt"), "the judge's user prompt"),
        "message_line": _template(joined.args[0].elt, "the conversation's message line"),
        "message_separator": joined.func.value.value,
    }


def nl_assertions_check(task: dict[str, Any], prompts: dict[str, str]) -> JudgedCheck | None:
    """The task's judged check when its reward basis counts NL assertions and it has some (None otherwise: upstream
    then gives the factor 1 without asking the judge)."""
    criteria = task.get("evaluation_criteria") or {}
    assertions = [str(item) for item in criteria.get("nl_assertions") or []]
    if JUDGED_BASIS not in (criteria.get("reward_basis") or []) or not assertions:
        return None
    return JudgedCheck(
        id=CHECK_ID,
        kind=KIND,
        description="The conversation meets every natural-language assertion of the task (τ²'s NL_ASSERTION).",
        asked={"nl_assertions": assertions},
        prompts=prompts,
    )


def judged_prompts(source: Tau2Source, tasks: list[dict[str, Any]]) -> dict[str, str] | None:
    """Upstream's judge texts when some task needs them (None otherwise: a source is not read for nothing)."""
    needed = any(nl_assertions_check(task, {}) is not None for task in tasks)
    return read_nl_prompts(source) if needed else None


def judged_checks(task: dict[str, Any], prompts: dict[str, str] | None) -> list[JudgedCheck]:
    """The task's judged checks (its NL assertions, when its basis counts them)."""
    check = nl_assertions_check(task, prompts) if prompts is not None else None
    return [check] if check is not None else []


class _NLAssertionCheck(BaseModel):
    """The fields and types of upstream's ``NLAssertionCheck`` (``tau2/data_model/simulation.py``), validated as
    pydantic validates upstream's."""

    nl_assertion: str
    met: bool
    justification: str


class NlAssertionsJudge:
    """The ``tau2-nl-assertions`` judge kind: upstream's request and upstream's reading of the reply."""

    def request(self, check: JudgedCheck, transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
        prompts = check.prompts
        lines = [
            prompts["message_line"].format(role=message.get("role"), content=message.get("content"))
            for message in transcript
        ]
        conversation = prompts["message_separator"].join(lines)
        assertions = [str(item) for item in check.asked["nl_assertions"]]
        user = prompts["user"].format(trajectory_str=conversation, nl_assertions=assertions)
        return [{"role": "system", "content": prompts["system"]}, {"role": "user", "content": user}]

    def parse(self, check: JudgedCheck, reply: str) -> list[JudgeVerdict]:
        try:
            data = json.loads(reply)
            checks = [
                _NLAssertionCheck(
                    nl_assertion=result["expectedOutcome"],
                    met=result["metExpectation"],
                    justification=result["reasoning"],
                )
                for result in data.get("results", [])
            ]
        except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
            # ValidationError and JSONDecodeError are ValueErrors; listed for the reader.
            raise UnreadableReply(f"upstream's evaluator raises on it ({type(exc).__name__}: {exc})") from None
        return [JudgeVerdict(item=c.nl_assertion, holds=c.met, reason=c.justification) for c in checks]


NL_ASSERTIONS_JUDGE = NlAssertionsJudge()

__all__ = [
    "JUDGED_BASIS",
    "KIND",
    "NL_ASSERTIONS_JUDGE",
    "NlAssertionsJudge",
    "judged_checks",
    "judged_prompts",
    "nl_assertions_check",
    "read_nl_prompts",
]
