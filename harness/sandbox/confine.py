"""Kernel confinement of the processes that run environment and check code.

The zygote (``harness.sandbox.zygote``) calls :func:`prepare` once, before it forks anything; every child calls
:meth:`Confinement.apply` right after the fork, before it reads a byte of untrusted code. The layers, in the order
a child applies them:

1. resource limits (address space, no file growth, no core dumps, few descriptors) and death with its parent;
2. not dumpable (no ``/proc/<pid>/mem``, no ptrace by processes of the same user);
3. an unprivileged user: a child of a zygote started as root drops to a uid and gid of its own;
4. ``no_new_privs``;
5. Landlock: the filesystem is readable only below the Python standard library; nothing is writable;
6. a seccomp allow-list (libseccomp): pure computation, reads, and writes on descriptors it was handed;
   everything else (exec, fork, sockets, ptrace, signals to others, opening for writing, mknod, mount,
   namespaces, setuid, raising limits) fails with EPERM;
7. an empty environment (the zygote is started without the parent's variables; the child clears its own).

The zygote itself runs in a fresh network namespace and a private mount namespace when the kernel allows it
(inside a user namespace of its own when the harness is not root; its children then drop every capability that
namespace gives them). The mount namespace's root is a read-only tmpfs holding read-only bind mounts of
:func:`readable_roots` at their own paths and nothing else, entered with ``pivot_root`` after everything the
zygote needs is imported or open; every child inherits it. Each layer is detected; a missing one is reported with
the reason (``harness doctor``) and never silently assumed.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import functools
import os
import platform
import resource
import signal
import sys
import sysconfig
from dataclasses import dataclass, field
from typing import Any

LAYERS: tuple[str, ...] = (
    "environment",
    "rlimits",
    "not_dumpable",
    "unprivileged_user",
    "no_new_privs",
    "landlock",
    "seccomp",
    "network_namespace",
    "mount_namespace",
)
"""Every confinement layer, by the name ``harness doctor`` and the layer report use."""

DISABLE_VARIABLE = "HARNESS_SANDBOX_DISABLE"
"""Comma-separated layers to leave off, to see how the harness behaves on a kernel without them (tests use it)."""

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_NOATIME = 0x400
_MS_NODIRATIME = 0x800
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_MS_RELATIME = 0x200000
_MNT_DETACH = 0x2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}
_CAPABILITY_VERSION_3 = 0x20080522
# Flags of a mount (statvfs) that a bind remount must repeat: inside a user namespace the kernel locks them.
_KEPT_MOUNT_FLAGS = (
    (os.ST_NOSUID, _MS_NOSUID),
    (os.ST_NODEV, _MS_NODEV),
    (os.ST_NOEXEC, _MS_NOEXEC),
    (os.ST_NOATIME, _MS_NOATIME),
    (os.ST_NODIRATIME, _MS_NODIRATIME),
    (os.ST_RELATIME, _MS_RELATIME),
)
# Existing directories the new root's tmpfs may be mounted on for the moment before pivot_root moves it to "/".
_MOUNT_BASES = ("/tmp", "/mnt", "/run", "/var/tmp", "/media", "/opt", "/srv")
_UID_BASE = 1_500_000_000
_UID_SPAN = 100_000_000
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# What a pure-Python computation on JSON needs once its interpreter is up. Anything missing fails with EPERM.
_ALLOWED_SYSCALLS: tuple[str, ...] = (
    # descriptors it holds: the channel to the harness and /dev/null
    "read", "readv", "pread64", "write", "writev", "close", "lseek", "fcntl", "dup", "dup3",
    "fstat", "newfstatat", "statx", "stat", "lstat", "access", "faccessat", "faccessat2",
    "getdents64", "readlink", "readlinkat", "getcwd",
    # memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise",
    # signals delivered to itself by the kernel (the call timer), and their return
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "setitimer", "getitimer",
    # time, threads' synchronisation inside the interpreter, identity
    "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep",
    "futex", "set_robust_list", "rseq", "sched_yield", "sched_getaffinity",
    "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
    "getgroups", "getrandom", "uname", "sysinfo", "getrusage", "times", "getrlimit",
    "exit", "exit_group", "restart_syscall",
)  # fmt: skip


class ConfinementError(RuntimeError):
    """A layer that was prepared could not be applied in a child: the child must not run untrusted code."""


@dataclass
class LayerStatus:
    name: str
    active: bool
    detail: str


@dataclass
class Confinement:
    """What the zygote prepared, inherited by every child it forks."""

    memory_mb: int
    disabled: frozenset[str]
    statuses: dict[str, LayerStatus] = field(default_factory=dict)
    landlock_ruleset_fd: int | None = None
    seccomp_program: Any = None
    """libseccomp's compiled filter as a ``struct sock_fprog``, built once so each child only installs it."""
    drop_to_uid: bool = False
    drop_capabilities: bool = False
    """The zygote made a user namespace of its own (harness not root): children give up the capabilities it
    grants them there."""
    devnull_fd: int | None = None
    """``/dev/null``, opened before the zygote's root changed: each child points its standard streams at it."""
    proc_fd: int | None = None
    """``/proc`` of the host, opened before the root changed, for the probe child to read its own status; every
    other child closes it before confining itself."""
    _libc: Any = None
    _restrict_self: Any = None

    def report(self) -> list[LayerStatus]:
        return [self.statuses[name] for name in LAYERS if name in self.statuses]

    def apply(self, slot: int) -> None:
        """Confine the calling process (a freshly forked child). Raises ConfinementError if a layer fails."""
        libc = self._libc
        parent = os.getppid()
        _set_limits(self.memory_mb)
        if self.drop_to_uid:
            uid = _UID_BASE + slot % _UID_SPAN
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            except OSError as exc:
                raise ConfinementError(f"could not drop to an unprivileged user: {exc}") from exc
        if libc is not None:
            # After the uid change: changing credentials clears the parent-death signal.
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:
                os._exit(0)
            if "not_dumpable" not in self.disabled:
                libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
            # Without no_new_privs, Landlock and seccomp need CAP_SYS_ADMIN, so the capabilities stay then.
            if self.drop_capabilities and "no_new_privs" not in self.disabled and not _drop_capabilities(libc):
                raise ConfinementError("could not drop the user namespace's capabilities")
        if (
            "no_new_privs" not in self.disabled
            and libc is not None
            and libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        ):
            raise ConfinementError("could not set no_new_privs")
        if self.landlock_ruleset_fd is not None:
            try:
                self._restrict_self(self.landlock_ruleset_fd, 0)
            except OSError as exc:
                raise ConfinementError(f"could not apply Landlock: {exc}") from exc
            os.close(self.landlock_ruleset_fd)
        if self.seccomp_program is not None and not _install_seccomp(libc, self.seccomp_program):
            raise ConfinementError("could not install the seccomp filter")
        os.environ.clear()


