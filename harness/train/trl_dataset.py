"""The prompt dataset TRL trains on: one row per scenario, with a conversational ``prompt`` and ``scenario_id``.

The prompt is the agent's system prompt and an opening user message whose text the environment supplies at
``reset`` (the task, or in conversational mode the simulated user's first words, which only exist once the
episode starts). The opening message also carries the ``scenario_id``, because a ``rollout_func`` sees prompts
only. ``environment`` names the environment, which TRL uses to pick a factory when there are several.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.library import Library
from harness.registry import rules_profile
from harness.rules.profiles import DEFAULT_RULES, RulesName
from harness.rules.prompts import rules_agent_system_prompt
from harness.schema import Environment, Mode, Scenario

if TYPE_CHECKING:
    from datasets import Dataset  # type: ignore[attr-defined]  # mypy sees the repo's datasets/ folder
    from harness.hub.card import CardInfo
    from harness.hub.publish import PublishResult

logger = logging.getLogger(__name__)

PROMPTS_CONFIG = "prompts"


def system_prompt(environment: Environment, mode: Mode, rules: RulesName) -> str:
    """The system prompt the episode gives the agent under ``rules`` (the one its rollouts are scored with).
    Rules that run only their own agent kinds (``EpisodeRules.agent_kinds``, an agent that writes its calls as text)
    are refused: the trainers' adapters read native tool calls."""
    profile = rules_profile(rules)
    if profile.agent_kinds is not None:
        raise ValueError(
            f"--rules {profile.name} runs only the {' or '.join(profile.agent_kinds)} agent (calls written as text), "
            "which the trainers' adapters do not parse: train under rules whose agent calls tools natively"
        )
    return rules_agent_system_prompt(environment, mode, profile)


def prompt_row(environment: Environment, scenario: Scenario, mode: Mode, rules: RulesName) -> dict[str, Any]:
    return {
        "prompt": [
            {"role": "system", "content": system_prompt(environment, mode, rules), "scenario_id": None},
            {"role": "user", "content": "", "scenario_id": scenario.id},
        ],
        "scenario_id": scenario.id,
        "environment": environment.id,
    }


def prompt_rows(
    envs: Library | str | Path | None = None,
    *,
    mode: Mode = "nonconv",
    rules: RulesName = DEFAULT_RULES,
    environments: list[str] | None = None,
    scenarios: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Rows for every scenario of the library (or of ``environments``, or the listed ``scenarios``)."""
    from harness.train.trl_environment import as_library

    library = as_library(envs)
    wanted = set(scenarios) if scenarios is not None else None
    unknown = sorted(wanted - {s.id for s in library.scenarios}) if wanted is not None else []
    if unknown:
        raise ValueError(f"scenarios not in the library: {', '.join(unknown)}")
    missing = sorted(set(environments or []) - set(library.environments))
    if missing:
        raise ValueError(f"environments not in the library: {', '.join(missing)}")
    rows = []
    for scenario in library.scenarios:
        if wanted is not None and scenario.id not in wanted:
            continue
        if environments is not None and scenario.environment_id not in environments:
            continue
        environment = library.environments.get(scenario.environment_id)
        if environment is None:
            logger.warning(
                "scenario %s skipped: environment %s is not in the library", scenario.id, scenario.environment_id
            )
            continue
        rows.append(prompt_row(environment, scenario, mode, rules))
    if not rows:
        raise ValueError("no scenario of the library matches; the prompt dataset would be empty")
    return rows


def prompt_dataset(
    envs: Library | str | Path | None = None,
    *,
    mode: Mode = "nonconv",
    rules: RulesName = DEFAULT_RULES,
    environments: list[str] | None = None,
    scenarios: list[str] | None = None,
) -> Dataset:
    """A ``datasets.Dataset`` of :func:`prompt_rows` (a library object, a folder or a Hub dataset id)."""
    from datasets import Dataset  # type: ignore[attr-defined]  # mypy sees the repo's datasets/ folder

    return Dataset.from_list(prompt_rows(envs, mode=mode, rules=rules, environments=environments, scenarios=scenarios))


_COLUMNS = [
    ("prompt", "list of messages", "The agent's system prompt and the opening user message (text set at reset)."),
    ("scenario_id", "string", "The scenario the environment opens at reset."),
    ("environment", "string", "The environment of the scenario (picks the TRL environment factory)."),
]


def write_prompt_dataset(dataset: Dataset, out: Path, *, repo_id: str | None = None) -> CardInfo:
    """Write ``dataset`` as a Hub-format folder in ``out``: a card and one Parquet file; the card's record."""
    from harness.hub.card import CardConfig, CardInfo, render_card

    relative = f"data/{PROMPTS_CONFIG}/train-00000-of-00001.parquet"
    target = out / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    dataset.to_parquet(str(target))
    config = CardConfig(
        name=PROMPTS_CONFIG,
        record_type="prompts",
        files=[relative],
        num_rows=len(dataset),
        columns=_COLUMNS,
        default=True,
        features=dataset.features._to_yaml_list(),
        num_bytes=dataset.data.nbytes,
        download_size=target.stat().st_size,
    )
    card = CardInfo(repo_id or "local/prompts", "prompts", [config])
    (out / "README.md").write_text(render_card(card), encoding="utf-8")
    return card


def publish_prompt_dataset(dataset: Dataset, folder: Path, repo_id: str, *, private: bool = False) -> PublishResult:
    """Write ``dataset`` in ``folder`` and upload it to the Hub dataset ``repo_id`` (harness.hub.publish)."""
    from harness.hub.build import BuiltDataset
    from harness.hub.publish import upload_built, validate_repo_id

    validate_repo_id(repo_id)
    card = write_prompt_dataset(dataset, folder, repo_id=repo_id)
    built = BuiltDataset(folder, "prompts", repo_id, card.configs, card)
    return upload_built(built, private=private)
