"""`python -m runners.loop`: serve RunnerFrames on stdin/stdout until stdin closes."""

from __future__ import annotations

import asyncio
import sys

from .host import serve_stdio


def main() -> None:
    sys.exit(asyncio.run(serve_stdio()))


if __name__ == "__main__":
    main()
