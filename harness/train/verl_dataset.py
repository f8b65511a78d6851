"""The Parquet file verl's ``RLHFDataset`` reads: one row per scenario, laid out like verl's own example datasets.

``prompt`` is the chat the policy starts from (the agent's system prompt and the task; in conversational mode the
loop starts from the simulated user's first words instead, which only exist once the episode opens), ``agent_name``
picks the ``harness`` agent loop, and ``extra_info`` carries the ``scenario_id`` the loop opens and the ``mode``
it runs. No verl import:
the project's own environment writes the file, the trainer's reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.library import Library
from harness.rules.profiles import DEFAULT_RULES, RulesName
from harness.schema import Mode
from harness.train.trl_dataset import prompt_rows, system_prompt

AGENT_NAME = "harness"
"""The name the agent loop is registered under (``@register("harness")``)."""


def verl_rows(
    envs: Library | str | Path | None = None,
    *,
    rules: RulesName = DEFAULT_RULES,
    mode: Mode = "nonconv",
    environments: list[str] | None = None,
    scenarios: list[str] | None = None,
    split: str = "train",
) -> list[dict[str, Any]]:
    """One verl row per scenario of the library (or of ``environments``, or the listed ``scenarios``)."""
    from harness.train.trl_environment import as_library

    library = as_library(envs)
    by_id = {scenario.id: scenario for scenario in library.scenarios}
    rows = []
    for index, row in enumerate(
        prompt_rows(library, mode=mode, rules=rules, environments=environments, scenarios=scenarios)
    ):
        scenario = by_id[row["scenario_id"]]
        environment = library.environments[scenario.environment_id]
        rows.append(
            {
                "data_source": f"envharness/{environment.id}",
                "agent_name": AGENT_NAME,
                "prompt": [
                    {"role": "system", "content": system_prompt(environment, mode, rules)},
                    {"role": "user", "content": scenario.task},
                ],
                "ability": "tool_use",
                "extra_info": {
                    "scenario_id": scenario.id,
                    "environment": environment.id,
                    "mode": mode,
                    "index": index,
                    "split": split,
                },
            }
        )
    return rows


def write_verl_dataset(rows: list[dict[str, Any]], out: Path, *, split: str = "train") -> Path:
    """Write ``rows`` to ``out/<split>.parquet`` (the path verl's ``data.train_files`` takes); that path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{split}.parquet"
    pq.write_table(pa.Table.from_pylist(rows), target)
    return target
