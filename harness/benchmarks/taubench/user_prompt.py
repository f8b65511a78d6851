"""τ-bench's user-simulator system prompt, read from the checkout's syntax tree and rendered as upstream renders it.

Upstream builds it in code (``tau_bench/envs/user.py``, ``<Class>.build_system_prompt``): a conditional
expression makes the instruction's display (a prefix, the instruction, a suffix; another text when there is no
instruction), and an f-string puts that display between two texts. The import reads those pieces from the method's
syntax tree (never importing upstream) into a :class:`UserPromptTemplate` stored with each scenario; the run
renders it with the scenario's task. Anything shaped otherwise is refused with one line naming the file.
"""

from __future__ import annotations

import ast
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.files import literal_message_contents

USER_MODULE = "user.py"
"""The module of ``tau_bench/envs`` that holds the user simulators."""
LLM_USER_CLASS = "LLMUserSimulationEnv"
"""The user simulator of upstream's default ``--user-strategy llm``."""
PROMPT_METHOD = "build_system_prompt"
OPENING_METHOD = "reset"
DETAILS_KEY = "taubench_user_prompt"
"""Where a scenario's provenance details keep the template."""


class UserPromptShapeError(ValueError):
    """The checkout's ``build_system_prompt`` is not shaped as the reader expects."""


class UserPromptTemplate(BaseModel):
    """The pieces of upstream's ``build_system_prompt``: ``head + display + tail``, the display being
    ``before + instruction + after`` (or ``absent`` without an instruction)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    source: str
    """Where it was read: ``tau_bench/envs/user.py:<Class>.build_system_prompt``."""
    head: str
    before: str
    after: str
    absent: str
    tail: str
    opening: str
    """The line the simulator answers first, never shown to the agent (the literal ``user`` message of
    ``reset``)."""

    def render(self, instruction: str | None) -> str:
        """The system prompt upstream's simulator builds for ``instruction``."""
        display = self.absent if instruction is None else self.before + instruction + self.after
        return self.head + display + self.tail


def _refuse(where: str, what: str) -> UserPromptShapeError:
    return UserPromptShapeError(f"{where}: {what}; this reader knows τ-bench's f-string with a conditional display")


def _texts(node: ast.expr, parameter: str, where: str) -> tuple[str, str]:
    """``"a" + parameter + "b"`` (any grouping of ``+``, string constants around one use of ``parameter``) as
    ``("a", "b")``."""
    parts: list[ast.expr] = []

    def flatten(item: ast.expr) -> None:
        if isinstance(item, ast.BinOp) and isinstance(item.op, ast.Add):
            flatten(item.left)
            flatten(item.right)
        else:
            parts.append(item)

    flatten(node)
    uses = [i for i, p in enumerate(parts) if isinstance(p, ast.Name) and p.id == parameter]
    others = [p for p in parts if not (isinstance(p, ast.Name) and p.id == parameter)]
    if len(uses) != 1 or not all(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in others):
        raise _refuse(where, f"the display is not string constants around one use of {parameter!r}")
    before = "".join(str(p.value) for p in parts[: uses[0]] if isinstance(p, ast.Constant))
    after = "".join(str(p.value) for p in parts[uses[0] + 1 :] if isinstance(p, ast.Constant))
    return before, after


def _method(module: ast.Module, class_name: str, name: str, where: str) -> ast.FunctionDef:
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
            raise _refuse(where, f"{class_name} has no {name}")
    raise _refuse(where, f"defines no class {class_name}")


def read_opening(module: ast.Module, where: str, class_name: str = LLM_USER_CLASS) -> str:
    """The one literal ``user`` message of ``class_name.reset`` (what the simulator answers first)."""
    found = literal_message_contents(_method(module, class_name, OPENING_METHOD, where).body, "user")
    if len(found) != 1:
        at = f"{where}:{class_name}.{OPENING_METHOD}"
        raise _refuse(at, f"expected one literal user message, found {len(found)}")
    return found[0]


def read_user_prompt(module: ast.Module, where: str, class_name: str = LLM_USER_CLASS) -> UserPromptTemplate:
    """The template of ``class_name.build_system_prompt`` in the parsed ``tau_bench/envs/user.py``."""
    at = f"{where}:{class_name}.{PROMPT_METHOD}"
    method = _method(module, class_name, PROMPT_METHOD, where)
    parameters = [a.arg for a in method.args.args if a.arg != "self"]
    if len(parameters) != 1:
        raise _refuse(at, "it does not take exactly one parameter besides self")
    parameter = parameters[0]
    body = [s for s in method.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 2 or not isinstance(body[0], ast.Assign) or not isinstance(body[1], ast.Return):
        raise _refuse(at, "its body is not one assignment then a return")
    assign, returned = body[0], body[1]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0], ast.Name):
        raise _refuse(at, "its assignment is not to one name")
    display = assign.targets[0].id
    condition = assign.value
    if not isinstance(condition, ast.IfExp):
        raise _refuse(at, "the display is not a conditional expression")
    test = condition.test
    if not (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == parameter
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.IsNot)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        raise _refuse(at, f"the display's condition is not `{parameter} is not None`")
    before, after = _texts(condition.body, parameter, at)
    if not (isinstance(condition.orelse, ast.Constant) and isinstance(condition.orelse.value, str)):
        raise _refuse(at, "the display without an instruction is not a string constant")
    absent = condition.orelse.value
    template = returned.value
    if not isinstance(template, ast.JoinedStr):
        raise _refuse(at, "it does not return an f-string")
    pieces: list[str | None] = []
    for value in template.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            pieces.append(value.value)
        elif (
            isinstance(value, ast.FormattedValue)
            and isinstance(value.value, ast.Name)
            and value.value.id == display
            and value.conversion == -1
            and value.format_spec is None
        ):
            pieces.append(None)
        else:
            raise _refuse(at, f"its f-string formats something other than {display!r}")
    if pieces.count(None) != 1:
        raise _refuse(at, f"its f-string does not format {display!r} exactly once")
    split = pieces.index(None)
    head = "".join(p for p in pieces[:split] if p is not None)
    tail = "".join(p for p in pieces[split + 1 :] if p is not None)
    return UserPromptTemplate(
        source=f"tau_bench/envs/{USER_MODULE}:{class_name}.{PROMPT_METHOD}",
        head=head,
        before=before,
        after=after,
        absent=absent,
        tail=tail,
        opening=read_opening(module, where, class_name),
    )


def stored_user_prompt(details: dict[str, object], scenario_id: str) -> UserPromptTemplate:
    """The template a scenario was imported with; a scenario imported before templates were stored is refused
    with one line."""
    stored = details.get(DETAILS_KEY)
    if stored is None:
        raise ValueError(
            f"scenario {scenario_id} has no τ-bench user prompt (imported before the prompts were read from the "
            "source): re-import it with `harness import taubench`"
        )
    try:
        return UserPromptTemplate.model_validate(stored)
    except ValidationError as exc:
        raise ValueError(
            f"scenario {scenario_id}: its τ-bench user prompt is not one this version reads "
            f"({exc.error_count()} problem(s)): re-import it with `harness import taubench`"
        ) from None