def _install_seccomp(libc: Any, program: Any) -> bool:
    return libc is not None and libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) == 0


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities(libc: Any) -> bool:
    """Empty the effective, permitted and inheritable sets of the calling process."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    return int(libc.capset(ctypes.byref(header), data)) == 0


def _set_limits(memory_mb: int) -> None:
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def disabled_layers(environ: dict[str, str] | None = None) -> frozenset[str]:
    raw = (environ if environ is not None else os.environ).get(DISABLE_VARIABLE, "")
    names = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = names - set(LAYERS)
    if unknown:
        raise ValueError(f"{DISABLE_VARIABLE} names unknown layers {sorted(unknown)}; known: {', '.join(LAYERS)}")
    return frozenset(names)


def readable_roots() -> list[str]:
    """What a confined child may read, for imports the zygote did not do ahead: the standard library and the
    package folders of the optional modules that are installed (never the rest of site-packages).

    The standard library is looked up from the base installation: inside a virtual environment ``platstdlib``
    would otherwise name the environment's ``lib/pythonX.Y``, which holds all of its site-packages."""
    from harness.sandbox.policy import OPTIONAL_MODULES

    base = {
        "base": sys.base_prefix,
        "platbase": sys.base_exec_prefix,
        "installed_base": sys.base_prefix,
        "installed_platbase": sys.base_exec_prefix,
    }
    paths = sysconfig.get_paths(vars=base)
    roots = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib") if key in paths}
    for name in OPTIONAL_MODULES:
        module = sys.modules.get(name)
        location = getattr(module, "__file__", None)
        if location:
            roots.add(os.path.realpath(os.path.dirname(location)))
    return sorted(root for root in roots if os.path.isdir(root))


