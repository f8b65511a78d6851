"""``harness serve --transport http`` as a user runs it (the real CLI in a subprocess): the URL it prints first, the
credential it makes or is given (never through argv), the flags it refuses, another local user kept out, a 300 MB body
refused without the server's memory growing by it, and ``harness run --mcp URL`` through it, with ``--resume`` after
a restart, without the credential reaching the run folder or the terminal."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from fastmcp import Client

from harness.mcp.admin import SESSION_META_KEY
from harness.mcp.credential import TOKEN_VARIABLE
from tests.support.cli_process import REPO, harness, harness_cli
from tests.support.mcp_wire import INTRUDER_PHONE, intruder_call
from tests.support.openenv_client import free_port
from tests.support.serve_process import ServeProcess, serve_http
from tests.support.unprivileged import open_to_ordinary_user, run_as_ordinary_user

SEED = REPO / "datasets" / "seed"
ENV_ID = "airline_reservations"
HTTP = [ENV_ID, "--envs", str(SEED), "--transport", "http", "--workers", "1"]
ORIGINAL_PHONE = "+1-212-555-0101"
TOKEN = "fixed-" + "k" * 40


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


def proc_bytes(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def token_file(folder: Path, token: str = TOKEN, mode: int = 0o600) -> Path:
    path = folder / "token"
    path.write_text(token + "\n")
    path.chmod(mode)
    return path


def test_the_first_line_is_the_url_with_a_fresh_credential_and_real_clients_use_it() -> None:
    with serve_http([*HTTP, "--port", "0"]) as served:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]{43}/mcp", served.url), served.url
        assert served.lines[1].startswith(f"Serving {ENV_ID} over MCP")
        assert phone_in(served.url, "reader") == ORIGINAL_PHONE
        assert served.token.encode() not in proc_bytes(served.pid, "cmdline")
        assert served.token.encode() not in proc_bytes(served.pid, "environ")
        assert served.token not in "\n".join(served.lines[1:])


def test_a_token_file_fixes_the_credential_and_it_is_in_neither_argv_nor_the_environment(tmp_path: Path) -> None:
    path = token_file(tmp_path)
    with serve_http([*HTTP, "--port", "0", "--token-file", str(path)]) as served:
        assert served.token == TOKEN
        assert TOKEN.encode() not in proc_bytes(served.pid, "cmdline")
        assert TOKEN.encode() not in proc_bytes(served.pid, "environ")
        assert phone_in(served.url, "reader") == ORIGINAL_PHONE


def test_no_auth_serves_without_a_credential_and_says_what_it_gives_up() -> None:
    with serve_http([*HTTP, "--port", "0", "--no-auth"]) as served:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", served.url), served.url
        assert "no credential (--no-auth): any local user can use it" in served.lines[1]
        assert phone_in(served.url, "anyone") == ORIGINAL_PHONE
    helped = harness_cli("serve", "--help", env={"COLUMNS": "300"})
    assert "Any local user, and any web page whose Host and Origin pass the checks, can then drive the jailed" in (
        " ".join(helped.stdout.split())
    )


def test_a_wildcard_bind_needs_allow_remote_and_prints_a_url_this_machine_can_use() -> None:
    with serve_http([*HTTP, "--port", "0", "--host", "0.0.0.0", "--allow-remote", "--allow-host", "box.lan"]) as served:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]{43}/mcp", served.url), served.url
        assert phone_in(served.url, "reader") == ORIGINAL_PHONE


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--host", "0.0.0.0"], "--host 0.0.0.0 can be reached from other machines: pass --allow-remote"),
        (["--host", "0.0.0.0", "--allow-remote", "--no-auth"], "--no-auth is refused with --host 0.0.0.0"),
        (["--host", "192.0.2.1", "--allow-remote", "--no-auth"], "--no-auth is refused with --host 192.0.2.1"),
        (["--token-file", "{readable}"], "can be read or written by other users (mode 644): chmod 600"),
        (["--token-file", "{short}"], "must be 32 to 512 characters"),
        (["--token-file", "{missing}"], "cannot read --token-file"),
        (
            ["--token-file", "{private}", "--env-token"],
            f"give the token by --token-file or by {TOKEN_VARIABLE}, not both",
        ),
        (["--env-token-bad"], f"the token from {TOKEN_VARIABLE} must be 32 to 512 characters"),
        (["--allow-host", "evil host"], "--allow-host 'evil host' is not a host name"),
        (["--allow-origin", "localhost:3000"], "--allow-origin 'localhost:3000' is not an http(s) origin"),
        (["--max-request-bytes", "0"], "--max-request-bytes must be at least 1"),
        (["--max-sessions", "0"], "--max-sessions must be at least 1, not 0"),
        (["--port", "{busy}"], "cannot listen on 127.0.0.1:{busy}"),
        (["--transport", "stdio", "--no-auth"], "--no-auth: for HTTP servers only"),
        (["--transport", "stdio", "--token-file", "{private}"], "--token-file: for HTTP servers only"),
    ],
)
def test_bad_access_flags_are_refused_in_one_line_before_anything_is_served(
    tmp_path: Path, busy_port: int, flags: list[str], message: str
) -> None:
    for folder in ("readable", "short", "private"):
        (tmp_path / folder).mkdir()
    paths = {
        "readable": str(token_file(tmp_path / "readable", mode=0o644)),
        "short": str(token_file(tmp_path / "short", token="short")),
        "private": str(token_file(tmp_path / "private")),
        "missing": str(tmp_path / "nowhere"),
        "busy": str(busy_port),
    }
    env = {}
    if "--env-token" in flags:
        env[TOKEN_VARIABLE] = TOKEN
    if "--env-token-bad" in flags:
        env[TOKEN_VARIABLE] = "too short"
    args = [flag.format(**paths) for flag in flags if not flag.startswith("--env-token")]
    transport = [] if "--transport" in args else ["--transport", "http"]
    refused = harness(["serve", ENV_ID, "--envs", str(SEED), *transport, "--port", "0", *args], env=env)
    assert refused.code == 2, refused.stderr
    assert len(refused.stderr_lines) == 1, refused.stderr
    assert message.format(**paths) in refused.stderr_lines[0]
    assert re.search(r"http://127\.0\.0\.1:\d+", refused.stderr) is None  # no server was started
    assert TOKEN not in refused.stderr


def test_every_problem_with_the_flags_is_named_at_once() -> None:
    refused = harness(
        [
            "serve",
            ENV_ID,
            "--envs",
            str(SEED),
            "--transport",
            "http",
            "--host",
            "0.0.0.0",
            "--max-sessions",
            "0",
            "--allow-origin",
            "nowhere",
        ]
    )
    assert refused.code == 2
    assert len(refused.stderr_lines) == 3, refused.stderr
    assert "--max-sessions must be at least 1" in refused.stderr_lines[0]
    assert "--allow-remote" in refused.stderr_lines[1] and "--allow-origin 'nowhere'" in refused.stderr_lines[2]


UNPRIVILEGED_CLIENT = """
import json, sys, urllib.request, urllib.error
url, headers, body, pid = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3].encode(), sys.argv[4]
report = {}
try:
    urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=60)
    report["status"] = 200
