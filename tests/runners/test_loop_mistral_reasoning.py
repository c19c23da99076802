"""Mistral Small 4 and Medium 3.5 reason, as Pi's registry says, and are asked to as Mistral expects.

`mistral-small-latest`, `mistral-small-2603` and `mistral-medium-3.5` take Mistral's
`reasoning_effort: "high"`; `mistral-medium-2604` and `mistral-medium-latest`, like Magistral,
`prompt_mode: "reasoning"`. Both harnesses send the same request, so a session moved between
them keeps its reasoning.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import HARNESS_COMMANDS, RunnerProcess, ScriptedProviderServer

EFFORT_MODELS = ["mistral/mistral-small-latest", "mistral/mistral-small-2603", "mistral/mistral-medium-3.5"]
PROMPT_MODE_MODELS = ["mistral/mistral-medium-2604", "mistral/mistral-medium-latest"]


@pytest.fixture(params=sorted(HARNESS_COMMANDS))
def harness(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("model", EFFORT_MODELS + PROMPT_MODE_MODELS)
def test_a_reasoning_effort_on_mistral_small_4_and_medium_3_5_asks_mistral_to_reason(
    model: str, runner: RunnerProcess, provider: ScriptedProviderServer, tmp_path: Path
) -> None:
    # given
    runner.open("a1", tmp_path / "native", model=model, base_url=provider.mistral_base_url, reasoning_effort="medium")

    # when
    reply, _seen = runner.prompt("a1", "think", turn="t1")

    # then
    assert reply["result"] == {}
    (body,) = provider.bodies()
    asked = {key: body[key] for key in ("reasoning_effort", "prompt_mode") if key in body}
    assert asked == ({"reasoning_effort": "high"} if model in EFFORT_MODELS else {"prompt_mode": "reasoning"})
