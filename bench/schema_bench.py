"""Tenant schema patterns: the catastrophic `^(a+)+$` against "a" * 10,000 + "!" with Brain's
compiled validator (RE2), and jsonschema's default validator (Python's backtracking `re`) in the
same run on a subject short enough to finish (its cost doubles with each extra character).

    .venv/bin/python bench/schema_bench.py [--rounds 50] [--baseline-chars 24]

Goal: Brain's validator under 10 ms on the 10,001-character subject. Prints figures only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jsonschema.validators import validator_for  # noqa: E402

from foundation.tool_schemas import compile_schema, first_error  # noqa: E402

SCHEMA = {"type": "string", "pattern": "^(a+)+$"}
SUBJECT_CHARS = 10_000
GOAL_MS = 10.0


def _median_ms(check: Any, subject: str, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        check(subject)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--baseline-chars", type=int, default=24, help="a's before the '!' for the default validator")
    parser.add_argument("--baseline-rounds", type=int, default=3)
    options = parser.parse_args()

    ours = compile_schema(SCHEMA)
    subject = "a" * SUBJECT_CHARS + "!"
    assert first_error(ours, subject) is not None  # refused, as it must be
    brain_ms = _median_ms(lambda value: first_error(ours, value), subject, options.rounds)

    default_cls = validator_for(SCHEMA)
    default = default_cls(SCHEMA)
    short = "a" * options.baseline_chars + "!"
    assert not default.is_valid(short)
    default_ms = _median_ms(default.is_valid, short, options.baseline_rounds)
    brain_short_ms = _median_ms(lambda value: first_error(ours, value), short, options.rounds)

    print(f"pattern {SCHEMA['pattern']!r}, subject 'a' * n + '!'")
    print(
        f"  brain (RE2)            n={SUBJECT_CHARS:>6}: median {brain_ms:8.3f} ms over {options.rounds} rounds"
        f"  (goal < {GOAL_MS:g} ms: {'met' if brain_ms < GOAL_MS else 'missed'})"
    )
    print(f"  brain (RE2)            n={options.baseline_chars:>6}: median {brain_short_ms:8.3f} ms")
    print(
        f"  jsonschema default re  n={options.baseline_chars:>6}: median {default_ms:8.1f} ms over "
        f"{options.baseline_rounds} rounds (doubles per extra 'a'; n={SUBJECT_CHARS} would not finish)"
    )


if __name__ == "__main__":
    main()
