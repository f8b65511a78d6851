"""The system calls a confined child may make (seccomp) and the Landlock scope that keeps its signals inside it.

:func:`seccomp_filter` runs in the harness (libseccomp's bindings import ``threading``, which the zygote must
never import) and hands the compiled BPF to the zygote; each child installs it with :func:`install_seccomp`.
:func:`create_signal_scope` makes, in the zygote, a Landlock ruleset that scopes signals and abstract unix
sockets (Landlock ABI 6): a child that restricts itself with it can signal no process outside its own domain,
whether with ``kill`` or through a descriptor's owner (``F_SETOWN``). When the file layer is on too, the same
ruleset also handles the file accesses (``handled_access_fs``), so a child restricts itself once: each
``landlock_restrict_self`` makes a new domain, which costs a fork about 0.2 ms.
"""

from __future__ import annotations

import base64
import ctypes
import errno
import fcntl
import functools
import os
import platform
from typing import Any

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# fcntl commands that only duplicate a descriptor or read and set its own flags. Every other command is refused:
# F_SETOWN/F_SETOWN_EX/F_SETSIG would have the kernel signal another process, F_SETLEASE/F_NOTIFY likewise, and
# the lock commands (F_GETLK/F_SETLK/F_SETLKW and their OFD forms) are a channel between processes.
_FCNTL_COMMANDS = (fcntl.F_DUPFD, fcntl.F_DUPFD_CLOEXEC, fcntl.F_GETFD, fcntl.F_SETFD, fcntl.F_GETFL)
_O_ASYNC = 0o20000  # the same on x86_64, aarch64 and riscv64

# What a pure-Python computation on JSON needs once its interpreter is up. Anything missing fails with EPERM.
ALLOWED_SYSCALLS: tuple[str, ...] = (
    # descriptors it holds: the channel to the harness and /dev/null
    "read", "readv", "pread64", "write", "writev", "close", "lseek", "dup", "dup3",
    "fstat", "newfstatat", "statx", "stat", "lstat", "access", "faccessat", "faccessat2",
    "getdents64", "readlink", "readlinkat", "getcwd",
    # memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise",
    # signals delivered to itself by the kernel (the call timer), and their return
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "setitimer", "getitimer",
    # time, threads' synchronisation inside the interpreter, identity
    "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep",
    "futex", "set_robust_list", "rseq", "sched_yield",
    "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
    "getgroups", "getrandom", "uname", "sysinfo", "getrusage", "times", "getrlimit",
    "exit", "exit_group", "restart_syscall",
)  # fmt: skip

ARGUMENT_RULES = (
    "fcntl only to duplicate a descriptor or read and set its flags (never O_ASYNC), "
    "prlimit64 only to read its own limits, sched_getaffinity only on itself"
)


@functools.cache
def seccomp_filter() -> dict[str, str]:
    """The seccomp allow-list compiled to BPF by libseccomp, for the zygote: ``{"bpf": base64}`` and a
    ``detail``, or an ``error`` saying why there is none. Built once per harness process."""
    try:
        import pyseccomp as seccomp
    except (ImportError, RuntimeError) as exc:
        return {"error": f"libseccomp or its bindings are missing: {exc}"}
    try:
        syscall_filter = seccomp.SyscallFilter(defaction=seccomp.ERRNO(errno.EPERM))
        for name in ALLOWED_SYSCALLS:
            _allow(seccomp, syscall_filter, name)
        arg = seccomp.Arg
        _allow(seccomp, syscall_filter, "openat", arg(2, seccomp.MASKED_EQ, _WRITE_FLAGS, 0))
        _allow(seccomp, syscall_filter, "open", arg(1, seccomp.MASKED_EQ, _WRITE_FLAGS, 0))
        for command in _FCNTL_COMMANDS:
            _allow(seccomp, syscall_filter, "fcntl", arg(1, seccomp.EQ, command))
        no_async = arg(2, seccomp.MASKED_EQ, _O_ASYNC, 0)
        _allow(seccomp, syscall_filter, "fcntl", arg(1, seccomp.EQ, fcntl.F_SETFL), no_async)
        # Its own limits (pid 0), read only (new_limit == NULL); no other process's, which would also tell it
        # which pids are alive.
        _allow(seccomp, syscall_filter, "prlimit64", arg(0, seccomp.EQ, 0), arg(2, seccomp.EQ, 0))
        _allow(seccomp, syscall_filter, "sched_getaffinity", arg(0, seccomp.EQ, 0))
        # clone3's flags sit behind a pointer seccomp cannot read; ENOSYS makes libc fall back to clone (denied).
        _deny(seccomp, syscall_filter, "clone3", errno.ENOSYS)
        code = _exported_bpf(syscall_filter)
    except (OSError, RuntimeError, ValueError) as exc:
        return {"error": f"building the filter failed: {exc}"}
    return {
        "bpf": base64.b64encode(code).decode(),
        "detail": f"allow-list of {len(ALLOWED_SYSCALLS) + 5} system calls ({ARGUMENT_RULES}); everything else EPERM",
    }


