"""ACEBench's simulated user, as upstream's ``APIUSER`` (``model_inference/multi_turn/APIModel_user.py``) prompts it.

Its system prompt is a module constant per variant and language (``SYSTEM_PROMPT_{BASE,TRAVEL}_{EN,ZH}``, read as
literals), formatted with the task's question; the variant is BaseApi's when the task involves BaseApi, else
Travel's (``get_init_prompt``'s order). The line the user answers first is built in code: the ``user`` message of
``get_init_prompt``'s branch for the language, read from the method's syntax tree. Both are stored with each
multi_turn scenario (:class:`AceBenchUserPrompt`) and sent as they are.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.files import literal_message_contents

if TYPE_CHECKING:
    from harness.benchmarks.acebench.source import AceBenchSource

USER_MODULE = "model_inference/multi_turn/APIModel_user.py"
USER_CLASS = "APIUSER"
OPENING_METHOD = "get_init_prompt"
VARIANTS: tuple[str, ...] = ("BaseApi", "Travel")
"""The classes that pick the user's prompt, in the order upstream tests them."""
DETAILS_KEY = "acebench_user_prompt"
"""Where a scenario's provenance details keep its user prompt."""


class AceBenchUserPrompt(BaseModel):
    """The simulated user's system prompt template (``{instruction}`` in it) and the line it answers first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    source: str
    """Where the template was read: ``<file>:<constant>``."""
    template: str
    opening: str
    """The agent-side line the user answers first (never shown to the agent)."""

    def render(self, instruction: str) -> str:
        """The system prompt upstream's ``get_init_prompt`` builds: ``template.format(instruction=...)``."""
        return self.template.format(instruction=instruction)


class UserPromptShapeError(ValueError):
    """The checkout's user module is not shaped as the reader expects."""


def _is_language_test(test: ast.expr, language: str) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Attribute)
        and test.left.attr == "language"
        and isinstance(test.left.value, ast.Name)
        and test.left.value.id == "self"
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == language
    )


def read_opening(module: ast.Module, language: str, where: str) -> str:
    """The ``user`` line ``APIUSER.get_init_prompt`` puts after the system prompt for ``language``."""
    at = f"{where}:{USER_CLASS}.{OPENING_METHOD}"
    method = next(
        (
            item
            for node in module.body
            if isinstance(node, ast.ClassDef) and node.name == USER_CLASS
            for item in node.body
            if isinstance(item, ast.FunctionDef) and item.name == OPENING_METHOD
        ),
        None,
    )
    if method is None:
        raise UserPromptShapeError(f"{where}: no {USER_CLASS}.{OPENING_METHOD}")
    branches = [
        node for node in ast.walk(method) if isinstance(node, ast.If) and _is_language_test(node.test, language)
    ]
    contents = [text for branch in branches for text in literal_message_contents(branch.body, "user")]
    if len(contents) != 1:
        raise UserPromptShapeError(
            f"{at}: expected one literal user message in the `self.language == {language!r}` branch, "
            f"found {len(contents)}"
        )
    return contents[0]


def read_user_prompts(source: AceBenchSource, language: str) -> dict[str, AceBenchUserPrompt]:
    """Each variant's prompt for ``language`` (BaseApi's, Travel's), read from the checkout."""
    _, module = source.read_python(USER_MODULE)
    opening = read_opening(module, language, source.where(USER_MODULE))
    prompts: dict[str, AceBenchUserPrompt] = {}
    for variant in VARIANTS:
        name = f"SYSTEM_PROMPT_{'BASE' if variant == 'BaseApi' else 'TRAVEL'}_{language.upper()}"
        template = source.literal(USER_MODULE, name)
        if not isinstance(template, str):
            raise UserPromptShapeError(f"{source.where(USER_MODULE)}: {name} is not a string")
        prompts[variant] = AceBenchUserPrompt(source=f"{USER_MODULE}:{name}", template=template, opening=opening)
    return prompts


def pick_user_prompt(involved: list[str], prompts: dict[str, AceBenchUserPrompt]) -> AceBenchUserPrompt | None:
    """The variant upstream picks for a task's classes (None: upstream has no user prompt for it)."""
    return next((prompts[v] for v in VARIANTS if v in involved and v in prompts), None)


def stored_user_prompt(details: dict[str, object], scenario_id: str) -> AceBenchUserPrompt:
    """The user prompt a scenario was imported with; one imported before prompts were stored (or a multi_step
    task, which has no user upstream) is refused with one line."""
    stored = details.get(DETAILS_KEY)
    if stored is None:
        raise ValueError(
            f"scenario {scenario_id} has no ACEBench user prompt (a multi_step task has no user upstream; a "
            "multi_turn one was imported before the prompts were read from the source: re-import it with "
            "`harness import acebench`)"
        )
    try:
        return AceBenchUserPrompt.model_validate(stored)
    except ValidationError as exc:
        raise ValueError(
            f"scenario {scenario_id}: its ACEBench user prompt is not one this version reads "
            f"({exc.error_count()} problem(s)): re-import it with `harness import acebench`"
        ) from None
