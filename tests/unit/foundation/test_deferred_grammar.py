"""jsonschema's IRI checks load their grammar on first use, not when a process starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys, time
import foundation, jsonschema
from jsonschema import Draft202012Validator, FormatChecker
loaded_at_start = "rfc3987_syntax.syntax_helpers" in sys.modules
validator = Draft202012Validator({"format": "iri"}, format_checker=FormatChecker())
answers = [validator.is_valid(value) for value in ("http://例え.jp/パス", "no iri ::", "https://a.example/x")]
loaded_after = "rfc3987_syntax.syntax_helpers" in sys.modules
print(json.dumps({"loaded_at_start": loaded_at_start, "answers": answers, "checker": loaded_after}))
"""


def test_a_process_that_imports_jsonschema_builds_no_iri_grammar_until_an_iri_is_checked() -> None:
    # when
    completed = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    # then: the stand-in was in place at start, and the formats are checked as before
    assert json.loads(completed.stdout) == {"loaded_at_start": False, "answers": [True, False, True], "checker": True}


def test_the_server_settings_start_without_the_grammar() -> None:
    # when
    probe = (
        "import os, sys, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'brainsite.settings'; django.setup();"
        "import sessions_app.operations;"
        "print('jsonschema' in sys.modules, 'rfc3987_syntax.syntax_helpers' in sys.modules)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    # then: jsonschema was imported (the operations check tenant schemas) but the grammar was not
    assert completed.stdout.split() == ["True", "False"]
