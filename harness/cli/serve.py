"""``harness serve``: one environment of a library as an MCP server (stdio or streamable HTTP)."""

from __future__ import annotations

import contextlib
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

# stdout is the protocol channel of a stdio server: everything this command says goes to stderr.
from harness.cli.aio import run_to_end
from harness.cli.errors import RefusingCommand
from harness.console import err_console, labelled
from harness.errors import BadInput

if TYPE_CHECKING:
    from harness.library import Library
    from harness.sandbox import SandboxPool
    from harness.schema import Environment, Scenario


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"


class Protocol(StrEnum):
    MCP = "mcp"
    OPENENV = "openenv"


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
    include_invalid: Annotated[
        bool, typer.Option(help="Also offer scenarios that `harness validate` finds invalid.")
    ] = False,
    transport: Annotated[Transport, typer.Option(help="stdio (one client) or http (streamable HTTP).")] = (
        Transport.STDIO
    ),
    host: Annotated[str, typer.Option(help="Address to listen on (http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (http).")] = 8765,
    path: Annotated[str, typer.Option(help="Endpoint path (http).")] = "/mcp",
    idle_timeout: Annotated[
        float, typer.Option(help="Seconds before an unused session's environment instance is evicted; 0: never.")
    ] = 600.0,
    protocol: Annotated[
        Protocol,
        typer.Option(help="mcp, or openenv: OpenEnv 0.10's HTTP + WebSocket server (reset/step/state, always HTTP)."),
    ] = Protocol.MCP,
    max_sessions: Annotated[int, typer.Option(help="Concurrent OpenEnv sessions at most (openenv).")] = 8,
    workers: Annotated[int | None, typer.Option(help="Sandbox zygotes (fork servers; default 1).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the instances' frozen clock and random generators.")] = 0,
    allow_weak_sandbox: Annotated[
        bool, typer.Option(help="Serve Hub code even when a confinement layer is missing (see `harness doctor`).")
    ] = False,
) -> None:
    """Serve an environment over MCP: its tools, with one sandboxed instance per MCP session or, for
    sessionless (2026-07-28) HTTP clients, per episode handle from the start_episode tool.

    The introduction and rules are the server's instructions. Loading a state and reading it back for scoring
    are administrative methods outside the tool listing (see docs/mcp.md).

    With --protocol openenv: OpenEnv 0.10's HTTP + WebSocket server instead, one jailed episode per OpenEnv
    session, ended by the finish tool with the rules' reward (see docs/openenv.md).
    """
    from harness.library import LibraryError, load_library

    try:
        library = load_library(envs)
    except (LibraryError, OSError, ValueError) as exc:  # ValueError: HubLoadError, records that do not validate
        raise BadInput(f"cannot load the library {envs or 'seed'}: {exc}") from None
    environment = library.environments.get(env_id)
    if environment is None:
        known = ", ".join(sorted(library.environments)) or "none"
        raise BadInput(f"no environment {env_id!r} in {library.source.source}; known: {known}")
    scenarios = library.scenarios_for(env_id)
    if scenario is not None and all(s.id != scenario for s in scenarios):
        raise BadInput(f"no scenario {scenario!r} for environment {env_id!r}")

    if max_sessions < 1:
        raise BadInput(f"--max-sessions must be at least 1, not {max_sessions}")
    if protocol is Protocol.OPENENV:
        from harness.train.openenv_server import FINISH_TOOL

        if FINISH_TOOL in environment.tool_names:
            raise BadInput(f"{env_id} has a tool named {FINISH_TOOL!r}, the tool that ends an OpenEnv episode")

    from harness.mcp.server import EnvironmentServer
    from harness.registry import jail_modules
    from harness.sandbox import WeakSandbox
    from harness.sandbox.policy import optional_modules_named_in
    from harness.sandbox.spec import JailSpec
    from harness.validate import invalid_scenarios

    # One pool serves the screening and the sessions, so whatever confinement it requires covers both.
    pool = JailSpec.for_code(
        library.code_origin,
        allow_weak_sandbox=allow_weak_sandbox,
        workers=workers,
        optional_modules=optional_modules_named_in(
            [library.environments[env_id].code, *(check.source for s in scenarios for check in s.checks)],
            jail_modules(),
        ),
    ).pool()

    async def run() -> None:
        try:
            await pool.start()
        except WeakSandbox as exc:
            raise BadInput(str(exc)) from None
        async with pool:
            offered = _offered(await invalid_scenarios(pool, library, scenarios), scenarios, scenario, include_invalid)
            first = offered[0] if offered else None
            chosen = next((s for s in offered if s.id == scenario), None) if scenario is not None else first
            if protocol is Protocol.OPENENV:
                await _serve_openenv(
                    library, environment, offered, chosen, pool, host, port, max_sessions, idle_timeout or None, seed
                )
                return
            initial_state: dict[str, Any] = chosen.initial_state if chosen is not None else {}
            server = EnvironmentServer(
                environment,
                initial_state=initial_state,
                scenarios=offered,
                pool=pool,
                idle_timeout_s=idle_timeout or None,
                seed=seed,
            )
            async with server:
                if transport is Transport.STDIO:
                    await server.serve_stdio()
                else:
                    err_console.print(f"Serving {environment.id} over MCP at http://{host}:{port}{path}", markup=False)
                    await server.serve_http(host, port, path=path)

    with contextlib.suppress(KeyboardInterrupt):
        run_to_end(run())