except urllib.error.HTTPError as error:
    report["status"] = error.code
try:
    open(f"/proc/{pid}/environ", "rb").read()
    report["environ"] = "read"
except OSError as error:
    report["environ"] = type(error).__name__
print(json.dumps(report))
"""


def test_another_local_user_without_the_token_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    open_to_ordinary_user(home)
    path = token_file(tmp_path)
    with serve_http([*HTTP, "--port", "0", "--token-file", str(path)]) as served:
        headers, body = intruder_call()
        ran = run_as_ordinary_user(
            [
                sys.executable,
                "-c",
                UNPRIVILEGED_CLIENT,
                served.origin + "/mcp",
                json.dumps(headers),
                body.decode(),
                str(served.pid),
            ],
            home=home,
        )
        assert ran.returncode == 0, ran.stderr
        report = json.loads(ran.stdout)
        assert report["status"] == 401
        if os.geteuid() == 0:  # the other user is really another user: root's process environment is closed to it
            assert report["environ"] == "PermissionError"
        assert phone_in(served.url, "intruder") == ORIGINAL_PHONE
        # The same call with the token does change the state: the refusal above is what kept it unchanged.
        ran = run_as_ordinary_user(
            [
                sys.executable,
                "-c",
                UNPRIVILEGED_CLIENT,
                served.url,
                json.dumps(headers),
                body.decode(),
                str(served.pid),
            ],
            home=home,
        )
        assert json.loads(ran.stdout)["status"] == 200
        assert phone_in(served.url, "intruder") == INTRUDER_PHONE


def peak_and_current(served: ServeProcess) -> tuple[int, int]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{served.pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmHWM"].split()[0]) * 1024, int(fields["VmRSS"].split()[0]) * 1024


def send_until_refused(port: int, head: bytes, total: int, piece: bytes) -> bytes:
    """Send ``head`` then ``piece`` after ``piece`` (``total`` bytes in all) until the server stops reading; the
    server's answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as raw:
        raw.sendall(head)
        sent = 0
        try:
            while sent < total:
                raw.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            return raw.recv(65536)
        except ConnectionResetError:
            return b""


