"""runbrain listens with a queue long enough for a burst of clients: Twisted's default of 50
overflowed under hundreds of streams opened at once (the kernel reset the connections)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from brainsite.management.commands.runbrain import LISTEN_BACKLOG
from tests.fixtures.server import BrainServer


def test_runbrain_listens_with_a_backlog_of_1024(brain_factory: Callable[..., BrainServer]) -> None:
    # given a running server
    server = brain_factory()
    port = str(server.config["listen"]).rsplit(":", 1)[1]
    ss = shutil.which("ss")
    assert ss is not None, "ss (iproute2) is needed to read a listening socket's queue length"
    # when the kernel is asked for its listening socket
    out = subprocess.run([ss, "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    # then its queue is LISTEN_BACKLOG long (Send-Q of a listening socket), not Twisted's 50
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert len(rows) == 1, out
    state, _recv_q, send_q = rows[0][:3]
    assert (state, int(send_q)) == ("LISTEN", LISTEN_BACKLOG)
    assert LISTEN_BACKLOG == 1024
