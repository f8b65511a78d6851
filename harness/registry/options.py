"""Options that several benchmarks' commands share, declared once (the command line's own flags of the same name
take their help from here too)."""

from __future__ import annotations

from harness.registry.records import CliOption

ALLOW_WEAK_SANDBOX_HELP = "Run Hub code even when a confinement layer is missing (see `harness doctor`)."

ALLOW_WEAK_SANDBOX = CliOption(name="allow_weak_sandbox", type="flag", default=False, help=ALLOW_WEAK_SANDBOX_HELP)
"""For a command that runs a library's code (an export that replays a run)."""

ALLOW_WEAK_SANDBOX_IMPORT = CliOption(
    name="allow_weak_sandbox",
    type="flag",
    default=False,
    help="Replay the source's gold even when a confinement layer is missing (see `harness doctor`): the source's "
    "code is someone else's, so by default it runs only under every layer.",
)
"""For an import that replays the source's gold in the jail."""

DEBUG = CliOption(name="debug", type="flag", flag="--debug", default=False, help="Show tracebacks.")

SANDBOX_WORKERS = CliOption(
    name="workers", type="integer", default=0, help="Sandbox worker processes (default: one per core)."
)

NEW_LIBRARY = CliOption(
    name="out", type="path", required=True, help="Folder to write the library to (must not exist, or be empty)."
)
