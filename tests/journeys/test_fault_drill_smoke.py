"""The mixed-fault drill (bench/fault_drill.py) in three rounds with a fixed seed: a kill -9 of
Brain, of a harness child and a full disk, each hitting sessions with plain, tool-calling,
sub-agent and `loop` turns and a Celery sync worker on Redis. The long run is `make drill`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fault_drill import run_drill

SEED = 20261201
FAULTS = ("brain", "harness", "disk")
INPUTS_PER_ROUND = 12  # four sessions, three inputs each
PUBLISH_BOUND_SECONDS = 20.0  # publish times are figures here, not checked


@pytest.mark.timeout(300)  # a loaded machine starts the five processes slowly
def test_three_rounds_of_faults_lose_duplicate_and_strand_nothing(tmp_path: Path) -> None:
    # when
    figures = run_drill(
        seed=SEED,
        rounds=len(FAULTS),
        minutes=10,
        faults=FAULTS,
        directory=tmp_path,
        publish_bound=PUBLISH_BOUND_SECONDS,
    )
    # then
    print(figures.report())
    assert figures.rounds == len(FAULTS)
    assert dict(figures.faults) == dict.fromkeys(FAULTS, 1)
    assert figures.problems == []
    assert figures.acknowledged == INPUTS_PER_ROUND * len(FAULTS)
    assert (figures.lost, figures.duplicated, figures.unsettled) == ([], [], [])
