"""A benchmark's jail environment as it declares it: the pinned third-party packages its environment code imports
(built and used by ``harness.sandbox.jail_environment``)."""

from __future__ import annotations

import hashlib
import json
import platform
import sys

from pydantic import BaseModel, ConfigDict, Field


class JailEnvironment(BaseModel):
    """The third-party packages a benchmark's environment code imports, pinned (see the module's docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$", description="The benchmark that declares it.")
    requirements: tuple[str, ...] = Field(
        min_length=1, description="Pinned requirements, `distribution==version` (their dependencies are resolved)."
    )
    modules: frozenset[str] = Field(
        min_length=1,
        description="The import names environment code uses (with the submodules the zygote imports ahead).",
    )
    reference: str = Field(description="Where the pins come from (upstream's lock file).")

    def pins(self) -> dict[str, str]:
        """Each requirement's distribution (normalised) and version."""
        pins: dict[str, str] = {}
        for requirement in self.requirements:
            distribution, separator, version = requirement.partition("==")
            if not separator or not distribution.strip() or not version.strip():
                raise ValueError(f"{requirement!r} is not pinned as distribution==version")
            pins[_normalise(distribution)] = version.strip()
        return pins

    @property
    def key(self) -> str:
        """The folder's name: the benchmark's, and a hash of the pins and of this interpreter and machine."""
        material = json.dumps(
            {
                "requirements": sorted(self.requirements),
                "python": sys.implementation.cache_tag,
                "abi": sys.abiflags,
                "machine": platform.machine(),
            },
            sort_keys=True,
        )
        return f"{self.name}-{hashlib.sha256(material.encode()).hexdigest()[:16]}"


def _normalise(distribution: str) -> str:
    return distribution.strip().lower().replace("_", "-").replace(".", "-")
