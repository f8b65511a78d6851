"""The harness's side of the jail: the zygote process and the confined children it forks.

``Zygote`` starts ``python -m harness.sandbox.zygote`` with an empty environment and asks it for children over a
SOCK_SEQPACKET control socket, handing it one end of a fresh socketpair per child. ``Child`` talks to one child
over the other end: orjson frames headed by their length and a sequence number, one request at a time, each under
a wall-clock backstop after which the child is killed (the child limits its own CPU time). The child echoes the
request's sequence number in its answer, so anything that is not the answer to the pending request (a forged or
oversized frame, a stale or extra answer, bytes out of turn, invalid JSON) is recognised whenever it arrives and
ends that child; it can never reach another child's answers.

Every wait on the zygote has a deadline: a zygote that does not answer a fork request in time (stopped, hung or
dead) is killed, the children it held die with it (they live in its PID namespace), and what happened is the
reason every waiter and every one of those children's sessions is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from harness.jsonlimits import longest_string_bound
from harness.sandbox.check_inputs import EpisodeInputs, check_request_parts
from harness.sandbox.confirmation import CONFIRMATION_SEQUENCE, CPU_EXHAUSTED_STATUS, UNCONFINED_STATUS
from harness.sandbox.replies import KnownStates

logger = logging.getLogger(__name__)

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_CONTROL_FD = 3
_CREDENTIALS = struct.Struct("iII")


class ChildLost(Exception):
    """The child ended (or was ended) before it answered."""

    def __init__(self, reason: str, *, kind: str = "sandbox_error", timed_out: bool = False, before_send: bool = False):
        self.reason = reason
        self.kind = "timeout" if timed_out else kind
        self.timed_out = timed_out
        self.before_send = before_send
        super().__init__(reason)


class ZygoteFailed(RuntimeError):
    """The zygote could not be started or stopped answering."""


def describe_exit(status: int | None, *, confined: bool) -> tuple[str, str]:
    """The observation kind and the words for a child's wait status; ``confined``: whether the child had confirmed
    its confinement (``confirmation.CONFINED``) before it ended.

    Before the confirmation no code but the harness's has run in the child: whatever ended it is the sandbox's
    (``sandbox_error``, so the episode can be re-run). After it, a crash or an exit is the code's doing
    (``tool_exception``), whatever the status: code can exit with ``UNCONFINED_STATUS`` as well as a child that
    could not confine itself. A SIGKILL the harness did not send (the kernel's OOM killer, an operator) is not the
    code's fault and not called a memory breach (``sandbox_error``).
    """
    if not confined:
        if status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == UNCONFINED_STATUS:
            return "sandbox_error", "the sandbox process could not confine itself and refused to run the code"
        _, words = describe_exit(status, confined=True)
        return "sandbox_error", f"{words}, before it had confirmed its confinement"
    if status is None:
        return "sandbox_error", "the sandbox process ended and its exit status is unknown"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == CPU_EXHAUSTED_STATUS:
        return "resource_limit", "the code kept computing past its CPU-time limit and its process was ended"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        if number == signal.SIGKILL:
            return "sandbox_error", "the sandbox process was killed from outside (SIGKILL from the kernel or a user)"
        if number == signal.SIGXCPU:
            return "resource_limit", "the sandbox process exhausted its CPU-time limit"
        return "tool_exception", f"the sandbox process crashed ({name})"
    return "tool_exception", f"the sandbox process exited with status {os.WEXITSTATUS(status)}"


CHANNEL_SEND_BUFFER = 4 << 20
"""The send buffer asked for each end of a child's channel (bytes)."""
JOINED_FRAME_BYTES = 64 << 10
"""A request up to this size is joined into one frame and sent at once; a larger one is written part by part."""


class FrameReader(asyncio.Protocol):
    """Reads the child's frames: an 8-byte header (body length, sequence number), then the body. A body arrives in
    many pieces; they are kept as they come and joined once, so a megabyte reply is copied once."""

    def __init__(self, child: Child):
        self.child = child
        self.header = bytearray()
        self.size = -1
        """The body length of the frame being read, once its header is in."""
        self.sequence = 0
        self.parts: list[memoryview] = []
        self.received = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.size < 0 and not self.header and len(data) >= 8:
            size = int.from_bytes(data[:4], "little")
            if len(data) == 8 + size and size <= self.child.reply_limit:  # the usual reply: one whole frame
                self.child.deliver(int.from_bytes(data[4:8], "little"), data[8:])
                return
        view = memoryview(data)
        while view:
            if self.size < 0:
                missing = 8 - len(self.header)
                self.header += view[:missing]
                view = view[missing:]
                if len(self.header) < 8:
                    return
                size = int.from_bytes(self.header[:4], "little")
                limit = self.child.reply_limit
                if size > limit:  # refused on its header: nothing over the limit is ever buffered
                    self.child.violate(f"the sandbox process sent a reply of {size:,} bytes (limit {limit:,})")
                    return
                self.size, self.sequence = size, int.from_bytes(self.header[4:], "little")
                self.header.clear()
            piece = view[: self.size - self.received]
            view = view[len(piece) :]
            if piece:
                self.parts.append(piece)
                self.received += len(piece)
            if self.received == self.size:
                body = b"".join(self.parts)
                sequence = self.sequence
                self.parts, self.received, self.size = [], 0, -1
                self.child.deliver(sequence, body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.child.channel_closed()


class Child:
    """One confined child process and its channel."""

    def __init__(self, zygote: Zygote, zygote_pid: int, max_frame: int, pid: int | None = None):
        self.zygote = zygote
        self.zygote_pid = zygote_pid
        """The child's pid in the zygote's PID namespace: what the zygote's messages name it by."""
        self.pid = pid if pid is not None else zygote_pid
        """The child's pid as this process sees it (for signals from outside)."""
        self.max_frame = max_frame
        self.protocol: FrameReader | None = None
        self.pending: asyncio.Future[dict[str, Any]] | None = None
        self.alive = True
        self.reason = ""
        self.kind = "sandbox_error"
        self.timed_out = False
        self.sequence = 0
        self.reply_limit = max_frame
        """The longest frame the pending request's reply may be (``max_frame`` at most)."""
        self.reply_bytes = 0
        """The size of the last reply delivered."""
        self.reply_brackets = 0
        """How many ``[`` and ``{`` bytes the last reply held: a bound on how deep it can nest."""
        self.reply_string_bound = 0
        """A bound on the characters of any string or key of the last reply (``longest_string_bound``)."""
        self.confined = False
        """Whether the child has confirmed that it is confined (``confirmation.CONFINED``): from then on, what ends
        it is its code's doing, not the sandbox's."""
        self.known: KnownStates | None = None
        """States the pending request's reply may equal (set by ``request``): an equal reply is not decoded."""
        self.reply_known = False
        """Whether the last reply was one of ``known`` (its answer is ``{"ok": True, "state": <that state>}``)."""
        self.reply_body = b""
        """The last reply's bytes, kept only when it was asked with ``known``."""

    async def connect(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_unix_connection(lambda: FrameReader(self), sock=sock)
        self.protocol = protocol

    async def request(
        self,
        message: dict[str, Any] | list[bytes],
        budget: float,
        reply_limit: int | None = None,
        known: KnownStates | None = None,
        inputs: list[EpisodeInputs] | None = None,
    ) -> dict[str, Any]:
        """Send one request and wait for its answer; the child is killed when ``budget`` seconds pass, or as soon
        as its answer announces more than ``reply_limit`` bytes (``max_frame`` when not given). A reply whose bytes
        are those of a state in ``known`` is answered with that state, undecoded (``reply_known``). ``inputs``: a
        check request's episodes, carried after its JSON (``check_inputs``). ``message`` is a message, or its JSON
        in pieces (written one after the other, not joined)."""
        if not self.alive or self.protocol is None or self.protocol.transport is None:
            raise ChildLost(self.reason or "the sandbox process is gone", before_send=True)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.pending = future
        self.known = known
        self.reply_limit = self.max_frame if reply_limit is None else min(reply_limit, self.max_frame)
        self.sequence = self.sequence % 0xFFFFFFFF + 1  # never CONFIRMATION_SEQUENCE
        if isinstance(message, list):
            parts = message
        else:
            parts = [orjson.dumps(message)] if inputs is None else check_request_parts(message, inputs)
        size = sum(len(part) for part in parts)
        header = size.to_bytes(4, "little") + self.sequence.to_bytes(4, "little")
        transport = self.protocol.transport
        if size <= JOINED_FRAME_BYTES:
            transport.write(b"".join([header, *parts]))  # one send: the child wakes once for it
        else:
            # A state of a megabyte is handed to the socket as it is, not copied into a frame.
            transport.write(header)
            for part in parts:
                transport.write(part)
        timer = loop.call_later(budget, self._overrun, budget)
        try:
            return await future
        finally:
            timer.cancel()
            self.pending = None

    def _overrun(self, budget: float) -> None:
        if not self.confined:  # no code of the request's has run yet: the sandbox is at fault
            self._end(f"the sandbox process did not confirm its confinement within {budget:g} s and was stopped")
            return
        self.timed_out = True
        self._end(
            f"the request did not finish within its wall-clock backstop of {budget:g} s, before its CPU-time limit "
            "ran out (the machine is too loaded, or the code waits without computing); its sandbox process was stopped"
        )

    def deliver(self, sequence: int, body: bytes) -> None:
        if sequence == CONFIRMATION_SEQUENCE:
            if body or self.confined:
                self.violate("the sandbox process confirmed its confinement twice")
            else:
                self.confined = True
            return
        future = self.pending
        if future is None or future.done() or sequence != self.sequence:
            self.violate("the sandbox process sent a frame nobody asked for")
            return
        known = self.known
        if known is not None:
            self.reply_body = body
            state = known.get(body)
            self.reply_known = state is not None
            if state is not None:
                self.pending = None
                self.reply_bytes = len(body)
                future.set_result({"ok": True, "state": state})
                return
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            self.violate(f"the sandbox process sent invalid JSON: {exc}")
            return
        if not isinstance(answer, dict):
            self.violate("the sandbox process sent an answer that is not an object")
            return
        self.pending = None
        self.reply_bytes = len(body)
        self.reply_brackets = body.count(b"[") + body.count(b"{")
        self.reply_string_bound = longest_string_bound(body)
        future.set_result(answer)

    def violate(self, reason: str) -> None:
        # Before the confirmation only the harness's own code wrote to the channel.
        self.kind = "forbidden" if self.confined else "sandbox_error"
        self._end(f"protocol violation: {reason}")

    def _end(self, reason: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self.reason = reason
        self.zygote.kill(self.zygote_pid)
        if self.protocol is not None and self.protocol.transport is not None:
            self.protocol.transport.abort()
        self._fail_pending()

    def channel_closed(self) -> None:
        if self.alive:
            self.alive = False
            asyncio.get_running_loop().create_task(self._explain_exit())
        else:
            self._fail_pending()

    async def _explain_exit(self) -> None:
        status = await self.zygote.exit_status(self.zygote_pid, timeout=2.0)
        if status is None and self.confined and self.zygote.alive:
            # The channel closed, yet the process has not exited: its code may hold it, so that no status comes.
            self.zygote.kill(self.zygote_pid)
            status = await self.zygote.exit_status(self.zygote_pid, timeout=2.0)
            if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
                self.kind = "forbidden"
                self.reason = "protocol violation: the sandbox process closed its channel and did not exit"
                self._fail_pending()
                return
        self.kind, self.reason = describe_exit(status, confined=self.confined)
        if status is None and self.zygote.lost_reason:
            self.reason = f"the sandbox process ended with its zygote: {self.zygote.lost_reason}"
        self._fail_pending()

    def _fail_pending(self) -> None:
        future, self.pending = self.pending, None
        if future is not None and not future.done():
            future.set_exception(ChildLost(self.reason, kind=self.kind, timed_out=self.timed_out))

    def close(self) -> None:
        """End the child: it exits when its channel closes."""
        self.alive = False
        if self.protocol is not None and self.protocol.transport is not None:
            self.protocol.transport.close()


class Zygote:
    """One zygote process and its control socket."""

    def __init__(self, options: dict[str, Any], reply_timeout: float = 10.0):
        self.options = options
        self.reply_timeout = reply_timeout
        """How long the zygote may take to answer a fork request before it is killed."""
        self.process: asyncio.subprocess.Process | None = None
        self.zygote_pid: int | None = None
        """The zygote's pid as this process sees it (``process`` is the keeper outside its PID namespace)."""
        self.lost_reason = ""
        self.control: socket.socket | None = None
        self.layers: list[dict[str, Any]] = []
        self.alive = False
        self._ids = itertools.count(1)
        self._spawns: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._exits: dict[int, int] = {}
        self._exit_waiters: dict[int, asyncio.Future[int]] = {}
        self._hello: asyncio.Future[dict[str, Any]] | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self.stderr_tail: list[str] = []

    async def start(self, meanwhile: Callable[[], object] | None = None) -> None:
        """Start the zygote and wait for its report; ``meanwhile`` runs here while the new process boots."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The kernel then attaches the sender's pid to each message, translated into this process's PID namespace.
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        environment = {"PYTHONPATH": _PACKAGE_ROOT, "PYTHONHASHSEED": "0", "TZ": "UTC", "LANG": "C.UTF-8"}
        # Every library symbol resolved once in the zygote: a child that calls a C function for the first time would
        # otherwise write its address into the library's table and so copy that page.
        environment["LD_BIND_NOW"] = "1"
        os.set_inheritable(theirs.fileno(), True)
        try:
            # -P: the harness's current folder is not put first on the zygote's path (a `harness` package there,
            # in a downloaded dataset say, would run unconfined before the sandbox's own code); -s: nor the
            # user's site-packages.
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-P",
                "-s",
                "-c",
                f"import os; os.dup2({theirs.fileno()}, {_CONTROL_FD}); "
                "from harness.sandbox.zygote import main; main()",
                orjson.dumps(self.options).decode(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env=environment,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        self.control = ours
        self.alive = True
        self._hello = loop.create_future()
        loop.add_reader(ours.fileno(), self._on_control)
        self._stderr_task = loop.create_task(self._read_stderr())
        if meanwhile is not None:
            meanwhile()
        try:
            hello = await asyncio.wait_for(self._hello, timeout=60)
        except (TimeoutError, ZygoteFailed) as exc:
            await self.close()
            detail = self.stderr_tail[-1] if self.stderr_tail else str(exc) or "no answer"
            raise ZygoteFailed(f"the sandbox zygote did not start: {detail}") from exc
        self.layers = list(hello.get("layers", []))

    def _on_control(self) -> None:
        assert self.control is not None
        while True:
            try:
                message, ancillary, _flags, _address = self.control.recvmsg(65536, socket.CMSG_SPACE(_CREDENTIALS.size))
            except BlockingIOError:
                return
            except OSError:
                message, ancillary = b"", []
            if not message:
                self._lost(self.lost_reason or "the sandbox zygote exited")
                return
            sender = None
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _CREDENTIALS.size:
                    sender = _CREDENTIALS.unpack(data[: _CREDENTIALS.size])[0]
            self._dispatch(orjson.loads(message), sender)

    def _dispatch(self, message: dict[str, Any], sender: int | None = None) -> None:
        op = message.get("op")
        if op == "spawned":
            if message.get("translated") and sender:
                message["host_pid"] = sender
            future = self._spawns.pop(int(message["id"]), None)
            if future is not None and not future.done():
                future.set_result(message)
        elif op == "exited":
            pid, status = int(message["pid"]), int(message["status"])
            waiter = self._exit_waiters.pop(pid, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(status)
            else:
                self._exits[pid] = status
                if len(self._exits) > 4096:
                    self._exits.pop(next(iter(self._exits)))
        elif op == "hello" and self._hello is not None and not self._hello.done():
            self.zygote_pid = sender
            self._hello.set_result(message)

    def _lost(self, reason: str) -> None:
        self.alive = False
        self.lost_reason = self.lost_reason or reason
        if self.control is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.control.fileno())
        futures: list[asyncio.Future[Any]] = [*self._spawns.values(), *self._exit_waiters.values()]
        for future in futures:
            if not future.done():
                future.set_exception(ZygoteFailed(reason))
        self._spawns.clear()
        self._exit_waiters.clear()
        if self._hello is not None and not self._hello.done():
            self._hello.set_exception(ZygoteFailed(reason))

    async def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        while line := await self.process.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            self.stderr_tail = [*self.stderr_tail[-19:], text]
            logger.debug("sandbox zygote: %s", text)

    async def spawn(self, kind: str, max_frame: int) -> Child:
        if not self.alive or self.control is None:
            raise ZygoteFailed("the sandbox zygote is not running")
        request_id = next(self._ids)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for end in (ours, theirs):
            # A request or reply can be a state of megabytes, written at once. A send buffer that takes it whole
            # (the kernel caps it at net.core.wmem_max) spares the event loop copying the rest into a buffer of
            # its own and writing it out piece by piece, and the child as many reads.
            with contextlib.suppress(OSError):
                end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHANNEL_SEND_BUFFER)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._spawns[request_id] = future
        try:
            message = orjson.dumps({"op": "spawn", "id": request_id, "kind": kind})
            await self._send(message, [theirs.fileno()])
        except ZygoteFailed:
            ours.close()
            raise
        finally:
            theirs.close()
        what = f"did not answer a fork request within {self.reply_timeout:g} s"
        timer = asyncio.get_running_loop().call_later(self.reply_timeout, self.abandon, what)
        try:
            answer = await future  # abandon() fails it with the reason
        except ZygoteFailed:
            ours.close()
            raise
        finally:
            timer.cancel()
        if "error" in answer:
            ours.close()
            raise ZygoteFailed(str(answer["error"]))
        child = Child(self, int(answer["pid"]), max_frame, answer.get("host_pid"))
        await child.connect(ours)
        return child

    async def preload(self, key: str, data: bytes) -> None:
        """Hand the zygote an environment's compiled code (``zygote.Zygote.load_code``), in a memory file: every
        child it forks after this message has it."""
        if not self.alive or self.control is None:
            raise ZygoteFailed("the sandbox zygote is not running")
        fd = os.memfd_create("environment-code", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            await self._send(orjson.dumps({"op": "code", "key": key, "size": len(data)}), [fd])
        finally:
            os.close(fd)

    def _state(self) -> str:
        """What the kernel says the zygote is doing, in words, or "" when it cannot tell."""
        pid = self.zygote_pid or (self.process.pid if self.process is not None else None)
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0].decode()
        except (OSError, IndexError, ValueError):
            return ""
        return {"T": "was stopped (SIGSTOP) and ", "t": "was stopped by a tracer and ", "Z": "had died and "}.get(
            state, ""
        )

    def abandon(self, what: str) -> str:
        """Kill a zygote that stopped answering, with every child it holds; fail everything waiting on it."""
        pid = self.zygote_pid or (self.process.pid if self.process is not None else 0)
        reason = f"the sandbox zygote (pid {pid}) {self._state()}{what}; it was killed and is replaced"
        logger.warning("%s", reason)
        # The zygote alone: its keeper then reaps it and exits (killing the keeper first would leave the zygote to
        # the host's init to reap). Without a known zygote pid, the process the harness started is the zygote.
        target = self.zygote_pid or (self.process.pid if self.process is not None else None)
        if target is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(target, signal.SIGKILL)
        self.lost_reason = reason
        self._lost(reason)
        return reason

    async def _send(self, message: bytes, fds: list[int]) -> None:
        assert self.control is not None
        deadline = asyncio.get_running_loop().time() + self.reply_timeout
        while True:
            try:
                socket.send_fds(self.control, [message], fds)
                return
            except BlockingIOError:
                if asyncio.get_running_loop().time() > deadline:
                    what = f"did not read its requests for {self.reply_timeout:g} s"
                    raise ZygoteFailed(self.abandon(what)) from None
                await asyncio.sleep(0.001)
            except OSError as exc:
                self._lost(f"the sandbox zygote's control socket failed: {exc}")
                raise ZygoteFailed(str(exc)) from exc

    def kill(self, pid: int) -> None:
        if self.alive and self.control is not None:
            with contextlib.suppress(OSError):
                self.control.send(orjson.dumps({"op": "kill", "pid": pid}))

    async def exit_status(self, pid: int, timeout: float) -> int | None:
        if pid in self._exits:
            return self._exits.pop(pid)
        if not self.alive:
            return None
        waiter = self._exit_waiters.get(pid)
        if waiter is None:
            waiter = asyncio.get_running_loop().create_future()
            self._exit_waiters[pid] = waiter
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except (TimeoutError, ZygoteFailed):
            return None

    async def close(self) -> None:
        if self.control is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.control.fileno())
            self.control.close()
            self.control = None
        self.alive = False
        if self.process is not None:
            try:
                await asyncio.wait_for(self.process.wait(), timeout=5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stderr_task