class SockFprog(ctypes.Structure):
    """``struct sock_fprog``: a BPF program as the kernel takes it."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_program(built: dict[str, str]) -> tuple[SockFprog | None, str]:
    """The program for ``prctl(PR_SET_SECCOMP)`` from what :func:`seccomp_filter` built, or None and why not."""
    if "bpf" not in built:
        return None, built.get("error", "no filter was built")
    code = base64.b64decode(built["bpf"])
    if not code or len(code) % 8:
        return None, f"the filter has {len(code)} bytes, not whole BPF instructions"
    buffer = ctypes.create_string_buffer(code, len(code))
    program = SockFprog(len(code) // 8, ctypes.addressof(buffer))
    program._buffer = buffer  # keep the instructions alive as long as the program
    return program, built.get("detail", "")


def install_seccomp(libc: Any, program: SockFprog) -> bool:
    return libc is not None and libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) == 0


def _exported_bpf(syscall_filter: Any) -> bytes:
    """The BPF program libseccomp generates for the filter."""
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(write_end, "wb", closefd=True) as sink:
            syscall_filter.export_bpf(sink)
        code = b""
        while chunk := os.read(read_end, 65536):
            code += chunk
    finally:
        os.close(read_end)
    if not code or len(code) % 8:
        raise RuntimeError(f"libseccomp exported {len(code)} bytes of BPF")
    return code


def _allow(seccomp: Any, syscall_filter: Any, name: str, *args: Any) -> None:
    try:
        syscall_filter.add_rule(seccomp.ALLOW, name, *args)
    except (OSError, RuntimeError, ValueError) as exc:
        if name == "open" or name in {"stat", "lstat", "access", "time"}:
            return  # not a system call on every architecture (aarch64 has only the *at forms)
        raise RuntimeError(f"{name}: {exc}") from exc


def _deny(seccomp: Any, syscall_filter: Any, name: str, code: int) -> None:
    try:
        syscall_filter.add_rule(seccomp.ERRNO(code), name)
    except (OSError, RuntimeError, ValueError):
        return


# Landlock's system calls have the same numbers on every architecture that has them (the generic table).
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 1
_LANDLOCK_SCOPE_SIGNAL = 2
_SIGNAL_SCOPE_ABI = 6
_LANDLOCK_ARCHITECTURES = {"x86_64", "aarch64", "riscv64"}


class _RulesetAttributes(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


def create_signal_scope(libc: Any, handled_access_fs: int = 0) -> tuple[int | None, str]:
    """A Landlock ruleset that scopes signals and abstract unix sockets (and handles ``handled_access_fs``, for
    path rules the caller adds), as a descriptor, or None and why not."""
    if libc is None:
        return None, "libc not found"
    if platform.machine() not in _LANDLOCK_ARCHITECTURES:
        return None, f"Landlock's system call numbers are not known on {platform.machine()}"
    abi = int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 0:
        return None, f"the kernel does not offer Landlock: {os.strerror(ctypes.get_errno())}"
    if abi < _SIGNAL_SCOPE_ABI:
        return None, f"the kernel's Landlock ABI is {abi}; scoping signals needs ABI {_SIGNAL_SCOPE_ABI} (Linux 6.12)"
    scoped = _LANDLOCK_SCOPE_SIGNAL | _LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
    attributes = _RulesetAttributes(handled_access_fs, 0, scoped)
    fd = int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attributes), ctypes.sizeof(attributes), 0))
    if fd < 0:
        return None, f"creating the scoped ruleset failed: {os.strerror(ctypes.get_errno())}"
    os.set_inheritable(fd, True)
    return fd, f"ABI {abi}: no signal (kill, F_SETOWN) and no abstract unix socket reaches a process outside the child"


def restrict_self(libc: Any, ruleset_fd: int) -> bool:
    return int(libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset_fd, 0)) == 0


__all__ = [
    "ALLOWED_SYSCALLS",
    "SockFprog",
    "create_signal_scope",
    "install_seccomp",
    "restrict_self",
    "seccomp_filter",
    "seccomp_program",
]
