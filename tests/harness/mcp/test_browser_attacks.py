"""A web page the user opens attacks the servers ``harness serve`` runs on 127.0.0.1, in a real browser (Debian's
chromium, headless). The page comes from another origin: another port of 127.0.0.1, or a made-up name the browser
resolves to 127.0.0.1 (the DNS-rebinding set-up). Its script tries a ``text/plain`` POST to the OpenEnv task route
(no CORS preflight), a WebSocket to ``/ws`` with a reset, and MCP ``initialize`` and ``tools/call``, each with and
without the credential in the URL (as if the page had learnt it), and writes what it saw into the page. The test
reads the servers, not only the page: every attempt reached a server and was refused, no OpenEnv session was opened
and no tool ran."""

from __future__ import annotations

import asyncio
import html
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from websockets.sync.client import connect

from harness.mcp.admin import SESSION_META_KEY
from tests.support.cli_process import REPO
from tests.support.mcp_wire import MODERN, initialize_body, intruder_call
from tests.support.serve_process import ServeProcess, serve_http

SEED = REPO / "datasets" / "seed"
ORIGINAL_PHONE = "+1-212-555-0101"
EVIL = "evil.example"

PAGE = """<!doctype html>
<html><body><pre id="results">running</pre>
<script>
const plan = __PLAN__;
const results = {};
const show = () => { document.getElementById("results").textContent = JSON.stringify(results); };
const settle = (promise, ms) => Promise.race([promise, new Promise(r => setTimeout(() => r("timeout"), ms))]);
function post(url, body, headers, mode) {
  return fetch(url, {method: "POST", mode: mode, headers: headers, body: body})
    .then(r => r.type === "opaque" ? "sent (opaque answer)" : "answered " + r.status, e => "error: " + e.message);
}
function socket(url) {
  return new Promise(resolve => {
    let ws;
    try { ws = new WebSocket(url); } catch (e) { resolve("error: " + e.message); return; }
    ws.onopen = () => ws.send(JSON.stringify({type: "reset", data: {scenario_id: plan.scenario}}));
    ws.onmessage = m => { resolve("message: " + String(m.data).slice(0, 120)); };
    ws.onerror = () => resolve("error event");
    ws.onclose = e => resolve("closed " + e.code);
  });
}
async function main() {
  for (const [name, target] of Object.entries(plan.attempts)) {
    if (target.kind === "ws") results[name] = await settle(socket(target.url), 4000);
    else results[name] = await settle(post(target.url, target.body, target.headers, target.mode), 4000);
    show();
  }
  results.done = true;
  show();
}
main();
</script></body></html>
"""


class AttackerSite:
    """The attacker's web server: one page, on a port of its own."""

    def __init__(self, page: str) -> None:
        body = page.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> AttackerSite:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "this test needs Debian's chromium: apt-get install -y chromium"
    return path


def open_in_browser(url: str, profile: Path, *extra: str) -> dict[str, Any]:
    completed = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=60000",
            "--dump-dom",
            *extra,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    start = completed.stdout.index('<pre id="results">') + len('<pre id="results">')
    seen: dict[str, Any] = json.loads(html.unescape(completed.stdout[start : completed.stdout.index("</pre>", start)]))
    return seen


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ServeProcess, ServeProcess]]:
    openenv = ["banking", "--envs", str(SEED), "--protocol", "openenv", "--port", "0", "--workers", "1"]
    mcp = ["airline_reservations", "--envs", str(SEED), "--transport", "http", "--port", "0", "--workers", "1"]
    with serve_http(openenv, verbose=True) as openenv_server, serve_http(mcp, verbose=True) as mcp_server:
        yield openenv_server, mcp_server


def count(server: ServeProcess, needle: str, *, at_least: int = 0) -> int:
    """Lines of the server's log holding ``needle``, waiting a while for ``at_least`` of them (the log is read
    as the server writes it)."""
    deadline = time.monotonic() + 30
    while sum(needle in line for line in server.lines) < at_least and time.monotonic() < deadline:
        time.sleep(0.1)
    return sum(needle in line for line in server.lines)


def phone_in(url: str, session_key: str) -> str:
    async def read() -> str:
        async with Client(url) as client:
            result = await client.call_tool_mcp(
                "get_customer", {"customer_id": "C-101"}, meta={SESSION_META_KEY: session_key}
            )
        assert result.structured_content is not None
        phone: str = result.structured_content["data"]["phone"]
        return phone

    return asyncio.run(read())


