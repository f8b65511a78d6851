"""Kernel confinement of the processes that run environment and check code.

The zygote (``harness.sandbox.zygote``) calls :func:`prepare` once, before it forks anything; every child calls
:meth:`Confinement.apply` right after the fork (:meth:`Confinement.fork`, which puts it in a PID namespace of its
own), before it reads a byte of untrusted code. The layers, in the order a child applies them:

1. resource limits (address space, no file growth, no core dumps, few descriptors) and death with its parent;
2. not dumpable (no ``/proc/<pid>/mem``, no ptrace by processes of the same user);
3. an unprivileged user: a child of a zygote started as root drops to a uid and gid of its own, from a block of
   uids that zygote alone holds (``harness.sandbox.uids``) and that no account of the machine has;
4. ``no_new_privs``;
5. Landlock: the filesystem is readable only below the Python standard library; nothing is writable;
6. Landlock's scope: no signal and no abstract unix socket reaches a process outside the child;
7. a seccomp allow-list (libseccomp, ``harness.sandbox.syscalls``): pure computation, reads, and writes on
   descriptors it was handed; everything else (exec, fork, sockets, ptrace, signals to others, descriptor owners
   and locks, opening for writing, mknod, mount, namespaces, setuid, raising limits) fails with EPERM;
8. an empty environment (the zygote is started without the parent's variables; the child clears its own).

The zygote itself runs in fresh network, UTS, PID and mount namespaces when the kernel allows it
(``harness.sandbox.namespaces``; inside a user namespace of its own when the harness is not root, and its children
then drop every capability that namespace gives them). Each layer is detected; a missing one is reported with the
reason (``harness doctor``) and never silently assumed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.sandbox.namespaces import (
    fork_into_own_pid_namespace,
    prepare_mount_namespace,
    prepare_network_namespace,
    prepare_process_namespaces,
)
from harness.sandbox.syscalls import (
    create_signal_scope,
    install_seccomp,
    restrict_self,
    seccomp_filter,
    seccomp_program,
)
from harness.sandbox.uids import UidBlock, UidBlockError, reserve_block

LAYERS: tuple[str, ...] = (
    "environment",
    "rlimits",
    "not_dumpable",
    "unprivileged_user",
    "no_new_privs",
    "landlock",
    "signal_scope",
    "seccomp",
    "network_namespace",
    "uts_namespace",
    "pid_namespace",
    "mount_namespace",
)
"""Every confinement layer, by the name ``harness doctor`` and the layer report use."""

DISABLE_VARIABLE = "HARNESS_SANDBOX_DISABLE"
"""Comma-separated layers to leave off, to see how the harness behaves on a kernel without them (tests use it)."""

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522


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
    jail_modules: frozenset[str] = frozenset()
    """The third-party modules the children may import (their folders are readable roots)."""
    jail_site: str | None = None
    """A jail environment's package folder (``harness.sandbox.jail_environment``): then the only third-party
    readable root, in place of the jail modules' folders."""
    statuses: dict[str, LayerStatus] = field(default_factory=dict)
    landlock_ruleset_fd: int | None = None
    signal_scope_fd: int | None = None
    """A Landlock ruleset that handles no file access but scopes signals and abstract unix sockets."""
    seccomp_program: Any = None
    """libseccomp's compiled filter as a ``struct sock_fprog``, built once so each child only installs it."""
    uid_block: UidBlock | None = None
    """Started as root: the block of uids this zygote alone holds; each live child has one of them."""
    drop_capabilities: bool = False
    """The zygote made a user namespace of its own (harness not root): children give up the capabilities it
    grants them there."""
    pid_namespace_fd: int | None = None
    """The zygote's own PID namespace: it forks each child into a new one and comes back here."""
    devnull_fd: int | None = None
    """``/dev/null``, opened before the zygote's root changed: each child points its standard streams at it."""
    proc_fd: int | None = None
    """``/proc`` of the host, opened before the root changed, for the probe child to read its own status; every
    other child closes it before confining itself."""
    libc: Any = None
    _restrict_self: Any = None

    def report(self) -> list[LayerStatus]:
        return [self.statuses[name] for name in LAYERS if name in self.statuses]

    def kept_descriptors(self) -> set[int]:
        """The descriptors a child needs to confine itself (every other one is closed first)."""
        return {fd for fd in (self.landlock_ruleset_fd, self.signal_scope_fd) if fd is not None}

    def fork(self) -> int:
        """``os.fork()``, the child in a PID namespace of its own when that layer is in force."""
        if self.pid_namespace_fd is None:
            return os.fork()
        return fork_into_own_pid_namespace(self.libc, self.pid_namespace_fd)

    def apply(self, slot: int) -> None:
        """Confine the calling process (a freshly forked child). Raises ConfinementError if a layer fails."""
        libc = self.libc
        parent = os.getppid()
        _set_limits(self.memory_mb)
        if self.uid_block is not None:
            uid = self.uid_block.uid(slot)
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            except OSError as exc:
                raise ConfinementError(f"could not drop to an unprivileged user: {exc}") from exc
        if libc is not None:
            # After the uid change: changing credentials clears the parent-death signal.
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            # Did the zygote die before that? In a PID namespace of its own the child cannot see its parent
            # (getppid() is 0), but there the zygote is init of the namespace that holds the child: its death
            # kills the child anyway.
            if self.pid_namespace_fd is None and os.getppid() != parent:
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
        if self.signal_scope_fd is not None:
            if not restrict_self(libc, self.signal_scope_fd):
                raise ConfinementError("could not apply Landlock's signal scope")
            os.close(self.signal_scope_fd)
        if self.seccomp_program is not None and not install_seccomp(libc, self.seccomp_program):
            raise ConfinementError("could not install the seccomp filter")
        os.environ.clear()


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


