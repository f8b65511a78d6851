"""``harness doctor``: which confinement layers the sandbox has on this machine, checked on a real child."""

from __future__ import annotations

import asyncio
import sys

import orjson
from rich.console import Console
from rich.table import Table

from harness.console import markup_text, outside
from harness.sandbox import SandboxError, SandboxPool


async def _layers() -> list[dict[str, object]]:
    async with SandboxPool() as pool:
        return list(pool.layers)


def doctor(console: Console, *, json_output: bool = False) -> int:
    """Print the layer table; 0 when every layer is active, 1 when any is missing, 2 when no sandbox starts."""
    try:
        layers = asyncio.run(_layers())
    except SandboxError as exc:
        console.print(f"[red]the sandbox does not start on this machine: {markup_text(exc)}[/red]", soft_wrap=True)
        return 2
    missing = [layer for layer in layers if not layer["active"]]
    if json_output:
        payload = {"ok": not missing, "layers": layers}
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 1 if missing else 0
    table = Table(title="Sandbox confinement on this machine")
    table.add_column("layer")
    table.add_column("active")
    table.add_column("detail", overflow="fold")
    for layer in layers:
        mark = "[green]yes[/green]" if layer["active"] else "[red]no[/red]"
        table.add_row(outside(layer["name"], multiline=False), mark, outside(layer["detail"]))
    console.print(table)
    if missing:
        console.print(
            f"[yellow]{len(missing)} layer(s) missing: local folders still run (with a warning); code from the Hub "
            "is refused unless you pass --allow-weak-sandbox.[/yellow]"
        )
        return 1
    console.print("[green]every layer is active: code from the Hub runs in the full jail.[/green]")
    return 0
