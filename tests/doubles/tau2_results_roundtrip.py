"""Run in the τ² venv (tests/support/tau2_venv.py): parse Results files with upstream's own model and print what it
read, as JSON on stdout: per file, the info block, the task ids and evaluation criteria it validated, and every
simulation as upstream's model dumps it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
from tau2.data_model.simulation import Results


def read(path: Path) -> dict[str, object]:
    results = Results.load(path)
    kinds = {AssistantMessage: "assistant", UserMessage: "user", ToolMessage: "tool"}
    return {
        "info": results.info.model_dump(mode="json"),
        "tasks": {task.id: task.evaluation_criteria is not None for task in results.tasks},
        "simulations": [
            {
                **simulation.model_dump(mode="json"),
                "message_classes": [
                    kinds.get(type(message), type(message).__name__) for message in simulation.messages
                ],
            }
            for simulation in results.simulations
        ],
    }


if __name__ == "__main__":
    json.dump({name: read(Path(name)) for name in sys.argv[1:]}, sys.stdout)
