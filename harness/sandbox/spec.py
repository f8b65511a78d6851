"""The one recipe every sandbox pool is made from, and the one place the trust rule lives.

A :class:`JailSpec` says how many zygotes, which limits, which third-party modules a pool's children may import
(and from which jail environment, when the code's benchmark declares one), and whether every confinement layer is
required. :meth:`JailSpec.pool` is the only place a
:class:`~harness.sandbox.pool.SandboxPool` is built, so a new caller cannot forget the rule.

The trust rule (:func:`requires_full_confinement`): code that came from someone else (a Hub dataset, or a
benchmark's source being imported, whose gold replay runs the source's own code) runs only when every
confinement layer is active, unless the user opted out with ``--allow-weak-sandbox``. Code in a local folder the
user made runs with what this machine offers (``harness doctor`` lists it).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from harness.sandbox.limits import SandboxLimits
from harness.schema.jail import JailEnvironment

if TYPE_CHECKING:
    from harness.sandbox.pool import SandboxPool


class CodeOrigin(StrEnum):
    """Where the code a pool runs comes from, as far as trust goes."""

    LOCAL = "local"
    """A folder on this machine that the user made or chose to trust (the seed library, a synthesis output)."""
    HUB = "hub"
    """A dataset downloaded from the Hugging Face Hub."""
    SOURCE = "source"
    """A benchmark's downloaded source being imported (its gold replay runs the source's code)."""


def requires_full_confinement(origin: CodeOrigin, allow_weak_sandbox: bool) -> bool:
    """The trust rule: someone else's code needs every confinement layer unless the user opted out."""
    return origin is not CodeOrigin.LOCAL and not allow_weak_sandbox


class JailSpec(BaseModel):
    """What a pool is made of. Serialisable, so the same spec reaches Ray executors and trainer actors."""

    model_config = ConfigDict(frozen=True)

    workers: int | None = Field(default=None, ge=1, description="Zygotes (fork servers); None: one.")
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    full_confinement: bool = Field(
        default=False, description="Refuse to run any code unless every confinement layer is active."
    )
    optional_modules: frozenset[str] | None = Field(
        default=None, description="The jail modules the zygotes import ahead; None: every one."
    )
    jail_modules: frozenset[str] | None = Field(
        default=None,
        description="Third-party modules the children may import (names); None: those the installed benchmarks "
        "declare, read where the pool is made.",
    )
    environment: JailEnvironment | None = Field(
        default=None,
        description="The jail environment whose packages the children import (built into the cache when missing); "
        "None: the harness's own copies of the jail modules.",
    )

    @classmethod
    def for_code(
        cls,
        origin: CodeOrigin,
        *,
        allow_weak_sandbox: bool = False,
        workers: int | None = None,
        limits: SandboxLimits | None = None,
        optional_modules: Iterable[str] | None = None,
        environment: JailEnvironment | None = None,
    ) -> JailSpec:
        """The spec for code of ``origin``, with the trust rule applied."""
        return cls(
            workers=workers or None,
            limits=limits or SandboxLimits(),
            full_confinement=requires_full_confinement(origin, allow_weak_sandbox),
            optional_modules=None if optional_modules is None else frozenset(optional_modules),
            environment=environment,
        )

    def pool(self, *, code_to_lint: Iterable[str] = ()) -> SandboxPool:
        """A new pool made from this spec (start it, or use it as an async context manager)."""
        from harness.sandbox.pool import SandboxPool

        return SandboxPool(
            self.workers,
            self.limits,
            require_full_confinement=self.full_confinement,
            optional_modules=self.optional_modules,
            code_to_lint=code_to_lint,
            jail_modules=self.jail_modules,
            environment=self.environment,
        )


async def require_confinement(pool: SandboxPool, origin: CodeOrigin, allow_weak_sandbox: bool) -> None:
    """The trust rule applied to a pool made elsewhere (a caller's): :class:`~harness.sandbox.pool.WeakSandbox`
    before any code of ``origin`` runs in it when a confinement layer is missing and the rule asks for all."""
    if not requires_full_confinement(origin, allow_weak_sandbox):
        return
    from harness.sandbox.errors import WeakSandbox, weak_sandbox_message

    await pool.start()
    if pool.missing_layers:
        raise WeakSandbox(weak_sandbox_message(pool.missing_layers))
