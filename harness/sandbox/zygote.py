"""The zygote: a pre-warmed process that forks one confined child per environment session or check batch.

Started by ``harness.sandbox.pool`` with no variable of the parent's environment, in a session of its own (so a
Ctrl-C in the terminal reaches the harness, not the sandboxes). It imports everything a child needs, prepares the
confinement layers, freezes the garbage collector's view of its heap (so children share those pages), checks
the layers on a probe child, and then only forks: it never runs untrusted code. It keeps one child forked ahead
(a spare, waiting for its assignment before it confines itself), so a request costs a message, not a fork.

Control messages travel on a SOCK_SEQPACKET socket (fd 3), one orjson message per packet:

- harness → zygote: ``{"op": "spawn", "id": N, "kind": "session"|"checks"}`` with the child's end of a fresh
  socketpair attached (SCM_RIGHTS); ``{"op": "kill", "pid": P}``.
- zygote → harness: ``{"op": "hello", "layers": [...]}`` once (the kernel attaches the sender's credentials to
  every message, so the harness learns the zygote's pid as it sees it, even from outside its PID namespace);
  ``{"op": "spawned", "id": N, "pid": P}`` (sent with the child's pid as the credentials, and
  ``"translated": true``, when the child is in a PID namespace) or
  ``{"op": "spawned", "id": N, "error": "..."}``; ``{"op": "exited", "pid": P, "status": S}`` for each child.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import os
import select
import signal
import socket
import struct
import sys
from types import CodeType
from typing import Any

import orjson

from harness.sandbox import check_runner, runtime, warm_up
from harness.sandbox.confine import Confinement, ConfinementError, disabled_layers, prepare, use_jail_environment
from harness.sandbox.confirmation import CONFINED, UNCONFINED_STATUS
from harness.sandbox.namespaces import HOST_NAME
from harness.sandbox.uids import BLOCK_SIZE

_CONTROL_FD = 3
_MAX_MESSAGE = 65536
_MAX_FD = 4096


def _child(
    channel: socket.socket,
    kind: str,
    slot: int,
    confinement: Confinement,
    settings: runtime.Settings,
    compiled_code: dict[str, CodeType] | None = None,
) -> None:
    """In the forked child: keep only the channel, confine, say so on the channel (``confirmation.CONFINED``),
    serve. Never returns. ``compiled_code`` (the zygote's environment code) goes to a session only: a check process
    is never handed it."""
    code = 0
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        fd = channel.detach()
        # /dev/null and /proc were opened before the zygote's root changed (confine.prepare); neither is in it.
        devnull = confinement.devnull_fd if confinement.devnull_fd is not None else os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(devnull, target)
        # The probe reads the kernel's view of itself through a descriptor opened before confinement.
        status_fd = -1
        if kind == "probe" and confinement.proc_fd is not None:
            status_fd = os.open("self/status", os.O_RDONLY, dir_fd=confinement.proc_fd)
        keep = sorted({fd, status_fd, *confinement.kept_descriptors()} - {-1})
        start = 3
        for kept in keep:
            os.closerange(start, kept)
            start = kept + 1
        os.closerange(start, _MAX_FD)
        confinement.apply(slot)
        if kind != "probe":
            # Every layer is in place: from here on, what ends this process is the code it runs.
            os.write(fd, CONFINED)
        if kind == "session":
            runtime.serve_session(fd, settings, own_process=True, compiled_code=compiled_code)
        elif kind == "checks":
            runtime.serve_checks(fd, settings, check_runner.run_checks)
        elif kind == "probe":
            _serve_probe(fd, status_fd)
    except ConfinementError:
        code = UNCONFINED_STATUS
    except BaseException:
        code = 71
    os._exit(code)


def _wait_for_work(
    assignment: socket.socket, confinement: Confinement, settings: runtime.Settings, compiled_code: dict[str, CodeType]
) -> None:
    """In a spare child, forked ahead of need: wait for the zygote to hand it a channel, then be that child.
    Never returns. The zygote's assignment is all it reads before confining itself."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        message, fds, _flags, _address = socket.recv_fds(assignment, 4096, 1)
        work = orjson.loads(message) if message else None
    except (OSError, orjson.JSONDecodeError):
        os._exit(0)
    if not isinstance(work, dict) or len(fds) != 1:
        os._exit(0)
    assignment.close()
    _child(
        socket.socket(fileno=fds[0]),
        str(work.get("kind")),
        int(work.get("slot", 0)),
        confinement,
        settings,
        compiled_code,
    )


def _serve_probe(fd: int, status_fd: int) -> None:
    """Report what the kernel says about this confined process, for the layer report."""
    report: dict[str, Any] = {}
    report["uid"] = os.getuid()
    report["pid"] = os.getpid()
    report["host_name"] = os.uname().nodename
    try:
        # "/" is never below a readable root: Landlock refuses to list it, with or without the mount namespace.
        os.close(os.open("/", os.O_RDONLY | os.O_DIRECTORY))
        report["reads_outside"] = True
    except OSError:
        report["reads_outside"] = False
    # Landlock does not hide a path from stat(); only a root without the host's folders does.
    report["sees_host_root"] = os.path.lexists("/proc")
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.close()
        report["sockets"] = True
    except OSError:
        report["sockets"] = False
    try:
        report["status"] = os.pread(status_fd, 65536, 0).decode()
    except OSError:
        report["status"] = None
    data = orjson.dumps(report)
    os.write(fd, len(data).to_bytes(4, "little") + data)


class Zygote:
    def __init__(self, control: socket.socket, confinement: Confinement, settings: runtime.Settings):
        self.control = control
        self.confinement = confinement
        self.settings = settings
        self.children: set[int] = set()
        self.slots: dict[int, int] = {}
        """The slot (and so the uid, when started as root) of each live child; slot 0 is the probe's."""
        self.used_slots: set[int] = set()
        self.last_slot = 0
        self.compiled_code: dict[str, CodeType] = {}
        """Environment code the harness compiled and handed over (``load_code``), by source key. Kept here, out of
        every module's namespace: the state a check process puts back after each check is the modules' as the
        zygote had them before any code arrived."""
        self.retired: set[int] = set()
        """Spares replaced before any work was handed to them (``load_code``): their exit is not reported."""
        self.spare: tuple[int, socket.socket] | None = None
        """A child forked ahead of the next spawn request (its pid and the zygote's end of its assignment socket):
        a request then costs a message instead of a fork, and the next spare is forked after the answer."""

    def send(self, message: dict[str, Any], child: int | None = None) -> bool:
        """Send one message. With ``child``, the kernel is asked to carry that child's pid as the sender's, which
        it translates into the harness's PID namespace (the zygote cannot see that pid itself). If it cannot, the
        harness is told the fork failed (False) rather than given a pid that names another process there."""
        if child is not None and self.confinement.pid_namespace_fd is not None:
            credentials = struct.pack("iII", child, os.getuid(), os.getgid())
            try:
                translated = orjson.dumps({**message, "translated": True})
                self.control.sendmsg([translated], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, credentials)])
                return True
            except OSError as exc:
                error = f"the child's pid could not be passed to the harness: {exc}"
                message = {"op": message.get("op"), "id": message.get("id"), "error": error}
        self.control.send(orjson.dumps(message))
        return "error" not in message

    def spawn(self, request: dict[str, Any], fds: list[int]) -> None:
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            self.send({"op": "spawned", "id": request.get("id"), "error": "a spawn request carries one descriptor"})
            return
        spare, self.spare = self.spare or self._fork_spare(), None
        if isinstance(spare, str):
            os.close(fds[0])
            self.send({"op": "spawned", "id": request.get("id"), "error": spare})
            return
        pid, assignment = spare
        slot = self._free_slot()
        self.slots[pid] = slot
        self.used_slots.add(slot)
        # The answer goes first: the spare, once woken, may take the core before the zygote writes again. A spare
        # that died before its assignment closes the channel, which the harness sees as a process that ended.
        told = self.send({"op": "spawned", "id": request.get("id"), "pid": pid}, child=pid)
        try:
            if not told:
                raise OSError("the harness was not told the child's pid")
            socket.send_fds(assignment, [orjson.dumps({"kind": str(request.get("kind")), "slot": slot})], fds)
        except OSError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        finally:
            assignment.close()
            os.close(fds[0])
        forked = self._fork_spare()
        self.spare = forked if not isinstance(forked, str) else None

    def load_code(self, request: dict[str, Any], fds: list[int]) -> None:
        """Keep an environment's code, compiled by the harness, for every child forked from now on (the spare,
        forked before it arrived, is replaced). The bytes come from the harness alone, in a memory file."""
        try:
            if len(fds) == 1:
                data = _read_file(fds[0], int(request.get("size", 0)))
                self.compiled_code[str(request.get("key"))] = marshal.loads(data)  # the harness's bytes, only
        except Exception as exc:  # the harness's own bytes: a failure here is a bug, told on stderr
            print(f"environment code not loaded: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        finally:
            for fd in fds:
                os.close(fd)
        gc.freeze()  # out of the collector's view, as the rest of the zygote's heap: children share its pages
        if self.spare is not None:
            self.retired.add(self.spare[0])
            self.spare[1].close()  # the spare reads an empty assignment and exits; reap() collects it
            self.spare = None
        forked = self._fork_spare()
        self.spare = forked if not isinstance(forked, str) else None

    def _fork_spare(self) -> tuple[int, socket.socket] | str:
        """Fork a spare child (in a PID namespace of its own); its pid and assignment socket, or why not."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = self.confinement.fork()
        except OSError as exc:
            ours.close()
            theirs.close()
            return f"fork failed: {exc}"
        if pid == 0:
            self.control.close()
            ours.close()
            _wait_for_work(theirs, self.confinement, self.settings, self.compiled_code)
        theirs.close()
        self.children.add(pid)
        return pid, ours

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.used_slots.discard(self.slots.pop(pid, 0))
            if self.spare is not None and self.spare[0] == pid:
                self.spare[1].close()
                self.spare = None
            if pid in self.retired:
                self.retired.discard(pid)  # never handed to the harness: nobody waits for it
                continue
            self.send({"op": "exited", "pid": pid, "status": status})

    def _free_slot(self) -> int:
        """A slot no live child holds, so no two live children share a uid."""
        while True:
            self.last_slot = self.last_slot % (BLOCK_SIZE - 1) + 1
            if self.last_slot not in self.used_slots:
                return self.last_slot

    def kill(self, pid: int) -> None:
        if pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def probe(self) -> dict[str, Any]:
        """Fork one confined child that reports what the kernel enforces on it."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = self.confinement.fork()
        except OSError as exc:
            parent.close()
            child.close()
            return {"failed": f"the probe child could not be forked: {exc}"}
        if pid == 0:
            parent.close()
            self.control.close()
            _child(child, "probe", 0, self.confinement, self.settings)
        child.close()
        data = b""
        with parent:
            parent.settimeout(10)
            while True:
                chunk = parent.recv(65536)
                if not chunk:
                    break
                data += chunk
        _, status = os.waitpid(pid, 0)
        if len(data) < 4:
            return {"failed": f"the probe child exited with status {status} before reporting"}
        report: dict[str, Any] = orjson.loads(data[4:])
        return report

    def serve(self) -> None:
        forked = self._fork_spare()
        self.spare = forked if not isinstance(forked, str) else None
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        while True:
            ready, _, _ = select.select([self.control.fileno(), wake_read], [], [])
            if wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
                self.reap()
            if self.control.fileno() in ready:
                try:
                    message, fds, _flags, _address = socket.recv_fds(self.control, _MAX_MESSAGE, 4)
                except ConnectionError:
                    message = b""
                if not message:
                    for pid in list(self.children):
                        self.kill(pid)
                    return
                request = orjson.loads(message)
                if request.get("op") == "spawn":
                    self.spawn(request, fds)
                elif request.get("op") == "code":
                    self.load_code(request, fds)
                elif request.get("op") == "kill":
                    self.kill(int(request.get("pid", 0)))
                self.reap()


def _read_file(fd: int, size: int) -> bytes:
    """``size`` bytes from the start of the file ``fd`` (ValueError when it holds fewer)."""
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            raise ValueError(f"the code file holds {offset} bytes, not {size}")
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _layer_report(confinement: Confinement, probe: dict[str, Any]) -> list[dict[str, Any]]:
    """Prepared layers, corrected by what the probe child observed."""
    status_text = probe.get("status") or ""
    fields = dict(line.split(":", 1) for line in status_text.splitlines() if ":" in line)
    observed = {
        "seccomp": fields.get("Seccomp", "").strip() == "2" and probe.get("sockets") is False,
        "no_new_privs": fields.get("NoNewPrivs", "").strip() == "1",
        "landlock": probe.get("reads_outside") is False,
        "unprivileged_user": probe.get("uid", 0) != 0,
        "pid_namespace": probe.get("pid") == 1,
        "uts_namespace": probe.get("host_name") == HOST_NAME,
        "mount_namespace": probe.get("sees_host_root") is False,
    }
    layers = []
    for status in confinement.report():
        active, detail = status.active, status.detail
        if active and status.name in observed and not observed[status.name]:
            active, detail = False, f"prepared but not in force on a probe child ({detail})"
        layers.append({"name": status.name, "active": active, "detail": detail})
    if "failed" in probe:
        layers.append({"name": "probe", "active": False, "detail": probe["failed"]})
    return layers


def main() -> None:
    options = orjson.loads(sys.argv[1])
    settings = runtime.Settings(
        float(options["call_timeout"]), int(options["max_result_bytes"]), int(options["max_state_bytes"])
    )
    control = socket.socket(fileno=_CONTROL_FD)
    import ctypes

    libc = ctypes.CDLL(None)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the harness
    if os.getppid() == 1:
        return
    jail_modules = frozenset(options.get("jail_modules") or ())
    jail_site = options.get("jail_site")
    if jail_site:
        use_jail_environment(jail_site)
    runtime.prepare_interpreter(options.get("optional_modules"), jail_modules)
    confinement = prepare(
        int(options["memory_mb"]),
        disabled_layers(options.get("disabled_env", {})),
        options.get("seccomp"),
        jail_modules,
        jail_site or None,
    )
    warm_up.warm_up(settings, check_runner.run_checks)
    check_runner.prepare_check_restore()
    zygote = Zygote(control, confinement, settings)
    report = _layer_report(confinement, zygote.probe())
    gc.collect()
    gc.freeze()
    zygote.send({"op": "hello", "layers": report})
    zygote.serve()


if __name__ == "__main__":
    main()
