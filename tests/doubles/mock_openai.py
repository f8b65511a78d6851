"""A mock OpenAI-compatible chat-completions server for tests and benchmarks.

A real HTTP/1.1 server on 127.0.0.1 (raw asyncio, keep-alive, TCP_NODELAY, every response written in one
call, large listen backlog). It answers ``POST /v1/chat/completions`` (non-streaming) and ``GET /v1/models``.

What a request gets is decided by a *policy*, chosen from the request's ``model`` field: an exact entry of
``server.policies``, else the part before the first ``/`` (``replay/<key>`` selects ``replay`` with key
``<key>``), else ``server.default_policy``. Built-in policies:

- ``echo``: replies ``"echo: <last user text>"``;
- ``text``: a fixed text reply;
- ``bad-tool``: calls a tool that does not exist, once, then answers with text;
- ``broken-args``: calls the first offered tool with argument text that is not JSON, once, then answers;
- ``replay``: plays a registered list of tool calls, one per assistant turn, then answers with text. The list
  is found by a key: the model suffix (``replay/<key>``) or any registered key occurring in the messages;
- ``user``: a simulated user that sends its registered turns (the first is the opening message) and then
  ``###STOP###``; turns are found by key like ``replay``;
- ``think``: like ``echo`` with ``reasoning_content`` attached.

Faults (429 with ``Retry-After``, 500, 400, 401, a 401 that echoes the key it was sent (as some providers do),
context overflow, hang, dropped connection) are injected by
count or probability with :meth:`MockOpenAIServer.inject`. Every request is recorded server-side with a
monotonic timestamp, and the server tracks the largest number of simultaneously open connections and of
requests in flight.

Use it as an async context manager, or in a background thread (``with server.running_in_thread():``), or
as a separate process: ``python -m tests.doubles.mock_openai --port 0`` prints ``READY <base_url>``; its
counters are then served at ``GET /v1/_stats`` and reset by ``POST /v1/_reset``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

STOP_TOKEN = "###STOP###"

FaultKind = Literal[
    "rate_limit", "server_error", "bad_request", "unauthorized", "echo_key", "context_overflow", "hang", "drop"
]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


# ------------------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it. ``t`` is ``time.monotonic()`` when its body had been read."""

    t: float
    method: str
    path: str
    model: str | None
    status: int
    outcome: str
    connection: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] | None = None


@dataclass
class Fault:
    """A fault to inject into chat-completion requests.

    ``times`` faults are injected (None: unlimited), each to a request with probability ``probability``,
    only to requests for ``model`` when it is set. ``retry_after`` (seconds) is sent with 429 answers.
    """

    kind: FaultKind
    times: int | None = 1
    probability: float = 1.0
    retry_after: float | None = None
    hang_seconds: float = 3600.0
    model: str | None = None
    status: int = 401  # of an ``echo_key`` answer


# ----------------------------------------------------------------------------------------------- policies


@dataclass
class PolicyRequest:
    """What a policy sees: the parsed request body, the key suffix of the model name, and the server."""

    body: dict[str, Any]
    key: str | None
    server: MockOpenAIServer

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.body.get("tools") or [])


class Policy(Protocol):
    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        """Return an assistant message dict (``content`` and optionally ``tool_calls``)."""
        ...


def message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def assistant_tool_turns(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))


def make_tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@dataclass
class EchoPolicy:
    prefix: str = "echo: "

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        last_user = next((m for m in reversed(request.messages) if m.get("role") == "user"), None)
        return {"role": "assistant", "content": self.prefix + (message_text(last_user) if last_user else "")}


@dataclass
class TextPolicy:
    text: str = "Done."

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        return {"role": "assistant", "content": self.text}


@dataclass
class ThinkingPolicy:
    reasoning: str = "Let me think about this."

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        message = EchoPolicy().respond(request)
        message["reasoning_content"] = self.reasoning
        return message


@dataclass
class NonexistentToolPolicy:
    """Calls a tool that is not offered, once; answers with text afterwards."""

    tool_name: str = "no_such_tool"
    final_text: str = "I could not do it."

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        turn = assistant_tool_turns(request.messages)
        if turn == 0:
            call = make_tool_call(f"call_{turn + 1}", self.tool_name, "{}")
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": self.final_text}


@dataclass
class BrokenArgumentsPolicy:
    """Calls the first offered tool with argument text that is not JSON, once; then answers with text."""

    broken_arguments: str = '{"id": "O-1", '
    final_text: str = "I could not do it."

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        turn = assistant_tool_turns(request.messages)
        tools = request.tools
        if turn == 0 and tools:
            name = tools[0].get("function", {}).get("name", "unknown")
            call = make_tool_call(f"call_{turn + 1}", name, self.broken_arguments)
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": self.final_text}


