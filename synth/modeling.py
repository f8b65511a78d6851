"""Modeling: from a plan to one executable environment class and a generated initial state.

The class skeleton (record types, state containers, constructor) is written from the plan by code, not by
the model. Each operation's method is written by the model on its own, concurrently with the others, and
checked on its AST before it is accepted: it parses, its signature matches the planned operation, it has a
docstring, it imports only allowed modules, it touches only the planned state, and every path returns the
result contract. A method that fails is regenerated with its problems, a bounded number of times. The
assembled class is checked again as a whole, its tool schemas are derived, and it is loaded in the sandbox
with a model-generated initial state that must conform to the state definition.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import textwrap
from dataclasses import dataclass, field
from typing import Any

from harness.registry import jail_modules
from harness.sandbox import EnvironmentLoadError, SandboxPool, find_problems
from harness.schema import Environment, Usage
from harness.toolspec import ToolDerivationError, derive_tools, parse_docstring
from synth.answers import AnswerError, Asker, extract_json, extract_python
from synth.graph import docstring_outputs
from synth.records import EnvironmentPlan, MethodAttempt, OperationPlan
from synth.templates import allowed_modules_text, load_template, similar_examples

logger = logging.getLogger(__name__)

SKELETON_IMPORTS = (
    "import copy",
    "import math",
    "import re",
    "from datetime import date, datetime, timedelta",
    "from typing import Any, Dict, List, Optional, TypedDict, Union",
)
_SCALAR_DEFAULTS = {"str": '""', "int": "0", "float": "0.0", "bool": "False"}
_ANNOTATIONS = {"list[dict]": "list"}


class ModelingError(ValueError):
    def __init__(self, reason: str, attempts: list[MethodAttempt] | None = None):
        super().__init__(reason)
        self.attempts = attempts or []


# ------------------------------------------------------------------------------------------ the skeleton


def record_type_name(entity_name: str) -> str:
    return f"{entity_name}Record"


def _docstring(text: str) -> str:
    cleaned = " ".join(text.replace("\\", "/").replace('"""', "'''").split())
    return f'"""{cleaned}"""'


def render_module(plan: EnvironmentPlan, methods: dict[str, str], extra_imports: list[str] | None = None) -> str:
    """The module source: header, record types, the class with its constructor and the given methods."""
    lines = [_docstring(f"{plan.name}: {plan.summary}"), ""]
    imports = list(SKELETON_IMPORTS) + [i for i in (extra_imports or []) if i not in SKELETON_IMPORTS]
    lines += [*imports, "", ""]
    for entity in plan.entities:
        lines.append(f"class {record_type_name(entity.name)}(TypedDict):")
        lines.append(f"    {_docstring(entity.description or entity.name)}")
        lines.append("")
        for attribute in entity.attributes:
            comment = f"  # {' '.join(attribute.description.split())}" if attribute.description else ""
            lines.append(f"    {attribute.name}: {_ANNOTATIONS.get(attribute.type, attribute.type)}{comment}")
        lines += ["", ""]
    lines.append(f"class {plan.class_name}:")
    lines.append(f"    {_docstring(plan.summary)}")
    lines.append("")
    lines.append("    def __init__(self, init_config: dict):")
    lines.append('        """Create the state containers from the initial configuration."""')
    for entity in plan.entities:
        annotation = f"dict[str, {record_type_name(entity.name)}]"
        lines.append(f'        self.{entity.collection}: {annotation} = init_config.get("{entity.collection}", {{}})')
    for scalar in plan.scalars:
        default = _SCALAR_DEFAULTS[scalar.type]
        lines.append(f'        self.{scalar.name}: {scalar.type} = init_config.get("{scalar.name}", {default})')
    for operation in plan.operations:
        source = methods.get(operation.name)
        if source is not None:
            lines.append("")
            lines.append(textwrap.indent(source.strip("\n"), "    "))
    return "\n".join(lines) + "\n"


def build_skeleton(plan: EnvironmentPlan) -> str:
    return render_module(plan, {})


# -------------------------------------------------------------------------------------- method checks


@dataclass
class CheckedMethod:
    source: str
    imports: list[str] = field(default_factory=list)


def _annotation_text(node: ast.expr | None) -> str:
    return ast.unparse(node).replace(" ", "") if node is not None else ""


