"""Lossless-stream measurement: a client that drops its event stream at random points of streamed
replies and reconnects after its last cursor must rebuild each reply exactly.

    python bench/reconnect_bench.py [--disconnects 30] [--words 80] [--delay-ms 25] [--seed N] [--fleet]

Starts the scripted provider and a real `runbrain` with the `loop` harness (with --fleet, two
instances on a throwaway PostgreSQL, the client reconnecting through the non-owner and the owner
in turn), sends replies streamed one word a delta, and reads them through the published client's
`observe(id, after=cursor)` (tests/support/reconnects.py): after a delta it drops the stream at
random, stays away up to 0.3 s, forgets the text it held one time in four, and reconnects,
dropping by `offset` what it already has. Prints reconnects, messages, mismatches (rebuilt text
!= the final assistant.message), gaps and duplicates, replayed deltas and the characters dropped
from them, and the time taken. Exits 1 on any mismatch, gap or duplicate.
"""

from __future__ import annotations

import argparse
import random
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import machine  # noqa: E402
from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider  # noqa: E402
from tests.fixtures.server import BrainServer, make_server  # noqa: E402
from tests.fixtures.services import PostgresServer  # noqa: E402
from tests.support.reconnects import STREAMING_PROMPT, DrillFigures, reconnect_drill, streaming_script  # noqa: E402


def _servers(
    directory: Path, provider: ScriptedProvider, *, fleet: bool
) -> tuple[list[BrainServer], PostgresServer | None]:
    """Started servers (the owner first) and what else must be stopped (PostgreSQL or None)."""
    options: dict[str, Any] = {"harnesses": {"loop": LOOP_HARNESS}, "providers": provider.providers()}
    if not fleet:
        server = make_server(directory / "brain", **options)
        server.directory.mkdir(parents=True)
        server.start()
        return [server], None
    postgres = PostgresServer(Path(tempfile.mkdtemp(prefix="brain-reconnect-postgres-", dir="/tmp")))
    postgres.start()
    database = postgres.create_database(f"brain_reconnect_{secrets.token_hex(4)}")
    archive = directory / "archive"
    archive.mkdir(parents=True)
    servers: list[BrainServer] = []
    for name in ("brain-a", "brain-b"):
        server = make_server(
            directory / name, persistence={"provider": "filesystem", "directory": str(archive)}, **options
        )
        server.directory.mkdir(parents=True)
        server.config["cluster"] = {"instance": name, "url": server.url, "shared_directory": True}
        if servers:  # one fleet, one set of tokens
            server.tokens = servers[0].tokens
            server.env = {**servers[0].env, "BRAIN_DATA_DIR": server.env["BRAIN_DATA_DIR"]}
        else:
            server.env |= {"BRAIN_DATABASE_URL": database, "BRAIN_FLEET_SECRET": secrets.token_hex(32)}
        servers.append(server)
        server.start()
    return servers, postgres


def _print(figures: DrillFigures, *, through: str) -> None:
    per = figures.seconds / max(1, figures.reconnects)
    print(f"through: {through}")
    print(f"reconnects: {figures.reconnects} ({figures.cold_reconnects} of a client that forgot its text)")
    print(f"messages: {figures.messages} ({figures.completed_away} ended while the client was away)")
    print(f"mismatches: {figures.mismatches}  gaps: {figures.gaps}  duplicates: {figures.duplicates}")
    print(f"replayed deltas: {figures.replayed_deltas} ({figures.dropped_chars} characters already held, dropped)")
    print(f"time: {figures.seconds:.1f} s ({per:.2f} s per reconnect, replies streaming throughout)")
    for problem in figures.problems[:10]:
        print(f"  problem: {problem}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--disconnects", type=int, default=30)
    parser.add_argument("--words", type=int, default=80, help="words per reply, one a delta")
    parser.add_argument("--delay-ms", type=int, default=25, help="pause between deltas")
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    parser.add_argument("--fleet", action="store_true", help="two instances; reconnect through each in turn")
    arguments = parser.parse_args()
    print(machine())
    print(f"seed: {arguments.seed}; {arguments.words} words a reply, {arguments.delay_ms} ms between deltas")
    directory = Path(tempfile.mkdtemp(prefix="brain-reconnect-bench-", dir="/tmp"))
    provider = ScriptedProvider()
    provider.set_script(streaming_script(arguments.words, delay_ms=arguments.delay_ms))
    servers: list[BrainServer] = []
    postgres: PostgresServer | None = None
    try:
        servers, postgres = _servers(directory, provider, fleet=arguments.fleet)
        owner = servers[0]
        config = {"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
        session_id = str(owner.sdk().create(config)["id"])
        sender = owner.sdk()
        figures = reconnect_drill(
            [server.sdk() for server in servers],
            session_id,
            disconnects=arguments.disconnects,
            rng=random.Random(arguments.seed),
            send=lambda: str(sender.send(session_id, {"type": "user.message", "text": STREAMING_PROMPT})["id"]),
        )
        _print(figures, through="the owner and a non-owner in turn" if arguments.fleet else "one instance")
    finally:
        for server in servers:
            server.stop()
        if postgres is not None:
            postgres.stop()
        provider.stop()
    if figures.mismatches or figures.gaps or figures.duplicates:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
