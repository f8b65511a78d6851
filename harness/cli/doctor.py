"""``harness doctor``: which confinement layers the sandbox has on this machine, checked on a real child, and what
each one guarantees to the user running it."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.table import Table

from harness.cli.aio import run_to_end
from harness.cli.errors import RefusingCommand
from harness.console import console, markup_text, outside
from harness.registry import jail_environments
from harness.sandbox import SandboxError
from harness.sandbox.jail_environment import cache_root, cached_environments
from harness.sandbox.spec import JailSpec

GUARANTEES: dict[str, str] = {
    "environment": "your environment variables (API keys, tokens): never handed to environment code",
    "rlimits": "memory, file sizes and descriptors of each sandbox process: capped",
    "not_dumpable": "a sandbox process's memory: not readable or traceable by other processes of your user",
    "no_new_privs": "setuid programs: cannot raise a sandbox process's privileges",
    "landlock": "your files: unreadable (only the Python standard library is), nothing writable",
    "signal_scope": "signals (kill, a descriptor's owner): none reaches a process outside the sandbox process",
    "seccomp": "programs, processes, sockets, file locks, descriptor owners: none can be started, opened or set",
    "network_namespace": "the network: none (no interface is up)",
    "uts_namespace": "this machine's name: hidden (sandbox processes read 'sandbox')",
    "pid_namespace": (
        "other processes of your user, other sessions, the harness and the zygote: invisible and out of reach "
        "(PID namespace)"
    ),
    "mount_namespace": "the filesystem: only the standard library's folders exist for a sandbox process",
}
"""What each layer means to the person running the harness, in the words ``harness doctor`` prints."""


def guarantee(name: str) -> str:
    if name == "unprivileged_user":
        if os.geteuid() == 0:
            return "each sandbox process: a uid of its own that no account and no other sandbox process holds"
        return "each sandbox process: runs as your user but without any capability, in the namespaces below"
    return GUARANTEES.get(name, "")


def environment_rows() -> list[dict[str, object]]:
    """The jail environments: each one the installed benchmarks declare (built or not), then any other built one
    the cache holds (an older pin, another benchmark's)."""
    built = {folder.name: (folder, record) for folder, record in cached_environments()}
    rows: list[dict[str, object]] = []
    for name, environment in sorted(jail_environments().items()):
        folder, record = built.pop(environment.key, (cache_root() / environment.key, None))
        rows.append(
            {
                "benchmark": name,
                "requirements": list(environment.requirements),
                "reference": environment.reference,
                "folder": str(folder),
                "built": record is not None,
                "installed": (record or {}).get("installed", {}),
            }
        )
    for folder, record in (built[key] for key in sorted(built)):
        rows.append(
            {
                "benchmark": str(record.get("name", "")),
                "requirements": _strings(record.get("requirements")),
                "reference": str(record.get("reference", "")),
                "folder": str(folder),
                "built": True,
                "installed": record.get("installed", {}),
                "declared": False,
            }
        )
    return rows


def _strings(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _environment_table(rows: list[dict[str, object]]) -> Table:
    table = Table(title=f"Jail environments (cache: {cache_root()})")
    table.add_column("benchmark")
    table.add_column("pins")
    table.add_column("built")
    table.add_column("folder", overflow="fold")
    for row in rows:
        mark = "[green]yes[/green]" if row["built"] else "[yellow]not yet (built on first use)[/yellow]"
        if row.get("declared") is False:
            mark += " (no installed benchmark declares it)"
        pins = ", ".join(_strings(row["requirements"]))
        table.add_row(outside(str(row["benchmark"]), multiline=False), outside(pins), mark, outside(str(row["folder"])))
    return table


async def _layers() -> list[dict[str, object]]:
    async with JailSpec().pool() as pool:
        return list(pool.layers)


def doctor_report(console: Console, *, json_output: bool = False) -> int:
    """Print the layer table; 0 when every layer is active, 1 when any is missing, 2 when no sandbox starts."""
    try:
        layers = run_to_end(_layers())
    except SandboxError as exc:
        console.print(f"[red]the sandbox does not start on this machine: {markup_text(exc)}[/red]", soft_wrap=True)
        return 2
    layers = [{**layer, "guarantee": guarantee(str(layer["name"]))} for layer in layers]
    missing = [layer for layer in layers if not layer["active"]]
    environments = environment_rows()
    if json_output:
        payload = {"ok": not missing, "uid": os.geteuid(), "layers": layers, "jail_environments": environments}
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 1 if missing else 0
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    table = Table(title=f"Sandbox confinement on this machine, for {who}")
    table.add_column("layer")
    table.add_column("active")
    table.add_column("what it guarantees you", overflow="fold")
    table.add_column("detail", overflow="fold")
    for layer in layers:
        mark = "[green]yes[/green]" if layer["active"] else "[red]no[/red]"
        promise = str(layer["guarantee"]) if layer["active"] else f"NOT guaranteed: {layer['guarantee']}"
        table.add_row(outside(layer["name"], multiline=False), mark, promise, outside(layer["detail"]))
    console.print(table)
    console.print(_environment_table(environments))
    if missing:
        console.print(
            f"[yellow]{len(missing)} layer(s) missing: local folders still run (with a warning); code from the Hub "
            "is refused unless you pass --allow-weak-sandbox.[/yellow]"
        )
        return 1
    console.print("[green]every layer is active: code from the Hub runs in the full jail.[/green]")
    return 0


def doctor(
    json_output: Annotated[bool, typer.Option("--json", help="Print the layers as JSON.")] = False,
) -> None:
    """Show which sandbox confinement layers are active on this machine, and why any is missing."""
    raise typer.Exit(doctor_report(console, json_output=json_output))


def register(app: typer.Typer) -> None:
    """Add ``doctor`` to the ``harness`` command."""
    app.command(cls=RefusingCommand)(doctor)
