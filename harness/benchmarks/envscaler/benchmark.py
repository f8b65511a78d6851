"""EnvScaler as the engine sees it: ``harness import envscaler``, the ``envscaler`` rules, upstream's reward for
trainers, and the citation every dataset card carries (the project's record format is EnvScaler's)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.registry import NEW_LIBRARY, Benchmark, CliOption, ImportCommand, ImportNote, ImportResult, RunSettings
from harness.schema import Environment

from .rules import ENVSCALER_RULES, upstream_reward

CITATION = """\
@misc{envscaler,
  title        = {EnvScaler: Scaling Tool-Interactive Environments for LLM Agent via Programmatic Synthesis},
  year         = {2026},
  howpublished = {\\url{https://github.com/RUC-NLPIR/EnvScaler}}
}"""


def import_release(options: dict[str, Any]) -> ImportResult:
    from .importer import import_envscaler

    out: Path = options["out"]
    report = import_envscaler(options["environments"], list(options["scenarios"] or []))
    return ImportResult(
        environments=report.environments,
        scenarios=report.scenarios,
        notes=[ImportNote(label="skipped", text=problem) for problem in report.problems],
        summary=[f"Imported {len(report.environments)} environments and {len(report.scenarios)} scenarios into {out}"],
        complete=bool(report.environments or report.scenarios),
    )


def recommend(environments: Sequence[Environment]) -> RunSettings:
    """Imported libraries run under upstream's runtime, so that they score as the paper's do."""
    return RunSettings(rules=ENVSCALER_RULES.name)


BENCHMARK = Benchmark(
    name="envscaler",
    title="EnvScaler",
    rank=10,
    profiles=(ENVSCALER_RULES,),
    importer=ImportCommand(
        help="Import EnvScaler's released environments and scenarios.",
        options=(
            CliOption(
                name="environments",
                type="path",
                required=True,
                help="EnvScaler environments file (JSON list or dict by env_id).",
            ),
            NEW_LIBRARY,
            CliOption(name="scenarios", type="paths", help="Scenario files (RL or SFT); repeatable."),
        ),
        run=import_release,
    ),
    recommend=recommend,
    reward_components={"envscaler": upstream_reward},
    card_citation=CITATION,
)