def _strip_optional(text: str) -> tuple[str, bool]:
    """The annotation without ``Optional[...]`` / ``| None``, and whether it had it (``text`` has no spaces)."""
    lowered = text.lower()
    for prefix in ("optional[", "typing.optional["):
        if lowered.startswith(prefix) and lowered.endswith("]"):
            return text[len(prefix) : -1], True
    if lowered.endswith("|none"):
        return text[: -len("|none")], True
    if lowered.startswith("none|"):
        return text[len("none|") :], True
    return text, False


def _annotation_matches(text: str, planned: str) -> bool:
    base = text.lower().replace("typing.", "")
    if planned in ("list[str]", "list[int]"):
        return base in (planned, "list")
    if planned == "dict":
        return base == "dict" or base.startswith("dict[")
    if planned == "float":
        return base in ("float", "int|float", "float|int")
    return base == planned


def _signature_problems(function: ast.FunctionDef, operation: OperationPlan) -> list[str]:
    problems: list[str] = []
    args = function.args
    if args.posonlyargs or args.vararg or args.kwarg or args.kwonlyargs:
        problems.append("signature mismatch: use plain positional parameters only (no /, *, *args or **kwargs)")
    names = [a.arg for a in args.args]
    planned = ["self", *(p.name for p in operation.parameters)]
    if names != planned:
        problems.append(f"signature mismatch: parameters are {names}, the plan says {planned}")
        return problems
    defaults_start = len(args.args) - len(args.defaults)
    for index, (arg, parameter) in enumerate(zip(args.args[1:], operation.parameters, strict=True), start=1):
        text = _annotation_text(arg.annotation)
        if not text:
            problems.append(f"signature mismatch: parameter {arg.arg!r} has no type hint")
            continue
        inner, optional = _strip_optional(text)
        has_default = index >= defaults_start
        if parameter.required and (optional or has_default):
            problems.append(f"signature mismatch: parameter {arg.arg!r} is required: no default, not Optional")
        if not parameter.required and not has_default:
            problems.append(f"signature mismatch: optional parameter {arg.arg!r} needs a default (None)")
        if not _annotation_matches(inner, parameter.type):
            problems.append(
                f"signature mismatch: parameter {arg.arg!r} is typed {text}, the plan says {parameter.type}"
            )
    return problems


