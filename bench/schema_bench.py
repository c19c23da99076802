"""Tenant schema patterns: the catastrophic `^(a+)+$` against "a" * 10,000 + "!" with Brain's
compiled validator (RE2), and jsonschema's default validator (Python's backtracking `re`) in the
same run on a subject short enough to finish (its cost doubles with each extra character).
Then the cost of counting validation steps (foundation.schema_budget): a typed array of small
objects checked with the step meter (first_error) and without it (the same validator, no meter
set), and with jsonschema's own uncounted validator (the schema has no pattern, so its keyword
checks are the same), median per validation and the ratio, the rounds interleaved.

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

from jsonschema import Draft202012Validator  # noqa: E402
from jsonschema.exceptions import best_match  # noqa: E402
from jsonschema.validators import validator_for  # noqa: E402

from foundation.tool_schemas import compile_schema, first_error  # noqa: E402

SCHEMA = {"type": "string", "pattern": "^(a+)+$"}
SUBJECT_CHARS = 10_000
GOAL_MS = 10.0
COUNTED_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["a"],
    },
}
COUNTED_ITEMS = 2_000


def _median_ms(check: Any, subject: str, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        check(subject)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _counting(rounds: int) -> None:
    validator = compile_schema(COUNTED_SCHEMA)
    plain = Draft202012Validator(COUNTED_SCHEMA)
    value = [{"a": index, "b": "x", "c": True} for index in range(COUNTED_ITEMS)]
    checks: dict[str, Any] = {
        "counted": lambda: first_error(validator, value),
        "no meter": lambda: best_match(validator.iter_errors(value)),
        "uncounted": lambda: best_match(plain.iter_errors(value)),
    }
    samples: dict[str, list[float]] = {name: [] for name in checks}
    for _ in range(rounds):
        for name, check in checks.items():
            started = time.perf_counter()
            check()
            samples[name].append((time.perf_counter() - started) * 1000)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"step counting, {COUNTED_ITEMS} objects against a typed items schema, {rounds} rounds interleaved")
    print(f"  with counting (first_error, metered):    median {medians['counted']:8.3f} ms per validation")
    print(f"  counted keywords, no meter set:          median {medians['no meter']:8.3f} ms per validation")
    print(f"  without counting (jsonschema's own):     median {medians['uncounted']:8.3f} ms per validation")
    print(f"  ratio counted / uncounted: {medians['counted'] / medians['uncounted']:.3f}")


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
    _counting(options.rounds)


if __name__ == "__main__":
    main()
