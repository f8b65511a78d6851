"""``harness serve``: one environment of a library as an MCP server (stdio or streamable HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

# stdout is the protocol channel of a stdio server: everything this command says goes to stderr.
err_console = Console(stderr=True)


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"


def _fail(message: str, code: int = 2) -> typer.Exit:
    err_console.print(Text.assemble(("error:", "bold red"), " ", message))
    return typer.Exit(code)


def serve(
    env_id: Annotated[str, typer.Argument(metavar="ENV", help="Environment id in the library.")],
    envs: Annotated[
        str | None, typer.Option(help="Folder or Hub dataset id ORG/NAME or ORG/NAME@REV; default the seed library.")
    ] = None,
    scenario: Annotated[
        str | None,
        typer.Option(
            help="Scenario id whose initial state each session starts from "
            "(default: the environment's first scenario, or an empty state)."
        ),
    ] = None,
    transport: Annotated[Transport, typer.Option(help="stdio (one client) or http (streamable HTTP).")] = (
        Transport.STDIO
    ),
    host: Annotated[str, typer.Option(help="Address to listen on (http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (http).")] = 8765,
    path: Annotated[str, typer.Option(help="Endpoint path (http).")] = "/mcp",
    idle_timeout: Annotated[
        float, typer.Option(help="Seconds before an unused session's environment instance is evicted; 0: never.")
    ] = 600.0,
    workers: Annotated[int | None, typer.Option(help="Sandbox worker processes (default one per core).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the instances' frozen clock and random generators.")] = 0,
) -> None:
    """Serve an environment over MCP: its tools, with one sandboxed instance per MCP session or, for
    sessionless (2026-07-28) HTTP clients, per episode handle from the start_episode tool.

    The introduction and rules are the server's instructions. Loading a state and reading it back for scoring
    are administrative methods outside the tool listing (see docs/mcp.md).
    """
    from harness.library import LibraryError, load_library

    try:
        library = load_library(envs)
    except (LibraryError, OSError, ValueError) as exc:  # ValueError: HubLoadError, records that do not validate
        raise _fail(f"cannot load the library {envs or 'seed'}: {exc}") from None
    environment = library.environments.get(env_id)
    if environment is None:
        known = ", ".join(sorted(library.environments)) or "none"
        raise _fail(f"no environment {env_id!r} in {library.source.source}; known: {known}")
    scenarios = library.scenarios_for(env_id)
    initial_state: dict[str, Any] = {}
    if scenario is not None:
        chosen = next((s for s in scenarios if s.id == scenario), None)
        if chosen is None:
            raise _fail(f"no scenario {scenario!r} for environment {env_id!r}")
        initial_state = chosen.initial_state
    elif scenarios:
        initial_state = scenarios[0].initial_state

    from harness.mcp.server import EnvironmentServer

    server = EnvironmentServer(
        environment,
        initial_state=initial_state,
        scenarios=scenarios,
        workers=workers,
        idle_timeout_s=idle_timeout or None,
        seed=seed,
    )

    async def run() -> None:
        async with server:
            if transport is Transport.STDIO:
                await server.serve_stdio()
            else:
                err_console.print(f"Serving {environment.id} over MCP at http://{host}:{port}{path}")
                await server.serve_http(host, port, path=path)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


def register(app: typer.Typer) -> None:
    """Add ``serve`` to the ``harness`` command line."""
    app.command("serve")(serve)


def main() -> None:
    """``python -m harness.cli_serve ENV ...``: the same command, without the rest of the command line."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(app)
    app()


if __name__ == "__main__":
    main()
