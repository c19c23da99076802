"""The soak (bench/soak.py) for about 20 seconds with a 5-second sample period, on the instance it
starts itself: every row has its figures, the summary has start, end and slope of each, and the
mixed workload (tool turns, streams dropped and reopened, sessions created and closed, sync on)
counts no error. How many turns a sample holds depends on the machine's speed, never asserted.
The long run is `bench/soak.py --minutes 30`."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.soak import slope_per_hour

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"-?\d+(?:\.\d+)?"
# a sample row; its latencies are "-" while no turn has ended yet (a slow start)
LATENCY = rf"({NUMBER}|-)"
ROW = re.compile(rf"^\s*({NUMBER})\s+(\d+)\s+(\d+)\s+{LATENCY}\s+{LATENCY}" + rf"\s+({NUMBER})" * 5 + r"\s*$")
FIGURES = ("RSS MiB", "hosts RSS MiB", "open files", "threads", "event-log MiB", "p50 turn ms", "p99 turn ms")


def test_least_squares_slope_is_per_hour_and_skips_missing_values() -> None:
    assert slope_per_hour([(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]) == 60.0
    assert slope_per_hour([(0.0, 5.0), (1.0, float("nan")), (2.0, 5.0)]) == 0.0
    assert math.isnan(slope_per_hour([(0.0, 5.0)]))


@pytest.mark.timeout(240)  # a loaded machine starts the three processes slowly
def test_a_short_soak_prints_every_figure_and_counts_no_errors() -> None:
    # when
    done = subprocess.run(
        [sys.executable, "bench/soak.py", "--minutes", "0.34", "--sample-seconds", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=200,
    )
    # then
    output = done.stdout
    assert done.returncode == 0, output + done.stderr
    rows = [ROW.match(line) for line in output.splitlines()]
    samples = [row.groups() for row in rows if row is not None]
    assert len(samples) >= 4, output  # a row every 5 s of the soak's own clock
    for _minute, turns, errors, p50, p99, *figures in samples:
        assert int(errors) == 0, output
        assert all(float(value) >= 0 for value in figures), output  # every figure measured
        if int(turns) > 0 or p50 != "-":  # latencies once a turn has ended
            assert float(p50) >= 0 and float(p99) >= 0, output
    assert sum(int(turns) for _, turns, *_ in samples) > 0
    totals = re.search(r"turns (\d+), errors (\d+), sessions created (\d+), closed (\d+), streams opened (\d+)", output)
    assert totals is not None, output
    assert int(totals.group(2)) == 0
    assert int(totals.group(3)) == int(totals.group(4)) > 0  # every session created was closed
    for figure in FIGURES:
        pattern = rf"^{re.escape(figure)}\s+({NUMBER})\s+({NUMBER})\s+({NUMBER})\s+({NUMBER})$"
        line = re.search(pattern, output, re.MULTILINE)
        assert line is not None, f"{figure} missing from:\n{output}"
    assert "error:" not in output
