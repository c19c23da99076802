"""The command line of one local sandbox command: bubblewrap (`bwrap`) around `setpriv` and
`prlimit` from util-linux. Owns the isolation rules; runs nothing but the startup check.

Inside: a new PID, network, IPC, UTS and cgroup namespace (no network at all, not even the
host's loopback), a read-only /usr and a few files of /etc, a fresh /proc, /dev and a small
/tmp, and the sandbox's own work directory as /work, the only writable place that outlives the
command. When the server runs as root, bubblewrap runs privileged and the command drops to the
sandbox's own unprivileged uid (kernel-enforced file separation, and RLIMIT_NPROC counts only
that sandbox's processes: Linux exempts uid 0 from it); otherwise bubblewrap makes a user
namespace and the command keeps the server's uid, the process limit counting per namespace.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BubblewrapUnavailable", "Limits", "check_bubblewrap", "find_bubblewrap", "sandbox_argv"]

CHECK_SECONDS = 10.0  # the startup check runs `true` in a sandbox; a working bwrap needs milliseconds
ETC_FILES = ("/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
SYSTEM_LINKS = (("usr/bin", "/bin"), ("usr/sbin", "/sbin"), ("usr/lib", "/lib"), ("usr/lib64", "/lib64"))
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


class BubblewrapUnavailable(ValueError):
    """No working bubblewrap: a configured local sandbox refuses startup with this one line."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Per command, enforced by the kernel through setrlimit (prlimit) before the command runs."""

    processes: int = 64  # RLIMIT_NPROC: a fork bomb stops here; a build with a few workers fits
    memory_bytes: int = 1 << 30  # RLIMIT_AS per process: room for Python with numpy, not for a leak
    cpu_seconds: int = 30  # RLIMIT_CPU per process: the command's deadline is 30 s of wall time anyway
    file_bytes: int = 64 << 20  # RLIMIT_FSIZE: the largest file a command may write
    open_files: int = 256  # RLIMIT_NOFILE
    tmp_bytes: int = 16 << 20  # the size of /tmp (tmpfs, in memory, gone when the command ends)


def find_bubblewrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise BubblewrapUnavailable(
            "local sandbox: bubblewrap is not installed (no bwrap on PATH); install the Debian package bubblewrap"
        )
    return found


def sandbox_argv(
    bwrap: str, work_dir: Path, command: str, *, uid: int | None, limits: Limits, info_fd: int | None = None
) -> list[str]:
    """`uid` is the sandbox's own uid when the server runs as root, None otherwise; bwrap writes
    `{"child-pid": N}` (the namespace's init, as the host sees it) to `info_fd`."""
    argv = [
        bwrap,
        *(["--info-fd", str(info_fd)] if info_fd is not None else []),
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if uid is None:
        argv += ["--unshare-user", "--uid", "1000", "--gid", "1000"]
    argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for target, link in SYSTEM_LINKS:
        argv += ["--symlink", target, link]
    argv += ["--perms", "0755", "--dir", "/etc"]  # privileged bwrap would make it 0700: unreadable to the uid
    for path in ETC_FILES:
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.tmp_bytes), "--perms", "1777", "--tmpfs", "/tmp"]
    argv += ["--bind", str(work_dir), "/work", "--chdir", "/work", "--clearenv"]
    for name, value in (("PATH", SANDBOX_PATH), ("HOME", "/work"), ("TMPDIR", "/tmp"), ("LANG", "C.UTF-8")):
        argv += ["--setenv", name, value]
    argv.append("--")
    if uid is not None:
        argv += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs"]
        argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
    argv += [
        "/usr/bin/prlimit",
        f"--nproc={limits.processes}",
        f"--as={limits.memory_bytes}",
        f"--cpu={limits.cpu_seconds}",
        f"--fsize={limits.file_bytes}",
        f"--nofile={limits.open_files}",
        "--core=0",
        "--",
        "/bin/sh",
        "-c",
        command,
    ]
    return argv


def check_bubblewrap(bwrap: str, scratch: Path, *, uid: int | None) -> None:
    """Run `true` in a sandbox over `scratch` exactly as commands run; BubblewrapUnavailable
    with bwrap's first line of complaint when it does not work here (no user namespaces, a
    seccomp profile that forbids them, a missing setpriv or prlimit)."""
    argv = sandbox_argv(bwrap, scratch, "true", uid=uid, limits=Limits())
    try:
        done = subprocess.run(argv, capture_output=True, timeout=CHECK_SECONDS, check=False, env={"PATH": SANDBOX_PATH})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BubblewrapUnavailable(f"local sandbox: {bwrap} does not run: {type(exc).__name__}: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0][:200]
        raise BubblewrapUnavailable(
            f"local sandbox: bubblewrap cannot create a sandbox here (exit {done.returncode}: {said})"
        )