def attack_plan(openenv: ServeProcess, mcp: ServeProcess, host: str) -> dict[str, Any]:
    """What the page tries, against the servers reached through ``host`` (127.0.0.1, or the made-up name)."""
    openenv_bases = {
        "": f"http://{host}:{openenv.port}",
        " with the token": f"http://{host}:{openenv.port}/{openenv.token}",
    }
    mcp_bases = {"": f"http://{host}:{mcp.port}", " with the token": f"http://{host}:{mcp.port}/{mcp.token}"}
    call_headers, call_body = intruder_call("browser")
    attempts: dict[str, Any] = {}
    for suffix, base in openenv_bases.items():
        attempts["task route, text/plain" + suffix] = {
            "kind": "post",
            "url": f"{base}/banking/tasks",
            "body": '{"split": "test"}',
            "headers": {"Content-Type": "text/plain"},
            "mode": "no-cors",
        }
        attempts["WebSocket reset" + suffix] = {"kind": "ws", "url": base.replace("http://", "ws://") + "/ws"}
    for suffix, base in mcp_bases.items():
        attempts["MCP initialize, text/plain" + suffix] = {
            "kind": "post",
            "url": f"{base}/mcp",
            "body": initialize_body().decode(),
            "headers": {"Content-Type": "text/plain"},
            "mode": "no-cors",
        }
        attempts["MCP tools/call, text/plain" + suffix] = {
            "kind": "post",
            "url": f"{base}/mcp",
            "body": call_body.decode(),
            "headers": {"Content-Type": "text/plain"},
            "mode": "no-cors",
        }
        attempts["MCP tools/call with its headers" + suffix] = {
            "kind": "post",
            "url": f"{base}/mcp",
            "body": call_body.decode(),
            "headers": call_headers,
            "mode": "cors",
        }
    return {"scenario": "banking-001", "attempts": attempts, "protocol": MODERN}


@pytest.mark.parametrize("page_host", ["127.0.0.1", EVIL])
def test_a_web_page_from_another_origin_cannot_drive_either_server(
    servers: tuple[ServeProcess, ServeProcess], tmp_path: Path, page_host: str
) -> None:
    openenv, mcp = servers
    target_host = page_host  # the rebinding page aims at its own name, which the browser resolves to 127.0.0.1
    plan = attack_plan(openenv, mcp, target_host)
    opened_before = count(openenv, "opened (")
    refused_before = (count(openenv, "refused a"), count(mcp, "refused a"))
    with AttackerSite(PAGE.replace("__PLAN__", json.dumps(plan))) as site:
        extra = [f"--host-resolver-rules=MAP {EVIL} 127.0.0.1"] if page_host == EVIL else []
        seen = open_in_browser(f"http://{page_host}:{site.port}/attack.html", tmp_path / "profile", *extra)

    assert seen.pop("done") is True, seen
    assert set(seen) == set(plan["attempts"])
    # What the page could tell: no WebSocket ever carried a message, no answer was readable.
    for name, outcome in seen.items():
        assert not str(outcome).startswith(("message:", "answered 2")), (name, outcome)

    # What the servers did: each attempt reached one and was refused at the door...
    openenv_attempts = sum(1 for name in plan["attempts"] if name.startswith(("task", "WebSocket")))
    mcp_attempts = len(plan["attempts"]) - openenv_attempts
    refused_openenv = count(openenv, "refused a", at_least=refused_before[0] + openenv_attempts) - refused_before[0]
    refused_mcp = count(mcp, "refused a", at_least=refused_before[1] + mcp_attempts) - refused_before[1]
    assert refused_openenv >= openenv_attempts, openenv.log[-3000:]
    assert refused_mcp >= mcp_attempts, mcp.log[-3000:]
    # From another port of 127.0.0.1 the Origin gives the page away; under the made-up name, already the Host.
    reason = f"Origin 'http://{page_host}:{site.port}' may not use" if page_host != EVIL else f"Host '{EVIL}:"
    assert count(openenv, reason) >= openenv_attempts and count(mcp, reason) >= mcp_attempts
    # ...so no OpenEnv session was opened (the server logs in order: once the line of a session opened now with the
    # credential is read, one the page had opened would be counted) and no MCP tool ran: the session the page named
    # still has the old phone.
    with connect(openenv.url.replace("http://", "ws://") + "/ws", open_timeout=60) as websocket:
        websocket.send(json.dumps({"type": "reset", "data": {"scenario_id": "banking-001"}}))
        assert json.loads(websocket.recv(timeout=120))["type"] == "observation"
    assert count(openenv, "opened (", at_least=opened_before + 1) == opened_before + 1
    assert phone_in(mcp.url, "browser") == ORIGINAL_PHONE
