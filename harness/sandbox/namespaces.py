"""The namespaces the zygote enters once, before it forks anything: network, UTS, PID and mount.

Called by :func:`harness.sandbox.confine.prepare`, in this order:

1. a new, empty network namespace (inside a user namespace of its own when the harness is not root);
2. a UTS namespace whose host name is :data:`HOST_NAME`, and a PID namespace: the process forks once; the child
   becomes the zygote, pid 1 of a namespace that its (user namespace's) credentials own, and the original stays a
   small keeper that waits for it and exits with its status. The zygote then forks each child into a PID namespace
   of the child's own (:func:`fork_into_own_pid_namespace`), so a child sees and can signal no other process; and
   since the zygote is init of the namespace holding every child, its death kills them all;
3. a private mount namespace whose root is a read-only tmpfs holding only the readable roots (``pivot_root``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
from collections.abc import Callable
from typing import Any

Record = Callable[[str, bool, str], None]

HOST_NAME = "sandbox"
"""The host name every child reads (``uname``): a fixed neutral word, never the machine's."""

_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
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
PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "riscv64": 41}
_MAX_FD = 4096


def enter_user_namespace(libc: Any, flags: int) -> str | None:
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


def prepare_network_namespace(libc: Any, record: Record, disabled: frozenset[str]) -> bool:
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
    error = enter_user_namespace(libc, _CLONE_NEWNET)
    if error is not None and error.startswith("unshare"):
        record("network_namespace", False, error)
        return False
    if error is not None:
        record("network_namespace", True, f"a new network namespace ({error})")
        return True
    record("network_namespace", True, "a new, empty network namespace (no interface is up)")
    return True


def prepare_mount_namespace(libc: Any, record: Record, in_user_namespace: bool, roots: list[str]) -> bool:
    """Enter a private mount namespace whose root holds only the readable roots, read-only. Returns whether the
    zygote is now in a user namespace of its own."""
    if libc is None:
        record("mount_namespace", False, "libc not found")
        return in_user_namespace
    number = PIVOT_ROOT_SYSCALL.get(platform.machine())
    if number is None:
        record("mount_namespace", False, f"pivot_root's number is not known on {platform.machine()}")
        return in_user_namespace
    if os.geteuid() == 0 or in_user_namespace:
        if libc.unshare(_CLONE_NEWNS) != 0:
            record("mount_namespace", False, f"unshare failed: {os.strerror(ctypes.get_errno())}")
            return in_user_namespace
    else:
        error = enter_user_namespace(libc, _CLONE_NEWNS)
        if error is not None:
            record("mount_namespace", False, error)
            return False
        in_user_namespace = True
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


def prepare_process_namespaces(
    libc: Any, record: Record, disabled: frozenset[str], in_user_namespace: bool
) -> tuple[bool, int | None]:
    """Enter a UTS namespace and a PID namespace. Returns whether the process is now in a user namespace of its
    own, and a descriptor of the PID namespace the zygote lives in (None without one).

    With the PID namespace the calling process forks: the original never returns from here (it waits for the new
    zygote and exits with its status), so the harness still holds one process whose death ends them all."""
    wanted = [name for name in ("uts_namespace", "pid_namespace") if name not in disabled]
    for name in ("uts_namespace", "pid_namespace"):
        if name in disabled:
            record(name, False, "")
    if not wanted:
        return in_user_namespace, None
    if libc is None:
        for name in wanted:
            record(name, False, "libc not found")
        return in_user_namespace, None
    if os.geteuid() != 0 and not in_user_namespace:
        # A PID namespace owned by a user namespace of its own is what lets the zygote later setns() back into it.
        error = enter_user_namespace(libc, 0)
        if error is not None and error.startswith("unshare"):
            for name in wanted:
                record(name, False, error)
            return False, None
        in_user_namespace = True
    if "uts_namespace" in wanted:
        host_name = HOST_NAME.encode()
        if libc.unshare(_CLONE_NEWUTS) != 0:
            record("uts_namespace", False, f"unshare failed: {os.strerror(ctypes.get_errno())}")
        elif libc.sethostname(host_name, len(host_name)) != 0:
            record("uts_namespace", False, f"sethostname failed: {os.strerror(ctypes.get_errno())}")
        else:
            record("uts_namespace", True, f"a UTS namespace of its own: children read the host name {HOST_NAME!r}")
    if "pid_namespace" not in wanted:
        return in_user_namespace, None
    if libc.unshare(_CLONE_NEWPID) != 0:
        record("pid_namespace", False, f"unshare failed: {os.strerror(ctypes.get_errno())}")
        return in_user_namespace, None
    try:
        zygote = os.fork()
    except OSError as exc:
        record("pid_namespace", False, f"fork failed: {exc}")
        return in_user_namespace, None
    if zygote != 0:
        _keep(zygote)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the keeper (fork cleared the setting)
    try:
        # Opened now: the mount namespace built later has no /proc.
        fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        record("pid_namespace", False, f"opening the PID namespace failed: {exc}")
        return in_user_namespace, None
    record("pid_namespace", True, "each child is pid 1 of a PID namespace of its own: it sees and signals no other")
    return in_user_namespace, fd


def _keep(zygote: int) -> None:
    """The original process, outside the zygote's PID namespace: wait for the zygote and exit as it did."""
    os.closerange(3, _MAX_FD)
    while True:
        try:
            _, status = os.waitpid(zygote, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)


def fork_into_own_pid_namespace(libc: Any, namespace_fd: int) -> int:
    """``os.fork()`` with the child as pid 1 of a new PID namespace; the parent returns to ``namespace_fd``."""
    if libc.unshare(_CLONE_NEWPID) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare(CLONE_NEWPID): {os.strerror(code)}")
    try:
        pid = os.fork()
    except OSError:
        _return_to(libc, namespace_fd)
        raise
    if pid != 0 and not _return_to(libc, namespace_fd):
        os.kill(pid, signal.SIGKILL)
        raise OSError(errno.EINVAL, "could not return to the zygote's PID namespace after a fork")
    return pid


def _return_to(libc: Any, namespace_fd: int) -> bool:
    return int(libc.setns(namespace_fd, _CLONE_NEWPID)) == 0


__all__ = [
    "HOST_NAME",
    "PIVOT_ROOT_SYSCALL",
    "Record",
    "enter_user_namespace",
    "fork_into_own_pid_namespace",
    "prepare_mount_namespace",
    "prepare_network_namespace",
    "prepare_process_namespaces",
]
