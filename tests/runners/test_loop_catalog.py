"""The model catalog data, model resolution and the coverage figure (in-process, no Django)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.loop.catalog import catalog_coverage, lookup_model, resolve_model
from runners.loop.catalog_gen import build_catalog, reasoning_profile
from runners.loop.errors import BrainFailure
from tests.support.spec import spec_path


def test_lookup_returns_transport_window_efforts_and_default_endpoint() -> None:
    # when
    spec = lookup_model("anthropic/claude-sonnet-4-5")

    # then
    assert spec is not None
    assert (spec.provider, spec.provider_model, spec.transport, spec.context_window) == (
        "anthropic",
        "claude-sonnet-4-5",
        "anthropic-messages",
        200000,
    )
    assert spec.reasoning_efforts == ("off", "minimal", "low", "medium", "high")
    assert spec.base_url == "https://api.anthropic.com"


def test_a_model_id_with_slashes_keeps_everything_after_the_provider() -> None:
    spec = lookup_model("baseten/deepseek-ai/DeepSeek-V4-Pro")
    assert spec is not None and spec.provider_model == "deepseek-ai/DeepSeek-V4-Pro"


def test_host_overrides_replace_transport_and_endpoint() -> None:
    # when
    resolved = resolve_model(
        "openai/gpt-4.1-mini",
        reasoning_effort="",
        provider={"api_key": "k", "base_url": "http://proxy/v1", "api": "openai-completions"},
    )

    # then
    assert (resolved.transport, resolved.base_url, resolved.reasoning_effort) == (
        "openai-completions",
        "http://proxy/v1",
        "off",
    )
    assert "k" not in repr(resolved)


@pytest.mark.parametrize(
    ("label", "model", "effort", "provider", "message"),
    [
        ("unknown_model_case", "openai/nope", "off", {}, "model 'openai/nope' is not in the model catalog"),
        ("invalid_effort_case", "openai/gpt-5", "extreme", {}, "reasoning effort 'extreme' is not one of"),
        (
            "unsupported_effort_case",
            "openai/gpt-4o",
            "high",
            {},
            "requested reasoning effort is unsupported by the model",
        ),
        ("unimplemented_transport_case", "radius/balanced", "off", {"api": "pi-rpc"}, "transport 'pi-rpc'"),
        ("no_endpoint_case", "azure/gpt-5", "off", {}, "provider 'azure' has no default endpoint"),
    ],
    ids=lambda value: value if isinstance(value, str) and value.endswith("_case") else "",
)
def test_resolution_failures_are_brain_errors(
    label: str, model: str, effort: str, provider: dict[str, str], message: str
) -> None:
    with pytest.raises(BrainFailure) as failure:
        resolve_model(model, reasoning_effort=effort, provider=provider)
    assert failure.value.code == "brain_error"
    assert message in failure.value.message


def test_reasoning_profiles_follow_model_families() -> None:
    assert reasoning_profile("openai/gpt-4.1") == "none"
    assert reasoning_profile("openai/o3-mini") == "openai-o-series"
    assert reasoning_profile("openai/gpt-5-mini") == "openai-gpt-5"
    assert reasoning_profile("openai/gpt-5.2-chat-latest") == "none"
    assert reasoning_profile("anthropic/claude-opus-4-6") == "anthropic-thinking-max"
    assert reasoning_profile("anthropic/claude-haiku-4-5-20251001") == "anthropic-thinking"


def test_every_catalog_model_is_on_a_tested_transport() -> None:
    coverage = catalog_coverage()
    assert coverage.total == 1554
    assert coverage.covered == coverage.total == 714 + 350 + 133 + 44 + 193 + 29 + 13 + 40 + 29 + 9
    assert coverage.share == 1.0


def test_the_committed_catalog_is_what_the_generator_makes_from_the_page() -> None:
    import json

    generated = build_catalog(spec_path("brain-docs/reference-model-catalog.md").read_text(encoding="utf-8"))
    committed = json.loads((Path(__file__).resolve().parents[2] / "runners/loop/models.json").read_text())
    assert generated == committed