def prepare(memory_mb: int, disabled: frozenset[str], seccomp: dict[str, str] | None = None) -> Confinement:
    """Detect and prepare every layer in the zygote (once). Never raises: a missing layer is reported.

    ``seccomp`` is what :func:`seccomp_filter` built in the harness (the zygote never imports the bindings: they
    pull in ``threading``, whose handler would then run, and write to memory, in every forked child)."""
    confinement = Confinement(memory_mb=memory_mb, disabled=disabled)
    statuses = confinement.statuses

    def record(name: str, active: bool, detail: str) -> None:
        if name in disabled:
            active, detail = False, f"disabled by {DISABLE_VARIABLE}"
        statuses[name] = LayerStatus(name, active, detail)

    libc = _libc()
    confinement._libc = libc
    if libc is not None:
        # ctypes looks a function up on first use and caches it on the library object: do it once, here.
        _ = libc.prctl, libc.capset
    record("environment", True, "started with no variable of the parent; cleared again in each child")
    record("rlimits", True, f"address space {memory_mb} MB" if memory_mb > 0 else "no address-space cap")
    if libc is None:
        record("not_dumpable", False, "libc not found, so prctl is unavailable")
        record("no_new_privs", False, "libc not found, so prctl is unavailable")
    else:
        record("not_dumpable", True, "prctl(PR_SET_DUMPABLE, 0)")
        record("no_new_privs", True, "prctl(PR_SET_NO_NEW_PRIVS, 1)")
    if os.geteuid() == 0:
        confinement.drop_to_uid = "unprivileged_user" not in disabled
        record("unprivileged_user", True, "started as root: each child drops to a uid and gid of its own")
    else:
        record("unprivileged_user", True, f"the harness already runs unprivileged (uid {os.geteuid()})")
    in_user_namespace = _prepare_network_namespace(libc, record, disabled)
    if "landlock" not in disabled:
        _prepare_landlock(confinement, record)
    else:
        record("landlock", False, "")
    if "seccomp" not in disabled:
        _prepare_seccomp(confinement, record, seccomp or seccomp_filter())
    else:
        record("seccomp", False, "")
    # Last: everything above opens files of the host; after this the zygote sees only the readable roots.
    confinement.devnull_fd = os.open(os.devnull, os.O_RDWR)
    with contextlib.suppress(OSError):
        confinement.proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    if "mount_namespace" in disabled:
        record("mount_namespace", False, "")
    else:
        in_user_namespace = _prepare_mount_namespace(libc, record, in_user_namespace)
    confinement.drop_capabilities = in_user_namespace
    return confinement


def _enter_user_namespace(libc: Any, flags: int) -> str | None:
    """unshare(flags) together with a new user namespace mapping only our own uid and gid. The error, or None."""
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(flags | _CLONE_NEWUSER) != 0:
        return f"unshare failed: {os.strerror(ctypes.get_errno())} (user namespaces may be off)"
    try:
        with open("/proc/self/setgroups", "w") as handle:
            handle.write("deny")
        with open("/proc/self/uid_map", "w") as handle:
            handle.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as handle:
            handle.write(f"{gid} {gid} 1")
    except OSError as exc:
        return f"identity map failed: {exc}"
    return None