def _own_nodes(function: ast.FunctionDef) -> list[ast.AST]:
    """Nodes of the function body, not descending into nested functions, lambdas or classes."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        found.append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                stack.append(child)
    return found


def _return_problems(function: ast.FunctionDef) -> list[str]:
    problems: list[str] = []
    nodes = _own_nodes(function)
    if any(isinstance(n, ast.Yield | ast.YieldFrom | ast.Await) for n in nodes):
        problems.append("result contract: the method must be a plain function (no yield or await)")
    returns = [n for n in nodes if isinstance(n, ast.Return)]
    if not returns:
        problems.append("result contract: the method never returns a result dict")
    for node in returns:
        if not isinstance(node.value, ast.Dict):
            problems.append(f"line {node.lineno}: result contract: return a dict literal with a 'success' key")
            continue
        keys = {
            k.value: v for k, v in zip(node.value.keys, node.value.values, strict=True) if isinstance(k, ast.Constant)
        }
        success = keys.get("success")
        if not isinstance(success, ast.Constant) or not isinstance(success.value, bool):
            problems.append(f"line {node.lineno}: result contract: 'success' must be the literal True or False")
        elif success.value is False and "error" not in keys:
            problems.append(f"line {node.lineno}: result contract: a refusal must carry an 'error' message")
        elif success.value is True and "data" not in keys and "message" not in keys:
            problems.append(f"line {node.lineno}: result contract: a success must carry 'data' or 'message'")
    return problems


def _attribute_problems(function: ast.FunctionDef, plan: EnvironmentPlan) -> list[str]:
    known = set(plan.state_keys) | {o.name for o in plan.operations}
    problems = []
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr not in known
        ):
            problems.append(
                f"line {node.lineno}: self.{node.attr} is neither a state key ({', '.join(plan.state_keys)}) "
                "nor a planned operation"
            )
    return sorted(set(problems))


def check_method(
    source: str, operation: OperationPlan, plan: EnvironmentPlan
) -> tuple[CheckedMethod | None, list[str]]:
    """The accepted method (with any top-level imports it needs hoisted), or every problem found."""
    code = textwrap.dedent(source).strip("\n")
    problems = find_problems(code, jail_modules())
    if problems and any("syntax error" in p for p in problems):
        return None, problems
    tree = ast.parse(code)
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    others = [n for n in tree.body if not isinstance(n, ast.Import | ast.ImportFrom | ast.FunctionDef)]
    if len(functions) != 1 or others:
        problems.append("the answer must hold exactly one method definition (and nothing but imports besides)")
        return None, problems
    function = functions[0]
    if function.name != operation.name:
        problems.append(f"signature mismatch: the method is named {function.name!r}, the plan says {operation.name!r}")
    problems += _signature_problems(function, operation)
    docstring = ast.get_docstring(function)
    if not docstring:
        problems.append("docstring missing: start the method with a docstring and an Args: section")
    else:
        description, documented = parse_docstring(docstring)
        if not description:
            problems.append("docstring: its first line must say what the method does")
        missing = [p.name for p in operation.parameters if p.name not in documented]
        if missing:
            problems.append(f"docstring: the Args: section must describe every parameter (missing: {missing})")
        if not docstring_outputs(docstring):
            problems.append(
                'docstring: add a Returns: section, one "name (type): description" line per field it returns'
            )
    problems += _return_problems(function)
    problems += _attribute_problems(function, plan)
    if problems:
        return None, problems
    method_source = ast.get_source_segment(code, function) or ""
    return CheckedMethod(source=method_source, imports=[ast.unparse(n) for n in imports]), []


# ------------------------------------------------------------------------------------ method generation


def operation_list(plan: EnvironmentPlan) -> str:
    return "\n".join(f"- {o.name} ({o.kind}): {o.description}" for o in plan.operations)


def describe_operation(operation: OperationPlan) -> str:
    return json.dumps(operation.model_dump(), indent=1)


async def write_method(
    asker: Asker,
    plan: EnvironmentPlan,
    operation: OperationPlan,
    usage: Usage,
    attempts: int,
    feedback: str = "",
) -> tuple[CheckedMethod | None, list[MethodAttempt]]:
    """Ask for one method until it passes its checks or ``attempts`` run out."""
    example = similar_examples(f"{plan.name} {plan.domain} {plan.summary}")
    skeleton = build_skeleton(plan)
    history: list[MethodAttempt] = []
    for number in range(1, attempts + 1):
        messages = load_template("write_method").render(
            introduction=plan.introduction,
            operations=operation_list(plan),
            skeleton=skeleton,
            rules="\n".join(f"- {rule}" for rule in plan.rules),
            operation=describe_operation(operation),
            feedback=feedback,
            allowed_modules=allowed_modules_text(),
            example_name=example.name,
            example_methods=example.methods,
        )
        try:
            reply = await asker.text(messages, "synth.modeling", usage)
        except AnswerError as exc:
            history.append(MethodAttempt(operation=operation.name, attempt=number, problems=[str(exc)]))
            continue
        source = extract_python(reply)
        checked, problems = check_method(source, operation, plan)
        history.append(MethodAttempt(operation=operation.name, attempt=number, problems=problems))
        if checked is not None:
            return checked, history
        feedback = (
            "\nYour previous answer was refused by the checks:\n```python\n"
            + source
            + "\n```\nProblems:\n"
            + "\n".join(f"- {p}" for p in problems)
            + "\nWrite the method again, fixing every problem."
        )
    return None, history


# ------------------------------------------------------------------------------------------- assembly


def assemble(plan: EnvironmentPlan, methods: dict[str, CheckedMethod]) -> str:
    """The whole class; ``ModelingError`` if it fails the static checks or its tools differ from the plan."""
    imports: list[str] = []
    for name in sorted(methods):
        imports += [i for i in methods[name].imports if i not in imports]
    code = render_module(plan, {name: m.source for name, m in methods.items()}, imports)
    problems = find_problems(code, jail_modules())
    if problems:
        raise ModelingError(f"assembled class fails the static checks: {'; '.join(problems)}")
    try:
        tools = derive_tools(code, plan.class_name)
    except ToolDerivationError as exc:
        raise ModelingError(f"tool schemas cannot be derived: {exc}") from exc
    names = [t.function.name for t in tools]
    if sorted(names) != sorted(o.name for o in plan.operations):
        raise ModelingError(f"the class offers tools {names}, the plan {[o.name for o in plan.operations]}")
    return code


async def write_methods(
    asker: Asker,
    plan: EnvironmentPlan,
    operations: list[OperationPlan],
    usage: Usage,
    attempts: int,
    feedback: dict[str, str] | None = None,
) -> dict[str, CheckedMethod]:
    """Methods for ``operations``, written concurrently; ``ModelingError`` naming the first that failed."""
    results = await asyncio.gather(
        *(write_method(asker, plan, op, usage, attempts, (feedback or {}).get(op.name, "")) for op in operations)
    )
    history = [attempt for _, attempts_made in results for attempt in attempts_made]
    for operation, (checked, attempts_made) in zip(operations, results, strict=True):
        if checked is None:
            last = attempts_made[-1].problems if attempts_made else ["no attempt"]
            raise ModelingError(
                f"method {operation.name} failed its checks {len(attempts_made)} times: {'; '.join(last)}", history
            )
    return {op.name: checked for op, (checked, _) in zip(operations, results, strict=True) if checked is not None}


# -------------------------------------------------------------------------------------- initial state


def _value_matches(value: Any, planned: str) -> bool:
    if value is None:
        return True
    if planned == "str":
        return isinstance(value, str)
    if planned == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if planned == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if planned == "bool":
        return isinstance(value, bool)
    if planned == "dict":
        return isinstance(value, dict)
    if planned.startswith("list"):
        item = planned[5:-1] if "[" in planned else ""
        return (
            isinstance(value, list) and all(_value_matches(v, item) for v in value) if item else isinstance(value, list)
        )
    return True


def state_problems(plan: EnvironmentPlan, state: Any) -> list[str]:
    """Every way ``state`` departs from the plan's state definition."""
    if not isinstance(state, dict):
        return ["the initial state must be a JSON object"]
    problems = [f"missing state key {k!r}" for k in plan.state_keys if k not in state]
    problems += [f"unplanned state key {k!r}" for k in state if k not in plan.state_keys]
    for entity in plan.entities:
        records = state.get(entity.collection)
        if records is None:
            continue
        if not isinstance(records, dict) or not records:
            problems.append(f"{entity.collection} must be a non-empty object mapping ids to records")
            continue
        types = {a.name: a.type for a in entity.attributes}
        for record_id, record in records.items():
            where = f"{entity.collection}[{record_id!r}]"
            if not isinstance(record, dict):
                problems.append(f"{where} is not an object")
                continue
            missing = [name for name in types if name not in record]
            extra = [name for name in record if name not in types]
            if missing:
                problems.append(f"{where} lacks {missing}")
            if extra:
                problems.append(f"{where} has unplanned attributes {extra}")
            if record.get(entity.key) != record_id:
                problems.append(f"{where}: {entity.key} must equal the id it is stored under")
            for name, planned in types.items():
                if name in record and not _value_matches(record[name], planned):
                    problems.append(f"{where}.{name} should be {planned}, got {type(record[name]).__name__}")
    for scalar in plan.scalars:
        if scalar.name in state and not _value_matches(state[scalar.name], scalar.type):
            problems.append(f"{scalar.name} should be {scalar.type}")
    return problems[:20]