def _action_name_and_arguments(action: Any) -> tuple[str, Any]:
    if isinstance(action, Mapping):
        return str(action["name"]), action.get("arguments", {})
    return str(action.name), action.arguments


def _find_keyed(registry: Mapping[str, Any], request: PolicyRequest) -> Any:
    return registry[_find_key(registry, request)]


def _find_key(registry: Mapping[str, Any], request: PolicyRequest) -> str:
    if request.key is not None:
        if request.key not in registry:
            raise KeyError(f"no script registered under {request.key!r}")
        return request.key
    texts = [message_text(m) for m in request.messages]
    # The longest key wins so that a key that is a prefix of another cannot shadow it.
    for key in sorted(registry, key=len, reverse=True):
        if any(key in text for text in texts):
            return key
    raise KeyError("no registered script key occurs in the messages")


@dataclass
class ReplayPolicy:
    """Plays tool calls one per assistant turn; answers with text when the list is exhausted.

    With ``actions`` None the list is looked up in ``server.replays`` by key.
    """

    actions: list[Any] | None = None
    final_text: str = "All requested actions are complete."

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        final_text = self.final_text
        if self.actions is not None:
            actions = self.actions
        else:
            key = _find_key(request.server.replays, request)
            actions = request.server.replays[key]
            final_text = request.server.replay_replies.get(key, final_text)
        turn = assistant_tool_turns(request.messages)
        if turn >= len(actions):
            return {"role": "assistant", "content": final_text}
        name, arguments = _action_name_and_arguments(actions[turn])
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        return {"role": "assistant", "content": None, "tool_calls": [make_tool_call(f"call_{turn + 1}", name, text)]}


@dataclass
class SimulatedUserPolicy:
    """A simulated user: sends its turns in order (the first is the opening), then ``###STOP###``.

    A turn counts as sent when a message with exactly its text is already in the conversation, whatever
    role the caller gave it. With ``turns`` None they are looked up in ``server.user_scripts`` by key.
    """

    turns: list[str] | None = None
    stop_token: str = STOP_TOKEN

    def respond(self, request: PolicyRequest) -> dict[str, Any]:
        turns = self.turns if self.turns is not None else _find_keyed(request.server.user_scripts, request)
        sent = {message_text(m).strip() for m in request.messages}
        for turn in turns:
            if turn.strip() not in sent:
                return {"role": "assistant", "content": turn}
        return {"role": "assistant", "content": self.stop_token}


def builtin_policies() -> dict[str, Policy]:
    return {
        "echo": EchoPolicy(),
        "text": TextPolicy(),
        "think": ThinkingPolicy(),
        "bad-tool": NonexistentToolPolicy(),
        "broken-args": BrokenArgumentsPolicy(),
        "replay": ReplayPolicy(),
        "user": SimulatedUserPolicy(),
    }


def estimate_tokens(data: Any) -> int:
    return max(1, len(orjson.dumps(data)) // 4)


# ------------------------------------------------------------------------------------------------- server


class _HTTPError(Exception):
    pass


@dataclass
class _Response:
    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)


