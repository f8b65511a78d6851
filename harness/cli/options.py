"""Options that commands without a config of their own (validate, synth) share with ``harness run``: the help
text is the matching ``RunConfig`` field's description, so it is written once."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.run.config import RunConfig

AllowWeakSandbox = Annotated[bool, typer.Option(help=RunConfig.model_fields["allow_weak_sandbox"].description)]
RayAddress = Annotated[str | None, typer.Option(help=RunConfig.model_fields["ray"].description)]
