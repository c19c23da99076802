"""The fleet crash drill, two rounds on a fixed seed: three real `runbrain` instances on one real
PostgreSQL, a random one killed (SIGKILL) in each round under load and restarted. Every
acknowledged input runs exactly once or is reported lost with its started turn; none is lost
silently or run twice, every session settles, and idempotency keys replay to their first event."""

from __future__ import annotations

from pathlib import Path

from bench.fleet_drill import run_drill
from tests.fixtures.services import PostgresServer


def test_two_rounds_of_kills_lose_and_duplicate_nothing(postgres_server: PostgresServer, tmp_path: Path) -> None:
    # when: two rounds of the drill on a fixed seed
    figures = run_drill(postgres_server, tmp_path / "fleet", rounds=2, minutes=5, seed=11, sessions=3)
    print(figures.report())
    # then
    assert figures.rounds == 2
    assert figures.acknowledged > 0
    assert (figures.lost, figures.duplicated, figures.unsettled, figures.unreadable) == (0, 0, 0, 0)
    assert (figures.server_errors, figures.failover_failed, figures.replay_mismatches) == (0, 0, 0)
    assert figures.replays == min(figures.acknowledged, 200)