def state_definition(plan: EnvironmentPlan) -> str:
    definition = {
        "collections": [
            {
                "state_key": e.collection,
                "entity": e.name,
                "key": e.key,
                "description": e.description,
                "attributes": {a.name: a.type for a in e.attributes},
            }
            for e in plan.entities
        ],
        "values": {s.name: {"type": s.type, "description": s.description} for s in plan.scalars},
    }
    return json.dumps(definition, indent=1)


async def generate_initial_state(asker: Asker, plan: EnvironmentPlan, usage: Usage, attempts: int) -> dict[str, Any]:
    feedback = ""
    problems: list[str] = []
    for _ in range(attempts):
        messages = load_template("initial_state").render(
            state_definition=state_definition(plan),
            rules="\n".join(f"- {rule}" for rule in plan.rules),
            feedback=feedback,
        )
        reply = await asker.text(messages, "synth.modeling", usage)
        try:
            state = extract_json(reply)
        except ValueError as exc:
            problems = [str(exc)]
        else:
            problems = state_problems(plan, state)
            if not problems:
                result: dict[str, Any] = state
                return result
        feedback = "\nYour previous answer was refused:\n" + "\n".join(f"- {p}" for p in problems) + "\nTry again."
    raise ModelingError(f"initial state does not conform to the plan after {attempts} tries: {'; '.join(problems)}")


async def load_check(pool: SandboxPool, environment: Environment, state: dict[str, Any]) -> None:
    """Instantiate the class in the sandbox with the state; ``ModelingError`` if it does not load (a lost
    worker, ``SandboxError``, is no verdict on the class and propagates)."""
    try:
        session = await pool.open_session(environment, state)
    except EnvironmentLoadError as exc:
        raise ModelingError(f"the class does not load in the sandbox: {exc}") from exc
    await session.close()
