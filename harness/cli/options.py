"""Options that several commands share, each declared once. Those that ``harness run`` also has take their help
from the matching ``RunConfig`` field's description, so it is written once."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.run.config import RunConfig

AllowWeakSandbox = Annotated[bool, typer.Option(help=RunConfig.model_fields["allow_weak_sandbox"].description)]
RayAddress = Annotated[str | None, typer.Option(help=RunConfig.model_fields["ray"].description)]
SandboxWorkers = Annotated[int, typer.Option(help=RunConfig.model_fields["workers"].description)]
ModelRpm = Annotated[int | None, typer.Option(help="Model requests per minute.")]
SynthMaxRequests = Annotated[
    int,
    typer.Option(
        min=1,
        help="Model requests in flight per endpoint, whatever number of units --concurrency keeps in flight (each "
        "may make several at once).",
    ),
]
ModelTpm = Annotated[int | None, typer.Option(help="Model tokens per minute.")]
RequestTimeout = Annotated[float, typer.Option(help="Seconds one model request may take.", min=0.001)]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Do not cache model answers under OUT.")]
PriceModel = Annotated[str, typer.Option(help="Price table row for the dollar figures.")]
EmbeddingModel = Annotated[
    str | None, typer.Option(help="litellm embedding model (default: bundled all-MiniLM-L6-v2).")
]
DedupSimilarity = Annotated[
    float, typer.Option(help="Embedding similarity at which tasks are duplicates (0: exact text only).")
]
SynthCostLimit = Annotated[
    float | None,
    typer.Option(
        min=0,
        help="Start no attempt once the spend recorded for OUT reaches this many USD (attempts in flight finish; a "
        "rerun with a higher limit continues). Every model called needs a price.",
    ),
]
