"""The command line that starts a harness child under an exec wrapper setting its death signal.

The wrapper (util-linux `setpriv --pdeathsig KILL`, else this file run as a script) sets
PR_SET_PDEATHSIG and execs the runner, so a kill -9 of Brain leaves no orphans without a
`preexec_fn`, which is unsafe in a threaded process and forces the slow fork path.
Stdlib only: as a script it runs with the child's whitelisted environment. Imports no Django.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence

__all__ = ["death_signal_wrapper", "launch_command", "python_wrapper", "setpriv_wrapper"]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
SETPRIV_ARGUMENTS = ("--pdeathsig", "KILL", "--")
WRAPPER_FAILED = 127  # the exit status of a shell that cannot run its command


def setpriv_wrapper() -> list[str] | None:
    """util-linux setpriv (Essential on Debian), found on Brain's PATH; None when missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, *SETPRIV_ARGUMENTS] if setpriv else None


def python_wrapper() -> list[str]:
    """This file run by Brain's interpreter: -I ignores PYTHON* variables and the script's
    directory, -S skips site (a faster start). It gets Brain's pid to close the race with an
    exit of Brain before the death signal is set."""
    return [sys.executable, "-I", "-S", __file__, str(os.getpid())]


def death_signal_wrapper() -> list[str]:
    """setpriv when installed, else the Python wrapper; none off Linux (no PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        return []
    return setpriv_wrapper() or python_wrapper()


def launch_command(
    command: Sequence[str], env: Mapping[str, str], *, wrapper: Sequence[str] | None = None
) -> list[str]:
    """The argv that starts `command` under the wrapper (`death_signal_wrapper()` unless given).

    The program is looked up here on the child's PATH, as a direct exec would, so a missing
    or non-executable program fails the spawn with OSError instead of a wrapper exiting at once.
    """
    program = shutil.which(command[0], path=env.get("PATH", os.defpath))
    if program is None:
        if os.sep in command[0] and os.access(command[0], os.F_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), command[0])
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])
    chosen = death_signal_wrapper() if wrapper is None else wrapper
    return [*chosen, program, *command[1:]]


def _exec_with_death_signal(argv: list[str]) -> None:
    """`launch.py BRAIN_PID PROGRAM ARGS...`: set the death signal, then become the program."""
    parent, command = int(argv[1]), argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        sys.stderr.write(f"launch: prctl failed: {os.strerror(ctypes.get_errno())}\n")
        sys.exit(WRAPPER_FAILED)
    if os.getppid() != parent:  # Brain died before the death signal was set: nobody would kill us
        sys.exit(WRAPPER_FAILED)
    try:
        os.execv(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"launch: cannot run {command[0]}: {exc.strerror}\n")
        sys.exit(WRAPPER_FAILED)


if __name__ == "__main__":
    _exec_with_death_signal(sys.argv)
