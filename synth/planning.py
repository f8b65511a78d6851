"""Planning: a theme becomes an enriched description, a state definition, rules and an operation list."""

from __future__ import annotations

from harness.schema import Usage
from synth.answers import Asker
from synth.records import ATTRIBUTE_TYPES, PARAMETER_TYPES, EnvironmentPlan, Theme
from synth.templates import load_template, similar_examples

MAX_TASKS_SHOWN = 8


async def plan_environment(asker: Asker, theme: Theme, usage: Usage) -> EnvironmentPlan:
    """The validated plan for one theme (``AnswerError`` when the model gives none)."""
    tasks = "\n".join(f"- {task}" for task in theme.tasks[:MAX_TASKS_SHOWN])
    example = similar_examples(theme.description + "\n" + tasks)
    messages = load_template("plan_environment").render(
        description=theme.description,
        tasks=tasks,
        example_name=example.name,
        example_metadata=example.metadata,
        example_tools=example.tools,
        attribute_types=", ".join(ATTRIBUTE_TYPES),
        parameter_types=", ".join(PARAMETER_TYPES),
    )
    return await asker.json(messages, EnvironmentPlan, "synth.planning", usage)
