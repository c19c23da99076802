"""A harness runner that never reads its stdin: it only sleeps, or first floods `tool.call` frames.

    deaf_runner.py [--flood N]

With --flood it writes N malformed `tool.call` requests (Brain answers each with a refusal it
will never read), then sleeps. Stdlib only (runs with Brain's whitelisted environment).
"""

from __future__ import annotations

import json
import sys
import time

SLEEP_SECONDS = 120  # far longer than any test; the host's stop() ends it sooner


def main(argv: list[str]) -> None:
    if argv[1:2] == ["--flood"]:
        frame = json.dumps({"attachment": "a", "id": "t1", "method": "tool.call", "params": {}}).encode() + b"\n"
        sys.stdout.buffer.write(frame * int(argv[2]))
        sys.stdout.buffer.flush()
    time.sleep(SLEEP_SECONDS)


if __name__ == "__main__":
    main(sys.argv)
