"""What the sandbox raises: its own failure, an environment that cannot load or fails its session, and a
confinement too weak for the code asked to run."""

from __future__ import annotations

from typing import Any

from harness.errors import BadInput


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the environment): the episode should end as an infrastructure error."""


class EnvironmentLoadError(ValueError):
    """The environment code is refused by the static checks, or its class cannot be built from the state (its
    constructor raises, loops past its CPU-time limit or ends its process). ``timed_out``: the load used up its
    CPU-time limit (the child's own timer)."""

    def __init__(self, message: str, *, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


class EnvironmentFailed(SandboxError):
    """The environment's own process failed its session: it kept dying, stopping or exiting on its own, or broke
    the channel's protocol. The environment is at fault, not the sandbox."""


class WeakSandbox(BadInput, SandboxError):
    """A confinement layer is missing and the code to run is not from a trusted local folder (bad input: the
    user must opt in with --allow-weak-sandbox)."""


def weak_sandbox_message(missing: list[dict[str, Any]]) -> str:
    """Why code that is not the user's own is refused on this machine."""
    names = ", ".join(f"{layer['name']} ({layer['detail']})" for layer in missing)
    return (
        f"confinement layers missing on this machine: {names}; refusing to run code that is not from a local "
        "folder (a Hub dataset, an imported source) (pass --allow-weak-sandbox to run it anyway; `harness doctor` "
        "explains each layer)"
    )