def readable_roots(jail_modules: Iterable[str] = (), jail_site: str | None = None) -> list[str]:
    """What a confined child may read, for imports the zygote did not do ahead: the standard library and the
    package folders of the jail modules (third-party modules, by name) that are imported (never the rest of
    site-packages); with a jail environment, its package folder ``jail_site`` instead of those folders.

    The standard library is looked up from the base installation: inside a virtual environment ``platstdlib``
    would otherwise name the environment's ``lib/pythonX.Y``, which holds all of its site-packages."""
    base = {
        "base": sys.base_prefix,
        "platbase": sys.base_exec_prefix,
        "installed_base": sys.base_prefix,
        "installed_platbase": sys.base_exec_prefix,
    }
    paths = sysconfig.get_paths(vars=base)
    roots = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib") if key in paths}
    if jail_site is not None:
        roots.add(os.path.realpath(jail_site))
        jail_modules = ()
    for name in jail_modules:
        module = sys.modules.get(name)
        location = getattr(module, "__file__", None)
        if location:
            roots.add(os.path.realpath(os.path.dirname(location)))
    return sorted(root for root in roots if os.path.isdir(root))


def use_jail_environment(site: str) -> None:
    """Make the jail environment's package folder ``site`` the zygote's source of third-party modules, before it
    imports any of them (``harness.sandbox.jail_environment``).

    The split: the zygote's own code (``harness.sandbox``, found through ``PYTHONPATH``; ``orjson``, already
    imported; the Landlock bindings, imported here) keeps coming from the harness's environment and is imported
    before this returns; every module the environment holds comes from ``site``, which goes first on the path.
    A module of the environment already imported from the harness's copies would mix the two: refused."""
    with contextlib.suppress(ImportError):
        import landlock
        import landlock.plumbing  # noqa: F401
    real = os.path.realpath(site)
    held = _top_level_names(real)
    mixed = sorted(name for name in held if name in sys.modules)
    if mixed:
        raise ConfinementError(f"the zygote imported {', '.join(mixed)} before its jail environment {real}")
    sys.path.insert(0, real)


def _top_level_names(site: str) -> set[str]:
    names = set()
    for entry in os.listdir(site):
        if entry.endswith((".dist-info", ".data", "__pycache__")):
            continue
        names.add(entry.split(".")[0])
    return names


