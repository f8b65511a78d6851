"""The door of ``harness serve --protocol openenv`` (the CLI in a subprocess): the credential, Host and Origin on every
route and on the WebSocket handshake, idle eviction of sessions a WebSocket holds, bounded bodies and frames, and
malformed frames and requests answered with the protocol's errors while the server goes on serving. OpenEnv 0.10's
own client, raw WebSockets and raw HTTP; every refusal is shown to have opened no session (the server's log)."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.support.cli_process import REPO
from tests.support.openenv_client import ServedEnvironment, serve_openenv

SEED = REPO / "datasets" / "seed"
ENV_ID = "banking"
SCENARIO_ID = "banking-001"
RESET = json.dumps({"type": "reset", "data": {"scenario_id": SCENARIO_ID}})


@pytest.fixture(scope="module")
def guarded(openenv_python: Path) -> Iterator[ServedEnvironment]:
    with serve_openenv(openenv_python, ENV_ID, "--envs", str(SEED), "--max-sessions", "2", verbose=True) as served:
        yield served


def ws_url(served: ServedEnvironment, *, token: bool = True) -> str:
    base = served.base_url if token else served.server.origin
    return base.replace("http://", "ws://") + "/ws"


def opened(served: ServedEnvironment) -> int:
    """Sessions the server has opened so far (its log at debug level says each one)."""
    return sum("OpenEnv session" in line and "opened (" in line for line in served.server.lines)


def refusals(served: ServedEnvironment) -> int:
    return sum("refused a" in line for line in served.server.lines)


def exchange(websocket: ClientConnection, frame: str | bytes, *, text: bool | None = None) -> dict[str, Any]:
    websocket.send(frame, text=text)
    answer: dict[str, Any] = json.loads(websocket.recv(timeout=120))
    return answer


def test_openenvs_client_works_with_the_credential_as_a_bearer_header(guarded: ServedEnvironment) -> None:
    header = {"Authorization": f"Bearer {guarded.server.token}"}
    report = guarded.drive(
        [
            (0, {"op": "reset", "kwargs": {"scenario_id": SCENARIO_ID}}),
            (0, {"op": "call", "name": "get_account", "arguments": {"account_id": "AC-1002"}}),
        ],
        base_url=guarded.server.origin,
        headers=header,
    )
    assert report[0]["observation"]["scenario_id"] == SCENARIO_ID
    assert "AC-1002" in report[1]["result"]


def test_without_the_credential_or_from_a_foreign_page_no_session_opens(guarded: ServedEnvironment) -> None:
    before_opened, before_refused = opened(guarded), refusals(guarded)
    # OpenEnv's own client, pointed at the server without the credential.
    (refused_client,) = guarded.drive(
        [(0, {"op": "reset", "kwargs": {"scenario_id": SCENARIO_ID}})], base_url=guarded.server.origin
    )
    assert "error" in refused_client

    statuses = []
    attempts: list[dict[str, Any]] = [
        {"uri": ws_url(guarded, token=False)},
        {"uri": ws_url(guarded), "origin": "http://evil.example"},
        {"uri": ws_url(guarded), "origin": f"http://127.0.0.1:{guarded.server.port + 1}"},
        {"uri": ws_url(guarded), "origin": "null"},
        {"uri": ws_url(guarded, token=False), "additional_headers": {"Authorization": "Bearer " + "z" * 43}},
    ]
    for attempt in attempts:
        with pytest.raises(InvalidStatus) as refused:
            connect(**attempt, open_timeout=60)
        statuses.append(refused.value.response.status_code)
        assert b"needs its credential" in refused.value.response.body or b"may not use" in refused.value.response.body
    assert statuses == [401, 403, 403, 403, 401]

    create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
    origin = guarded.server.origin
    http_attempts = [
        httpx.post(f"{origin}/mcp", json=create, timeout=60),
        httpx.post(f"{guarded.base_url}/mcp", json=create, headers={"Origin": "http://evil.example"}, timeout=60),
        httpx.post(f"{guarded.base_url}/mcp", json=create, headers={"Host": "rebind.evil.example"}, timeout=60),
        # A "simple" cross-origin POST (text/plain needs no preflight) to the task route.
        httpx.post(
            f"{guarded.base_url}/{ENV_ID}/tasks",
            content=b'{"split": "test"}',
            headers={"Content-Type": "text/plain", "Host": f"rebind.evil.example:{guarded.server.port}"},
            timeout=60,
        ),
        httpx.get(f"{origin}/health", timeout=60),
    ]
    assert [r.status_code for r in http_attempts] == [401, 403, 403, 403, 401]
    assert all(r.json()["error"]["message"] for r in http_attempts)
    assert all("scenario" not in r.text and "session_id" not in r.text for r in http_attempts)

    expected = before_refused + 1 + len(attempts) + len(http_attempts)
    deadline = time.monotonic() + 30
    while refusals(guarded) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert refusals(guarded) >= expected  # each attempt was refused at the door (OpenEnv's client made one or more)
    # The same requests with the credential do open sessions (the count could have moved); the server logs in
    # order, so once their two lines are read, any session an attempt above had opened would be counted too.
    assert httpx.post(f"{guarded.base_url}/mcp", json=create, timeout=60).json()["result"]["session_id"]
    with connect(ws_url(guarded), open_timeout=60) as websocket:
        assert exchange(websocket, RESET)["type"] == "observation"
    while opened(guarded) < before_opened + 2 and time.monotonic() < deadline + 60:
        time.sleep(0.1)
    assert opened(guarded) == before_opened + 2
    assert guarded.server.token not in "\n".join(guarded.server.lines[1:])


def test_an_idle_websocket_that_only_pings_is_closed_and_its_session_destroyed(openenv_python: Path) -> None:
    with serve_openenv(
        openenv_python, ENV_ID, "--envs", str(SEED), "--max-sessions", "1", "--idle-timeout", "2"
    ) as served:
        with connect(ws_url(served), ping_interval=None, open_timeout=60) as websocket:
            assert exchange(websocket, RESET)["type"] == "observation"
            # The session holds the only slot.
            with connect(ws_url(served), open_timeout=60) as second:
                assert json.loads(second.recv(timeout=60))["data"]["code"] == "CAPACITY_REACHED"
            pongs = 0
            deadline = time.monotonic() + 120
            with pytest.raises(ConnectionClosed) as closed:
                while time.monotonic() < deadline:  # pings only, far more often than the idle timeout
                    if websocket.ping().wait(10):
                        pongs += 1
                    time.sleep(0.2)
        assert pongs >= 1  # the connection was alive and answering while it idled
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1001, "session idle for over 2 s")
        # Its session was destroyed: the one slot is free again.
        with connect(ws_url(served), open_timeout=60) as third:
            assert exchange(third, RESET)["data"]["observation"]["scenario_id"] == SCENARIO_ID

        # A session made over HTTP that no one uses is swept too, with no new session asked for meanwhile.
        with connect(ws_url(served), open_timeout=60):
            pass
        created = httpx.post(
            f"{served.base_url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}},
            timeout=60,
        ).json()["result"]["session_id"]
        time.sleep(6)
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"session_id": created, "name": "get_account", "arguments": {"account_id": "AC-1002"}},
        }
        swept = httpx.post(f"{served.base_url}/mcp", json=call, timeout=60).json()
        assert f"Unknown session_id: {created}" in swept["error"]["message"]


def test_frames_and_bodies_over_the_limit_are_refused(openenv_python: Path) -> None:
    with serve_openenv(openenv_python, ENV_ID, "--envs", str(SEED), "--max-request-bytes", "100000") as served:
        with connect(ws_url(served), open_timeout=60, max_size=None) as websocket:
            assert exchange(websocket, RESET)["type"] == "observation"
            big = json.dumps(
                {
                    "type": "step",
                    "data": {
                        "type": "call_tool",
                        "tool_name": "get_account",
                        "arguments": {"account_id": "A" * 200_000},
                    },
                }
            )
            websocket.send(big)
            with pytest.raises(ConnectionClosed) as closed:
                websocket.recv(timeout=60)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009

        port = served.server.port
        with socket.create_connection(("127.0.0.1", port), timeout=60) as raw:
            raw.sendall(
                f"POST /{served.server.token}/mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/json\r\nContent-Length: 300000000\r\n\r\n".encode()
            )
            answer = raw.recv(65536)
        assert answer.startswith(b"HTTP/1.1 413 ")

        # Within the limit, the same server answers.
        with connect(ws_url(served), open_timeout=60) as websocket:
            assert exchange(websocket, RESET)["data"]["observation"]["scenario_id"] == SCENARIO_ID
        assert served.alive


DEEP = "[" * 5000 + "]" * 5000
FRAMES: list[tuple[str, str | bytes, bool | None, str]] = [
    ("not JSON", "{not json", None, "INVALID_JSON"),
    ("bad UTF-8 in a binary frame", b'{"type": "st\xffate"}', None, "INVALID_JSON"),
    ("deep JSON", DEEP, None, "INVALID_JSON"),
    ("deep but within orjson", "[" * 500 + "]" * 500, None, "INVALID_JSON"),
    ("a huge number", '{"type": "reset", "data": {"seed": 1e999}}', None, "INVALID_JSON"),
    ("an array", "[1, 2]", None, "UNKNOWN_TYPE"),
    ("a string", '"reset"', None, "UNKNOWN_TYPE"),
    ("null", "null", None, "UNKNOWN_TYPE"),
    ("a type that is a number", '{"type": 5}', None, "UNKNOWN_TYPE"),
    ("a type that is an object", '{"type": {"a": 1}}', None, "UNKNOWN_TYPE"),
    ("an unknown type", '{"type": "dance"}', None, "UNKNOWN_TYPE"),
    ("reset data an array", '{"type": "reset", "data": [1]}', None, "VALIDATION_ERROR"),
    ("reset seed a string", '{"type": "reset", "data": {"seed": "x"}}', None, "VALIDATION_ERROR"),
    ("reset seed negative", '{"type": "reset", "data": {"seed": -1}}', None, "VALIDATION_ERROR"),
    (
        "reset seed over 64 bits",
        '{"type": "reset", "data": {"seed": 100000000000000000000000}}',
        None,
        "VALIDATION_ERROR",
    ),
    ("reset episode_id a number", '{"type": "reset", "data": {"episode_id": 5}}', None, "VALIDATION_ERROR"),
    ("reset scenario_id a list", '{"type": "reset", "data": {"scenario_id": ["a"]}}', None, "VALIDATION_ERROR"),
    ("step without data", '{"type": "step"}', None, "VALIDATION_ERROR"),
    ("step data a string", '{"type": "step", "data": "x"}', None, "VALIDATION_ERROR"),
    ("step without tool_name", '{"type": "step", "data": {"type": "call_tool"}}', None, "VALIDATION_ERROR"),
    (
        "step tool_name a number",
        '{"type": "step", "data": {"type": "call_tool", "tool_name": 5}}',
        None,
        "VALIDATION_ERROR",
    ),
    (
        "step arguments a list",
        '{"type": "step", "data": {"type": "call_tool", "tool_name": "get_account", "arguments": [1]}}',
        None,
        "VALIDATION_ERROR",
    ),
    ("step action unknown", '{"type": "step", "data": {"type": "dance"}}', None, "VALIDATION_ERROR"),
    ("state with data", '{"type": "state", "data": {"x": 1}}', None, "VALIDATION_ERROR"),
    ("mcp data a list", '{"type": "mcp", "data": [1]}', None, "VALIDATION_ERROR"),
]
MCP_FRAMES: list[tuple[str, dict[str, Any], int]] = [
    ("no method", {"jsonrpc": "2.0", "id": 1}, -32600),
    ("method a number", {"jsonrpc": "2.0", "id": 1, "method": 5}, -32600),
    ("params a list", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}, -32600),
    ("id an object", {"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}, -32600),
    ("jsonrpc 1.0", {"jsonrpc": "1.0", "id": 1, "method": "tools/list"}, -32600),
    ("unknown method", {"jsonrpc": "2.0", "id": 1, "method": "x/y"}, -32601),
    ("tools/call name a number", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}, -32602),
    (
        "tools/call arguments a list",
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_account", "arguments": [1]}},
        -32602,
    ),
    (
        "close session_id a number",
        {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/close", "params": {"session_id": 5}},
        -32602,
    ),
]


def test_malformed_frames_get_error_frames_and_the_session_goes_on(guarded: ServedEnvironment) -> None:
    with connect(ws_url(guarded), open_timeout=60) as websocket:
        assert exchange(websocket, RESET)["type"] == "observation"
        for name, frame, text, code in FRAMES:
            answer = exchange(websocket, frame, text=text)
            assert (answer["type"], answer["data"]["code"]) == ("error", code), (name, answer)
            assert exchange(websocket, '{"type": "state"}')["type"] == "state", name
        for name, message, rpc_code in MCP_FRAMES:
            answer = exchange(websocket, json.dumps({"type": "mcp", "data": message}))
            assert answer["type"] == "mcp" and answer["data"]["error"]["code"] == rpc_code, (name, answer)
        call = json.dumps(
            {
                "type": "step",
                "data": {"type": "call_tool", "tool_name": "get_account", "arguments": {"account_id": "AC-1002"}},
            }
        )
        assert "AC-1002" in exchange(websocket, call)["data"]["observation"]["result"]

    # A text frame that is not UTF-8 ends the connection (close code 1007), and only it.
    with connect(ws_url(guarded), open_timeout=60) as websocket:
        websocket.send(b'{"type": "st\xffate"}', text=True)
        with pytest.raises(ConnectionClosed) as closed:
            websocket.recv(timeout=60)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
    with connect(ws_url(guarded), open_timeout=60) as websocket:
        assert exchange(websocket, RESET)["data"]["observation"]["scenario_id"] == SCENARIO_ID
    assert_no_traceback(guarded)


HTTP_BODIES: list[tuple[str, bytes, int]] = [
    ("not JSON", b"{oops", -32700),
    ("bad UTF-8", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/\xff"}', -32700),
    ("deep JSON", DEEP.encode(), -32700),
    ("a huge number", b'{"jsonrpc": "2.0", "id": 1e999, "method": "tools/list"}', -32700),
    ("an array", b"[1]", -32600),
    ("null", b"null", -32600),
    *[(name, json.dumps(message).encode(), code) for name, message, code in MCP_FRAMES],
    (
        "tools/call without a session",
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_account", "arguments": {}}}',
        -32602,
    ),
    (
        "tools/call session_id a number",
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_account", "session_id": 5}}',
        -32602,
    ),
]
TASK_REQUESTS: list[tuple[str, str, bytes]] = [
    ("not JSON", "tasks", b"{oops"),
    ("deep JSON", "tasks", DEEP.encode()),
    ("an array", "tasks", b"[1]"),
    ("split a number", "tasks", b'{"split": 5}'),
    ("an unknown split", "num_tasks", b'{"split": "train"}'),
    ("index a string", "task", b'{"split": "test", "index": "1"}'),
    ("index a boolean", "task", b'{"split": "test", "index": true}'),
    ("index out of range", "task", b'{"split": "test", "index": 100000000000000000000}'),
    ("index missing", "task", b'{"split": "test"}'),
    ("start a string", "task_range", b'{"split": "test", "start": "a"}'),
    ("stop a float", "task_range", b'{"split": "test", "stop": 1.5}'),
    ("an unknown operation", "dance", b'{"split": "test"}'),
]


def test_malformed_http_requests_get_the_protocols_errors_and_the_server_goes_on(guarded: ServedEnvironment) -> None:
    mcp = f"{guarded.base_url}/mcp"
    for name, body, code in HTTP_BODIES:
        answer = httpx.post(mcp, content=body, headers={"Content-Type": "application/json"}, timeout=60)
        assert answer.status_code == 200 and answer.json()["error"]["code"] == code, (name, answer.text)
        assert httpx.post(mcp, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, timeout=60).json()["result"]
    for name, operation, body in TASK_REQUESTS:
        answer = httpx.post(f"{guarded.base_url}/{ENV_ID}/{operation}", content=body, timeout=60)
        assert 400 <= answer.status_code < 500 and answer.json()["detail"], (name, answer.status_code, answer.text)
        listed = httpx.post(f"{guarded.base_url}/{ENV_ID}/num_tasks", json={"split": "test"}, timeout=60)
        assert listed.json()["num_tasks"] > 0
    unknown_env = httpx.post(f"{guarded.base_url}/airline/tasks", json={"split": "test"}, timeout=60)
    assert unknown_env.status_code == 404
    assert guarded.alive
    assert_no_traceback(guarded)


def assert_no_traceback(served: ServedEnvironment) -> None:
    log = served.server.log
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]
    assert re.search(r"\bERROR\b", log) is None, log[-3000:]
