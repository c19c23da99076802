"""The `loop` runner's session settings: it offers the model every tool Brain sent in `open`."""

from __future__ import annotations

from typing import Any

import pytest

from runners.loop.errors import BrainFailure
from runners.loop.settings import parse_open_params


def _open(descriptors: list[Any], **config: Any) -> dict[str, Any]:
    return {"session_id": "s", "dir": "/tmp/s", "config": {"model": "openai/m", **config}, "tools": descriptors}


def test_every_descriptor_brain_sent_is_offered_in_its_order() -> None:
    # given: a config tool and two bound tools that config.tools does not name
    tools = [
        {"name": "echo", "description": "Echo.", "input_schema": {"type": "object"}},
        {"name": "probe_echo", "description": "Bound.", "input_schema": {"type": "object"}},
        {"name": "runtime_lookup", "description": "Runtime."},
    ]
    # when
    settings = parse_open_params(_open(tools, tools=["echo"]))
    # then
    assert [spec.name for spec in settings.tools] == ["echo", "probe_echo", "runtime_lookup"]
    assert settings.tools[2].input_schema == {"type": "object"}


def test_a_tool_described_twice_is_refused() -> None:
    with pytest.raises(BrainFailure, match="'echo' is described twice"):
        parse_open_params(_open([{"name": "echo"}, {"name": "echo"}]))