def _prepare_network_namespace(libc: Any, record: Any, disabled: frozenset[str]) -> bool:
    """Enter a new network namespace. True when a user namespace of our own was made for it."""
    if "network_namespace" in disabled:
        record("network_namespace", False, "")
        return False
    if libc is None:
        record("network_namespace", False, "libc not found")
        return False
    if os.geteuid() == 0:
        if libc.unshare(_CLONE_NEWNET) != 0:
            record("network_namespace", False, f"unshare failed: {os.strerror(ctypes.get_errno())}")
            return False
        record("network_namespace", True, "a new, empty network namespace (no interface is up)")
        return False
    error = _enter_user_namespace(libc, _CLONE_NEWNET)
    if error is not None and error.startswith("unshare"):
        record("network_namespace", False, error)
        return False
    if error is not None:
        record("network_namespace", True, f"a new network namespace ({error})")
        return True
    record("network_namespace", True, "a new, empty network namespace (no interface is up)")
    return True


def _prepare_mount_namespace(libc: Any, record: Any, in_user_namespace: bool) -> bool:
    """Enter a private mount namespace whose root holds only the readable roots, read-only. Returns whether the
    zygote is now in a user namespace of its own."""
    if libc is None:
        record("mount_namespace", False, "libc not found")
        return in_user_namespace
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        record("mount_namespace", False, f"pivot_root's number is not known on {platform.machine()}")
        return in_user_namespace
    if os.geteuid() == 0 or in_user_namespace:
        if libc.unshare(_CLONE_NEWNS) != 0:
            record("mount_namespace", False, f"unshare failed: {os.strerror(ctypes.get_errno())}")
            return in_user_namespace
    else:
        error = _enter_user_namespace(libc, _CLONE_NEWNS)
        if error is not None:
            record("mount_namespace", False, error)
            return False
        in_user_namespace = True
    roots = readable_roots()
    try:
        _build_root(libc, number, roots)
    except OSError as exc:
        # The namespace is private, so a half-built root changes nothing outside; but this zygote's view is now
        # unknown, so it must not be reported as confined.
        record("mount_namespace", False, f"building the new root failed: {exc}")
        return in_user_namespace
    record(
        "mount_namespace",
        True,
        f"a private mount namespace whose root holds only {len(roots)} read-only folder(s): " + ", ".join(roots),
    )
    return in_user_namespace


def _mount(libc: Any, source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    encoded = [None if value is None else value.encode() for value in (source, target, fstype, data)]
    if libc.mount(encoded[0], encoded[1], encoded[2], ctypes.c_ulong(flags), encoded[3]) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {source or ''} on {target}: {os.strerror(code)}")


def _build_root(libc: Any, pivot_root: int, roots: list[str]) -> None:
    """Make every mount private, build the new root on a tmpfs and pivot into it, dropping the old root."""
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE, None)
    outermost = [root for root in roots if not any(root.startswith(other + "/") for other in roots)]
    # Hold each root before the tmpfs goes up, so a root below the tmpfs's mount point is still reachable.
    held = {root: os.open(root, os.O_PATH | os.O_DIRECTORY) for root in outermost}
    try:
        base = next((path for path in _MOUNT_BASES if os.path.isdir(path) and not os.path.islink(path)), None)
        if base is None:
            raise OSError(errno.ENOENT, f"none of {', '.join(_MOUNT_BASES)} exists to mount the new root on")
        _mount(libc, "tmpfs", base, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m,nr_inodes=4096")
        for root, fd in held.items():
            target = base + root
            os.makedirs(target, mode=0o755, exist_ok=True)
            _mount(libc, f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC, None)
            kept = os.statvfs(target).f_flag
            flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY
            flags |= sum(mount_flag for stat_flag, mount_flag in _KEPT_MOUNT_FLAGS if kept & stat_flag)
            _mount(libc, None, target, None, flags, None)
    finally:
        for fd in held.values():
            os.close(fd)
    os.chdir(base)
    # pivot_root(".", "."): the tmpfs becomes "/", the old root is stacked on it and detached at once.
    if libc.syscall(pivot_root, b".", b".") != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"pivot_root: {os.strerror(code)}")
    if libc.umount2(b".", _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"detaching the old root: {os.strerror(code)}")
    os.chdir("/")
    _mount(libc, None, "/", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV, None)