class MockOpenAIServer:
    """See the module docstring. All state is touched from the server's event loop, or under ``_lock``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float = 0.0,
        policies: Mapping[str, Policy] | None = None,
        default_policy: str = "echo",
        context_limit: int | None = None,
        record_bodies: bool = True,
        seed: int = 0,
        backlog: int = 4096,
    ) -> None:
        self.host = host
        self.port = port
        self.latency = latency
        self.policies: dict[str, Policy] = builtin_policies()
        self.policies.update(policies or {})
        self.default_policy = default_policy
        self.context_limit = context_limit
        self.record_bodies = record_bodies
        self.backlog = backlog
        self.replays: dict[str, list[Any]] = {}
        self.replay_replies: dict[str, str] = {}
        self.user_scripts: dict[str, list[str]] = {}
        self._faults: list[Fault] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._requests: list[RequestRecord] = []
        self._open_connections = 0
        self._max_open_connections = 0
        self._connections_total = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._completion_ids = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------------------------ configuration

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def set_policy(self, model: str, policy: Policy) -> None:
        self.policies[model] = policy

    def register_replay(self, key: str, actions: Sequence[Any], reply: str | None = None) -> None:
        """Register tool calls (dicts with name/arguments, or ReferenceAction-like objects) under ``key``, and
        optionally the text the model answers with once they are done."""
        self.replays[key] = list(actions)
        if reply is not None:
            self.replay_replies[key] = reply

    def register_user(self, key: str, turns: Sequence[str]) -> None:
        self.user_scripts[key] = list(turns)

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    # ---------------------------------------------------------------------------------------- statistics

    @property
    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._requests)

    def chat_requests(self, model: str | None = None) -> list[RequestRecord]:
        return [r for r in self.requests if r.path == "/v1/chat/completions" and (model is None or r.model == model)]

    @property
    def max_open_connections(self) -> int:
        return self._max_open_connections

    @property
    def connections_total(self) -> int:
        return self._connections_total

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    def stats(self) -> dict[str, int]:
        """Counters, also served at ``GET /v1/_stats`` (``POST /v1/_reset`` resets them)."""
        with self._lock:
            return {
                "requests": len(self._requests),
                "chat_requests": sum(1 for r in self._requests if r.path == "/v1/chat/completions"),
                "open_connections": self._open_connections,
                "max_open_connections": self._max_open_connections,
                "connections_total": self._connections_total,
                "max_in_flight": self._max_in_flight,
            }

    def reset_stats(self) -> None:
        with self._lock:
            self._requests.clear()
            self._max_open_connections = self._open_connections
            self._max_in_flight = self._in_flight
            self._connections_total = 0

    # -------------------------------------------------------------------------------------- life cycle

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self._server = await asyncio.start_server(self._serve_connection, sock=sock, backlog=self.backlog)
        self.port = sock.getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> MockOpenAIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def start_in_thread(self) -> None:
        """Run the server on its own event loop in a daemon thread; returns once it listens."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._thread_loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="mock-openai", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]

    def stop_thread(self) -> None:
        if self._thread is None or self._thread_loop is None:
            return
        self._thread_loop.call_soon_threadsafe(self._thread_loop.stop)
        self._thread.join()
        self._thread = None
        self._thread_loop = None

    @contextlib.contextmanager
    def running_in_thread(self) -> Iterator[MockOpenAIServer]:
        self.start_in_thread()
        try:
            yield self
        finally:
            self.stop_thread()

    # ------------------------------------------------------------------------------------------- HTTP

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._connections_total += 1
            connection = self._connections_total
            self._open_connections += 1
            self._max_open_connections = max(self._max_open_connections, self._open_connections)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                method, path, headers = _parse_head(head)
                try:
                    body = await _read_body(reader, headers)
                except (asyncio.IncompleteReadError, ConnectionError, _HTTPError):
                    return
                self._enter_request()
                try:
                    response = await self._handle(method, path, body, connection, headers)
                finally:
                    self._leave_request()
                if response is None:  # dropped connection
                    return
                keep_alive = headers.get("connection", "").lower() != "close"
                writer.write(_render(response, keep_alive))
                await writer.drain()
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            with self._lock:
                self._open_connections -= 1
            writer.close()
            self._handlers.discard(task)

    def _enter_request(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _leave_request(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    async def _handle(
        self, method: str, path: str, raw_body: bytes, connection: int, headers: dict[str, str]
    ) -> _Response | None:
        now = time.monotonic()
        path = path.split("?", 1)[0]
        if path in ("/v1/models", "/models") and method == "GET":
            self._record(RequestRecord(now, method, path, None, 200, "ok", connection))
            models = sorted(set(self.policies))
            data = {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "mock"} for m in models]}
            return _Response(200, orjson.dumps(data))
        if path == "/v1/_stats" and method == "GET":
            return _Response(200, orjson.dumps(self.stats()))
        if path == "/v1/_reset" and method == "POST":
            self.reset_stats()
            return _Response(200, b"{}")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._record(RequestRecord(now, method, path, None, 404, "not_found", connection))
            return _error(404, f"no route {path}", "not_found_error")
        path = "/v1/chat/completions"
        if method != "POST":
            self._record(RequestRecord(now, method, path, None, 405, "bad_method", connection))
            return _error(405, "use POST", "invalid_request_error")
        try:
            body = orjson.loads(raw_body)
            if not isinstance(body, dict):
                raise ValueError("body is not an object")
        except ValueError as exc:
            self._record(RequestRecord(now, method, path, None, 400, "bad_json", connection))
            return _error(400, f"invalid JSON body: {exc}", "invalid_request_error")
        model = str(body.get("model", ""))
        kept_body = body if self.record_bodies else None
        kept_headers = headers if self.record_bodies else None

        def record(status: int, outcome: str) -> None:
            self._record(RequestRecord(now, method, path, model, status, outcome, connection, kept_body, kept_headers))

        fault = self._take_fault(model)
        if fault is not None:
            return await self._apply_fault(fault, record, headers)
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        prompt_tokens = estimate_tokens(body.get("messages")) + (
            estimate_tokens(body["tools"]) if body.get("tools") else 0
        )
        if self.context_limit is not None and prompt_tokens > self.context_limit:
            record(400, "context_overflow")
            return _context_overflow(self.context_limit, prompt_tokens)
        try:
            message = self._policy_for(model, body).respond(self._policy_request(model, body))
        except KeyError as exc:
            record(400, "no_script")
            return _error(400, str(exc), "invalid_request_error")
        record(200, "ok")
        return _Response(200, self._completion(model, message, prompt_tokens))

    def _policy_for(self, model: str, body: dict[str, Any]) -> Policy:
        if model in self.policies:
            return self.policies[model]
        head = model.split("/", 1)[0]
        return self.policies.get(head) or self.policies[self.default_policy]

    def _policy_request(self, model: str, body: dict[str, Any]) -> PolicyRequest:
        key = None
        if model not in self.policies and "/" in model and model.split("/", 1)[0] in self.policies:
            key = model.split("/", 1)[1]
        return PolicyRequest(body=body, key=key, server=self)

    def _completion(self, model: str, message: dict[str, Any], prompt_tokens: int) -> bytes:
        message.setdefault("role", "assistant")
        message.setdefault("content", None)
        tool_calls = message.get("tool_calls")
        generated = (message.get("content") or "") + (orjson.dumps(tool_calls).decode() if tool_calls else "")
        completion_tokens = max(1, len(generated) // 4)
        with self._lock:
            self._completion_ids += 1
            number = self._completion_ids
        data = {
            "id": f"chatcmpl-mock-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if tool_calls else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return orjson.dumps(data)

    def _take_fault(self, model: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.model is not None and fault.model != model:
                    continue
                if fault.probability < 1.0 and self._rng.random() >= fault.probability:
                    continue
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                return fault
        return None

    async def _apply_fault(
        self, fault: Fault, record: Callable[[int, str], None], headers: Mapping[str, str] | None = None
    ) -> _Response | None:
        if fault.kind == "rate_limit":
            record(429, fault.kind)
            headers = [] if fault.retry_after is None else [("Retry-After", _seconds(fault.retry_after))]
            return _error(429, "Rate limit reached, slow down.", "rate_limit_error", headers)
        if fault.kind == "server_error":
            record(500, fault.kind)
            return _error(500, "The server had an error while processing your request.", "server_error")
        if fault.kind == "bad_request":
            record(400, fault.kind)
            return _error(400, "Invalid value for 'messages'.", "invalid_request_error")
        if fault.kind == "unauthorized":
            record(401, fault.kind)
            return _error(401, "Incorrect API key provided.", "authentication_error")
        if fault.kind == "echo_key":
            record(fault.status, fault.kind)
            sent = (headers or {}).get("authorization", "").removeprefix("Bearer ")
            message = f"Incorrect API key provided: {sent}. Query was ?key={sent}"
            return _error(fault.status, message, "authentication_error")
        if fault.kind == "context_overflow":
            record(400, fault.kind)
            return _context_overflow(self.context_limit or 4096, (self.context_limit or 4096) + 1000)
        if fault.kind == "hang":
            record(0, fault.kind)
            await asyncio.sleep(fault.hang_seconds)
            return None
        record(0, fault.kind)  # drop
        return None


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _error(status: int, message: str, error_type: str, headers: list[tuple[str, str]] | None = None) -> _Response:
    body = {"error": {"message": message, "type": error_type, "param": None, "code": None}}
    return _Response(status, orjson.dumps(body), headers or [])


def _context_overflow(limit: int, requested: int) -> _Response:
    message = (
        f"This model's maximum context length is {limit} tokens. However, you requested {requested} tokens "
        f"in the messages. Please reduce the length of the messages."
    )
    return _error(400, message, "invalid_request_error")


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("GET", "/")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return method, path, headers


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError as exc:
                raise _HTTPError("bad chunk size") from exc
            if size == 0:
                # Trailers end with an empty line.
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    length = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(length) if length else b""


def _render(response: _Response, keep_alive: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}",
        "Content-Type: application/json",
        f"Content-Length: {len(response.body)}",
        f"Connection: {'keep-alive' if keep_alive else 'close'}",
    ]
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body


# --------------------------------------------------------------------------------------------------- CLI


async def _serve_forever(args: argparse.Namespace) -> None:
    server = MockOpenAIServer(
        port=args.port, latency=args.latency, record_bodies=False, default_policy=args.default_policy
    )
    async with server:
        sys.stdout.write(f"READY {server.base_url}\n")
        sys.stdout.flush()
        # Serve until stdin closes (the parent process exits or closes the pipe).
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Mock OpenAI-compatible server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every completion")
    parser.add_argument("--default-policy", default="echo")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args))


if __name__ == "__main__":
    main()
