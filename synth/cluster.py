"""What the synthesis pipelines ask of a cluster that runs their work elsewhere.

The pipelines plan the work and write the output; a cluster (``synth.distributed.RaySynthesis`` for ``--ray``)
only runs units and hands results back. The pipelines know it through these protocols alone, so they never import
the cluster code: the command that chooses ``--ray`` builds the cluster and passes it in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from harness.llm import LLMClient
    from harness.schema import Environment, Usage
    from synth.environment_build import EnvironmentBuild
    from synth.graph import ToolGraph
    from synth.records import Rejection, Theme

AttemptKind = Literal["scenarios", "queries"]


@dataclass(frozen=True)
class AttemptUnit:
    """One planned attempt as sent over the wire: the environment travels by id (every executor holds them)."""

    environment_id: str
    index: int
    key: str


class AttemptCluster(Protocol):
    """Runs the attempts of ``synth scenarios`` or ``synth queries``."""

    async def start(
        self,
        kind: AttemptKind,
        config: Any,
        environments: list[Environment],
        client: LLMClient,
        *,
        graph: ToolGraph | None = None,
    ) -> None:
        """Start executors for ``kind``; ``config`` is that pipeline's configuration record."""
        ...

    async def execute(
        self,
        units: list[AttemptUnit],
        on_record: Callable[[Any], None],
        may_start: Callable[[], bool] | None = None,
    ) -> int:
        """Run every unit once; ``on_record`` gets each finished attempt's record, in the calling process. Once
        ``may_start`` says no, no unit starts; returns how many did not."""
        ...


class EnvironmentCluster(Protocol):
    """Builds the environments of ``synth envs``."""

    async def build_environments(
        self,
        run: EnvironmentBuild,
        themes: list[Theme],
        discovery_usage: list[Usage],
        may_start: Callable[[], bool] | None = None,
    ) -> list[tuple[Environment | Rejection, dict[str, Usage]]]:
        """Each theme's environment (or its rejection) and what each stage spent, in the order of ``themes``; a
        theme not started because ``may_start`` said no has no entry."""
        ...