async def _serve_openenv(
    library: Library,
    environment: Environment,
    offered: list[Scenario],
    chosen: Scenario | None,
    pool: SandboxPool,
    host: str,
    port: int,
    max_sessions: int,
    idle_timeout_s: float | None,
    seed: int,
) -> None:
    from harness.train.jailed_episode import EpisodeSettings
    from harness.train.openenv_server import OpenEnvServer

    # The scenarios were screened above: only the offered ones can be reset to, and none is screened again. The
    # pool already started with the confinement the library requires, so the episodes do not check it again.
    settings = EpisodeSettings(
        library=library,
        environment_id=environment.id,
        include_invalid=True,
        allow_weak_sandbox=True,
        scenarios={s.id: s for s in offered},
    )
    server = OpenEnvServer(
        settings,
        pool,
        environment,
        max_sessions=max_sessions,
        idle_timeout_s=idle_timeout_s,
        default_scenario_id=chosen.id if chosen is not None else None,
        seed=seed,
    )
    err_console.print(
        f"Serving {environment.id} to OpenEnv clients at http://{host}:{port} "
        f"({len(offered)} scenarios, at most {max_sessions} sessions)",
        markup=False,
    )
    await server.serve(host, port)


def _offered(
    invalid: dict[str, str], scenarios: list[Scenario], scenario: str | None, include_invalid: bool
) -> list[Scenario]:
    """The scenarios a client may load: the valid ones (all with ``include_invalid``); each invalid one named."""
    for scenario_id, problem in invalid.items():
        action = "offered anyway (--include-invalid)" if include_invalid else "not offered"
        err_console.print(labelled("invalid scenario", "yellow", f"{scenario_id}, {action}: {problem}"), soft_wrap=True)
    if scenario is not None and scenario in invalid and not include_invalid:
        raise BadInput(f"scenario {scenario!r} is invalid: {invalid[scenario]} (pass --include-invalid to serve it)")
    return scenarios if include_invalid else [s for s in scenarios if s.id not in invalid]


def register(app: typer.Typer) -> None:
    """Add ``serve`` to the ``harness`` command line."""
    app.command("serve", cls=RefusingCommand)(serve)


def main() -> None:
    """``python -m harness.cli.serve ENV ...``: the same command, without the rest of the command line."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(app)
    app()


if __name__ == "__main__":
    main()
