"""``harness serve``: one environment of a library as an MCP server (stdio or streamable HTTP)."""

from __future__ import annotations

import contextlib
import socket
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

# stdout is the protocol channel of a stdio server: everything this command says goes to stderr.
from harness.cli.aio import run_to_end
from harness.cli.errors import RefusingCommand
from harness.console import err_console, labelled
from harness.errors import BadInput
from harness.mcp.access import DEFAULT_MAX_REQUEST_BYTES
from harness.mcp.credential import TOKEN_VARIABLE, server_url
from harness.mcp.sessions import DEFAULT_MAX_SESSIONS as DEFAULT_MCP_SESSIONS

if TYPE_CHECKING:
    from harness.library import Library
    from harness.mcp.access import AccessPolicy
    from harness.sandbox import SandboxPool
    from harness.schema import Environment, Scenario


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"


class Protocol(StrEnum):
    MCP = "mcp"
    OPENENV = "openenv"


DEFAULT_OPENENV_SESSIONS = 8


NO_AUTH_HELP = (
    "Serve without a credential (loopback only). Any local user, and any web page whose Host and Origin pass the "
    "checks, can then drive the jailed sessions."
)


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
    transport: Annotated[
        Transport, typer.Option(help="stdio (one client; the pipe is the credential) or http (streamable HTTP).")
    ] = Transport.STDIO,
    host: Annotated[
        str, typer.Option(help="Address to listen on (http); one that is not loopback needs --allow-remote.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (http; 0: any free port).")] = 8765,
    path: Annotated[str, typer.Option(help="Endpoint path (http).")] = "/mcp",
    idle_timeout: Annotated[
        float,
        typer.Option(help="Seconds before an unused session is closed and its environment instance evicted; 0: never."),
    ] = 600.0,
    protocol: Annotated[
        Protocol,
        typer.Option(help="mcp, or openenv: OpenEnv 0.10's HTTP + WebSocket server (reset/step/state, always HTTP)."),
    ] = Protocol.MCP,
    max_sessions: Annotated[
        int | None,
        typer.Option(
            help=f"Sessions (environment instances) alive at once at most; default {DEFAULT_OPENENV_SESSIONS} "
            f"(openenv) or {DEFAULT_MCP_SESSIONS} (mcp)."
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help=f"Read the server's credential from this file (mode 600) instead of making one; {TOKEN_VARIABLE} "
            "in the environment is the other way to fix it (http)."
        ),
    ] = None,
    no_auth: Annotated[bool, typer.Option("--no-auth", help=NO_AUTH_HELP)] = False,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(help="Also answer requests whose Host header names this host; repeatable (http)."),
    ] = None,
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(help="Also admit browser pages of this origin, e.g. http://localhost:3000; repeatable (http)."),
    ] = None,
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="Allow a --host other machines can reach (http).")
    ] = False,
    max_request_bytes: Annotated[
        int,
        typer.Option(
            help="Bytes of one HTTP request body or WebSocket message at most (default: the largest state "
            "the jail admits, plus its envelope)."
        ),
    ] = DEFAULT_MAX_REQUEST_BYTES,
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

    An HTTP server answers only loopback host names (and --allow-host), refuses browser pages of other origins,
    and needs its credential: the first line it prints is the URL to pass, with the credential in it.
    """
    from harness.library import LibraryError, load_library

    over_http = protocol is Protocol.OPENENV or transport is Transport.HTTP
    sessions = (
        max_sessions
        if max_sessions is not None
        else (DEFAULT_OPENENV_SESSIONS if protocol is Protocol.OPENENV else DEFAULT_MCP_SESSIONS)
    )
    problems = []
    if sessions < 1:
        problems.append(f"--max-sessions must be at least 1, not {sessions}")
    if not 0 <= port <= 65535:
        problems.append(f"--port must be between 0 and 65535, not {port}")
    access = _access_policy(
        problems,
        over_http,
        host,
        token_file,
        no_auth,
        allow_host or [],
        allow_origin or [],
        allow_remote,
        max_request_bytes,
    )

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

    if protocol is Protocol.OPENENV:
        from harness.train.openenv_server import FINISH_TOOL

        if FINISH_TOOL in environment.tool_names:
            raise BadInput(f"{env_id} has a tool named {FINISH_TOOL!r}, the tool that ends an OpenEnv episode")

    from harness.mcp.server import EnvironmentServer
    from harness.registry import jail_environments, jail_modules
    from harness.sandbox import WeakSandbox
    from harness.sandbox.policy import optional_modules_named_in
    from harness.sandbox.spec import JailSpec
    from harness.validate import invalid_scenarios

    listener = None
    if access is not None:
        listener = _listen(host, port)
        port = listener.getsockname()[1]
        endpoint = "" if protocol is Protocol.OPENENV else path
        # The first line: what a client passes (the credential goes only to this terminal, never to a log).
        url = server_url(_reachable(host), port, access.token, endpoint)
        err_console.print(url, markup=False, highlight=False, soft_wrap=True)

    # One pool serves the screening and the sessions, so whatever confinement it requires covers both.
    pool = JailSpec.for_code(
        library.code_origin,
        allow_weak_sandbox=allow_weak_sandbox,
        workers=workers,
        optional_modules=optional_modules_named_in(
            [library.environments[env_id].code, *(check.source for s in scenarios for check in s.checks)],
            jail_modules(),
        ),
        environment=jail_environments().get(library.environments[env_id].provenance.source),
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
                assert access is not None and listener is not None
                await _serve_openenv(
                    library, environment, offered, chosen, pool, access, listener, sessions, idle_timeout or None, seed
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
                max_sessions=sessions,
            )
            async with server:
                if access is None:
                    await server.serve_stdio()
                    return
                assert listener is not None
                err_console.print(
                    f"Serving {environment.id} over MCP (streamable HTTP) at the URL above: {len(offered)} scenarios, "
                    f"at most {sessions} environment instances; {_credential_note(access)}",
                    markup=False,
                )
                await server.serve_http(access, host, listener.getsockname()[1], path=path, sock=listener)

    try:
        with contextlib.suppress(KeyboardInterrupt):
            run_to_end(run())
    finally:
        if listener is not None:
            listener.close()


def _access_policy(
    problems: list[str],
    over_http: bool,
    host: str,
    token_file: Path | None,
    no_auth: bool,
    hosts: list[str],
    origins: list[str],
    allow_remote: bool,
    max_request_bytes: int,
) -> AccessPolicy | None:
    """Who may use an HTTP server (None for stdio, where the pipe is the credential); raises BadInput with
    ``problems`` and every problem with the access flags, one line each."""
    from harness.mcp.access import AccessError, AccessPolicy, is_loopback
    from harness.mcp.credential import CredentialError, fixed_token, make_token

    if not over_http:
        given = [
            flag
            for flag, value in (
                ("--token-file", token_file is not None),
                ("--no-auth", no_auth),
                ("--allow-host", bool(hosts)),
                ("--allow-origin", bool(origins)),
                ("--allow-remote", allow_remote),
            )
            if value
        ]
        if given:
            problems.append(
                f"{', '.join(given)}: for HTTP servers only (--transport http or --protocol openenv); "
                "a stdio server has no network door (its pipe is the credential)"
            )
        if problems:
            raise BadInput(*problems)
        return None
    loopback = is_loopback(host.strip("[]"))
    if not loopback and not allow_remote:
        problems.append(
            f"--host {host} can be reached from other machines: pass --allow-remote to mean it "
            "(and --allow-host for the names clients use), or listen on 127.0.0.1"
        )
    if no_auth and not loopback:
        problems.append(f"--no-auth is refused with --host {host}: a server other machines reach needs its credential")
    if no_auth and token_file is not None:
        problems.append("--no-auth and --token-file contradict each other: give one")
    if max_request_bytes < 1:
        problems.append(f"--max-request-bytes must be at least 1, not {max_request_bytes}")
    token: str | None = None
    if not no_auth:
        try:
            token = fixed_token(token_file) or make_token()
        except CredentialError as exc:
            problems.append(str(exc))
    policy = None
    try:
        policy = AccessPolicy.for_bind(
            host, token=token, hosts=hosts, origins=origins, max_request_bytes=max(max_request_bytes, 1)
        )
    except AccessError as exc:
        problems.append(str(exc))
    if problems or policy is None:
        raise BadInput(*problems)
    return policy


def _reachable(host: str) -> str:
    """The address a client on this machine uses for a server bound to ``host`` (loopback for a wildcard bind)."""
    from harness.mcp.access import is_wildcard

    bare = host.strip("[]")
    if is_wildcard(bare):
        return "::1" if ":" in bare else "127.0.0.1"
    return bare


def _listen(host: str, port: int) -> socket.socket:
    from harness.mcp.access import listening_socket

    try:
        return listening_socket(host, port)
    except OSError as exc:
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _credential_note(access: AccessPolicy) -> str:
    if access.token is None:
        return "no credential (--no-auth): any local user can use it"
    return "pass the URL whole, or its credential as Authorization: Bearer <token>"


async def _serve_openenv(
    library: Library,
    environment: Environment,
    offered: list[Scenario],
    chosen: Scenario | None,
    pool: SandboxPool,
    access: AccessPolicy,
    listener: socket.socket,
    max_sessions: int,
    idle_timeout_s: float | None,
    seed: int,
) -> None:
    from harness.episode_factory import EpisodeRecipe
    from harness.train.jailed_episode import EpisodeSettings
    from harness.train.openenv_server import OpenEnvServer

    # The scenarios were screened above: only the offered ones can be reset to, and none is screened again. The
    # pool already started with the confinement the library requires, so the episodes do not check it again.
    settings = EpisodeSettings(
        library=library,
        environment_id=environment.id,
        recipe=EpisodeRecipe(screen=False, allow_weak_sandbox=True),
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
        f"Serving {environment.id} to OpenEnv clients at the URL above ({len(offered)} scenarios, at most "
        f"{max_sessions} sessions); {_credential_note(access)}",
        markup=False,
    )
    host, port = listener.getsockname()[:2]
    await server.serve(access, host, port, sock=listener)


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