def _prepare_landlock(confinement: Confinement, record: Any) -> None:
    try:
        import landlock
        from landlock.plumbing import FSAccess, get_restrict_self
    except ImportError:
        record("landlock", False, "the 'landlock' package is not installed")
        return
    try:
        abi = landlock.landlock_abi_version()
    except OSError as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        record("landlock", False, f"the kernel does not offer it: {reason.splitlines()[-1]}")
        return
    try:
        ruleset = landlock.Ruleset()
        ruleset.allow(*readable_roots(), rules=FSAccess.READ_FILE | FSAccess.READ_DIR)
    except OSError as exc:
        record("landlock", False, f"creating the ruleset failed: {exc}")
        return
    # The ruleset object closes nothing on its own; keep its descriptor for the children.
    confinement.landlock_ruleset_fd = ruleset._fd
    confinement._restrict_self = get_restrict_self()
    os.set_inheritable(ruleset._fd, True)
    record("landlock", True, f"ABI {abi}: read-only access to the standard library, nothing else")


def _libc() -> Any:
    """The C library, through the process's own symbols (the interpreter links it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _ = libc.prctl
    except (OSError, AttributeError):
        return None
    return libc


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
        for name in _ALLOWED_SYSCALLS:
            _allow(seccomp, syscall_filter, name)
        read_only = seccomp.Arg
        _allow(seccomp, syscall_filter, "openat", read_only(2, seccomp.MASKED_EQ, _WRITE_FLAGS, 0))
        _allow(seccomp, syscall_filter, "open", read_only(1, seccomp.MASKED_EQ, _WRITE_FLAGS, 0))
        # Reading limits is fine; setting them (new_limit != NULL) is not.
        _allow(seccomp, syscall_filter, "prlimit64", read_only(2, seccomp.EQ, 0))
        # clone3's flags sit behind a pointer seccomp cannot read; ENOSYS makes libc fall back to clone (denied).
        _deny(seccomp, syscall_filter, "clone3", errno.ENOSYS)
        code = _exported_bpf(syscall_filter)
    except (OSError, RuntimeError, ValueError) as exc:
        return {"error": f"building the filter failed: {exc}"}
    return {
        "bpf": base64.b64encode(code).decode(),
        "detail": f"allow-list of {len(_ALLOWED_SYSCALLS) + 3} system calls; everything else EPERM",
    }


def _prepare_seccomp(confinement: Confinement, record: Any, built: dict[str, str]) -> None:
    if "bpf" not in built:
        record("seccomp", False, built.get("error", "no filter was built"))
        return
    code = base64.b64decode(built["bpf"])
    if not code or len(code) % 8:
        record("seccomp", False, f"the filter has {len(code)} bytes, not whole BPF instructions")
        return
    buffer = ctypes.create_string_buffer(code, len(code))
    program = _SockFprog(len(code) // 8, ctypes.addressof(buffer))
    program._buffer = buffer  # keep the instructions alive as long as the program
    confinement.seccomp_program = program
    record("seccomp", True, built.get("detail", ""))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


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


__all__ = [
    "DISABLE_VARIABLE",
    "LAYERS",
    "Confinement",
    "ConfinementError",
    "LayerStatus",
    "disabled_layers",
    "prepare",
    "readable_roots",
    "seccomp_filter",
]