def prepare(
    memory_mb: int,
    disabled: frozenset[str],
    seccomp: dict[str, str] | None = None,
    jail_modules: Iterable[str] = (),
    jail_site: str | None = None,
) -> Confinement:
    """Detect and prepare every layer in the zygote (once). Never raises: a missing layer is reported.
    ``jail_modules`` name the third-party modules whose folders the children may read (those imported);
    ``jail_site``, a jail environment's package folder, replaces those folders.

    ``seccomp`` is what :func:`seccomp_filter` built in the harness (the zygote never imports the bindings: they
    pull in ``threading``, whose handler would then run, and write to memory, in every forked child).

    With the PID namespace in force the calling process forks here: only the new zygote returns."""
    confinement = Confinement(
        memory_mb=memory_mb, disabled=disabled, jail_modules=frozenset(jail_modules), jail_site=jail_site
    )
    statuses = confinement.statuses

    def record(name: str, active: bool, detail: str) -> None:
        if name in disabled:
            active, detail = False, f"disabled by {DISABLE_VARIABLE}"
        statuses[name] = LayerStatus(name, active, detail)

    libc = _libc()
    confinement.libc = libc
    if libc is not None:
        # ctypes looks a function up on first use and caches it on the library object: do it once, here.
        _ = libc.prctl, libc.capset, libc.unshare, libc.setns, libc.syscall
    record("environment", True, "started with no variable of the parent; cleared again in each child")
    record("rlimits", True, f"address space {memory_mb} MB" if memory_mb > 0 else "no address-space cap")
    if libc is None:
        record("not_dumpable", False, "libc not found, so prctl is unavailable")
        record("no_new_privs", False, "libc not found, so prctl is unavailable")
    else:
        record("not_dumpable", True, "prctl(PR_SET_DUMPABLE, 0)")
        record("no_new_privs", True, "prctl(PR_SET_NO_NEW_PRIVS, 1)")
    in_user_namespace = prepare_network_namespace(libc, record, disabled)
    in_user_namespace, confinement.pid_namespace_fd = prepare_process_namespaces(
        libc, record, disabled, in_user_namespace
    )
    _prepare_user(confinement, record)
    scope_wanted = "signal_scope" not in disabled
    if "landlock" not in disabled:
        _prepare_landlock(confinement, record, libc, scope_wanted)
    else:
        record("landlock", False, "")
    if not scope_wanted:
        record("signal_scope", False, "")
    elif "signal_scope" not in confinement.statuses:  # not part of the file layer's ruleset
        confinement.signal_scope_fd, detail = create_signal_scope(libc)
        record("signal_scope", confinement.signal_scope_fd is not None, detail)
    if "seccomp" not in disabled:
        confinement.seccomp_program, detail = seccomp_program(seccomp or seccomp_filter())
        record("seccomp", confinement.seccomp_program is not None, detail)
    else:
        record("seccomp", False, "")
    # Last: everything above opens files of the host; after this the zygote sees only the readable roots.
    confinement.devnull_fd = os.open(os.devnull, os.O_RDWR)
    try:
        confinement.proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        confinement.proc_fd = None
    if "mount_namespace" in disabled:
        record("mount_namespace", False, "")
    else:
        roots = readable_roots(confinement.jail_modules, confinement.jail_site)
        in_user_namespace = prepare_mount_namespace(libc, record, in_user_namespace, roots)
    confinement.drop_capabilities = in_user_namespace
    return confinement


def _prepare_user(confinement: Confinement, record: Any) -> None:
    if os.geteuid() != 0:
        record("unprivileged_user", True, f"the harness already runs unprivileged (uid {os.geteuid()})")
        return
    if "unprivileged_user" in confinement.disabled:
        record("unprivileged_user", False, "")
        return
    try:
        block = reserve_block()
    except (OSError, UidBlockError) as exc:
        record("unprivileged_user", False, f"no block of uids could be reserved: {exc}")
        return
    confinement.uid_block = block
    record(
        "unprivileged_user",
        True,
        f"started as root: each child drops to a uid and gid of its own from {block.first}.. (held with a lock "
        f"on {block.lock_path}; no account has one of them)",
    )


def _prepare_landlock(confinement: Confinement, record: Any, libc: Any, scope: bool) -> None:
    """The file layer's ruleset; with ``scope``, and a kernel that scopes signals, one ruleset for both layers."""
    try:
        import landlock
        from landlock.plumbing import FSAccess, PathBeneathAttr, get_add_rule, get_restrict_self
    except ImportError:
        record("landlock", False, "the 'landlock' package is not installed")
        return
    try:
        abi = landlock.landlock_abi_version()
    except OSError as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        record("landlock", False, f"the kernel does not offer it: {reason.splitlines()[-1]}")
        return
    readable = FSAccess.READ_FILE | FSAccess.READ_DIR
    scoped_fd, scope_detail = create_signal_scope(libc, int(FSAccess.all())) if scope else (None, "")
    try:
        if scoped_fd is None:
            ruleset = landlock.Ruleset()
            ruleset.allow(*readable_roots(confinement.jail_modules, confinement.jail_site), rules=readable)
            fd = ruleset._fd  # the ruleset object closes nothing on its own; its descriptor is kept for the children
        else:
            fd = scoped_fd
            for root in readable_roots(confinement.jail_modules, confinement.jail_site):
                held = os.open(root, os.O_PATH | os.O_CLOEXEC)
                try:
                    get_add_rule()(fd, 1, ctypes.byref(PathBeneathAttr(readable, held)), 0)
                finally:
                    os.close(held)
    except OSError as exc:
        if scoped_fd is not None:
            os.close(scoped_fd)
        record("landlock", False, f"creating the ruleset failed: {exc}")
        return
    confinement.landlock_ruleset_fd = fd
    confinement._restrict_self = get_restrict_self()
    os.set_inheritable(fd, True)
    record("landlock", True, f"ABI {abi}: read-only access to the standard library, nothing else")
    if scoped_fd is not None:
        record("signal_scope", True, f"{scope_detail} (in the file layer's ruleset)")


def _libc() -> Any:
    """The C library, through the process's own symbols (the interpreter links it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _ = libc.prctl
    except (OSError, AttributeError):
        return None
    return libc


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
    "use_jail_environment",
]
