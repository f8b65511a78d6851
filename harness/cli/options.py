"""Options several commands share that no config declares (a config's fields get their flags from
:mod:`harness.cli.config_flags`)."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.run.config import RunConfig

AllowWeakSandbox = Annotated[bool, typer.Option(help=RunConfig.model_fields["allow_weak_sandbox"].description)]
RequestTimeout = Annotated[float, typer.Option(help=RunConfig.model_fields["timeout"].description)]
SkipBadRecords = Annotated[bool, typer.Option(help=RunConfig.model_fields["skip_bad_records"].description)]
RayAddress = Annotated[str | None, typer.Option(help=RunConfig.model_fields["ray"].description)]