def test_a_300_mb_body_is_refused_without_the_servers_memory_growing_by_it() -> None:
    total = 300_000_000
    with serve_http([*HTTP, "--port", "0"]) as served:
        assert phone_in(served.url, "warm") == ORIGINAL_PHONE  # the server has answered once: its memory is settled
        _, before = peak_and_current(served)
        path = f"/{served.token}/mcp"
        declared = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {total}\r\n\r\n"
        ).encode()
        answer = send_until_refused(served.port, declared, total, b"x" * (1 << 20))
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]

        chunked = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode()
        piece = b"100000\r\n" + b"x" * (1 << 20) + b"\r\n"  # chunks of 1 MiB, with no length given in advance
        answer = send_until_refused(served.port, chunked, total, piece)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 413 "), answer[:200]
        peak, _ = peak_and_current(served)
        # Reading the body whole would have taken at least 300 MB more; the limit (the jail's 64 MB state and an
        # envelope) is all a body may take.
        print(f"server RSS before {before / 1e6:.0f} MB, peak after both bodies {peak / 1e6:.0f} MB")
        assert peak - before < 150_000_000, (before, peak)
        assert phone_in(served.url, "after") == ORIGINAL_PHONE
        assert served.alive


def run_through(url: str, out: Path, *scenarios: str, resume: bool = False) -> tuple[int, str]:
    chosen = [arg for scenario in scenarios for arg in ("--scenario", scenario)]
    ran = harness_cli(
        "run",
        "--envs",
        str(SEED),
        "--mcp",
        url,
        "--agent",
        "oracle",
        "--workers",
        "1",
        *chosen,
        "--out",
        str(out),
        *(["--resume"] if resume else []),
    )
    return ran.returncode, ran.stdout + ran.stderr


def results(out: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in (out / "results.jsonl").read_bytes().splitlines()]


def test_harness_run_through_the_server_resumes_after_a_restart_and_never_records_the_credential(
    tmp_path: Path,
) -> None:
    port = free_port()
    out = tmp_path / "run"
    fixed = {TOKEN_VARIABLE: TOKEN}
    with serve_http([*HTTP, "--port", str(port)], env=fixed) as first:
        assert first.token == TOKEN
        code, said = run_through(first.url, out, f"{ENV_ID}-001")
        assert code == 0, said
    [before] = results(out)
    assert before["reward"]

    with serve_http([*HTTP, "--port", str(port)], env=fixed) as second:  # restarted, with the same token
        code, resumed = run_through(second.url, out, f"{ENV_ID}-001", f"{ENV_ID}-002", resume=True)
        assert code == 0, resumed
        wrong = second.url.replace(TOKEN, "w" * 46)
        refused_code, refused = run_through(wrong, tmp_path / "refused", f"{ENV_ID}-001")
    after = results(out)
    assert [r["episode_id"] for r in after][:1] == [before["episode_id"]]  # not run again
    assert [r["scenario_id"] for r in after] == [f"{ENV_ID}-001", f"{ENV_ID}-002"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["mcp"] == f"http://127.0.0.1:{port}/[redacted]/mcp"

    assert refused_code == 2
    assert "needs its credential" in refused and f"http://127.0.0.1:{port}/[redacted]/mcp" in refused
    assert "w" * 46 not in refused

    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        assert TOKEN.encode() not in path.read_bytes(), path
    assert TOKEN not in said and TOKEN not in resumed
