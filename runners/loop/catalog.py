"""The offline model catalog (`models.json`) and model resolution for a session.

`python -m runners.loop.catalog` prints catalog coverage: the share of catalog models whose
transport this runner implements and its conformance tests exercise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from runners.media import IMAGE_TYPES, MediaSupport

from .errors import BrainFailure

__all__ = [
    "IMPLEMENTED_TRANSPORTS",
    "REASONING_EFFORTS",
    "TESTED_TRANSPORTS",
    "Coverage",
    "ModelSpec",
    "ResolvedModel",
    "catalog_coverage",
    "lookup_model",
    "media_support",
    "resolve_model",
]

CATALOG_FILE = Path(__file__).with_name("models.json")

# spec (reference-models): every accepted config.reasoning_effort value; "" means "off".
REASONING_EFFORTS = ("off", "minimal", "low", "medium", "high", "xhigh", "max")

# Transports with a provider module in runners/loop/providers.
IMPLEMENTED_TRANSPORTS = frozenset(
    {
        "openai-completions",
        "openai-responses",
        "azure-openai-responses",
        "anthropic-messages",
        "bedrock-converse-stream",
        "google-generative-ai",
        "google-vertex",
        "mistral-conversations",
        "pi-messages",
        "openai-codex-responses",
    }
)
# Transports that tests/runners drives end to end against the scripted provider.
TESTED_TRANSPORTS = IMPLEMENTED_TRANSPORTS


@dataclass(frozen=True, slots=True)
class ModelSpec:
    model: str  # "provider/model" as in config.model
    provider: str
    provider_model: str  # the id the provider's API expects
    transport: str
    context_window: int
    reasoning_efforts: tuple[str, ...]
    base_url: str | None
    image_input: bool = True  # False for the catalog's `text_only` models


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A catalog model with the host's provider overrides applied, ready to call."""

    spec: ModelSpec
    transport: str
    base_url: str
    reasoning_effort: str
    api_key: str = field(repr=False)


@cache
def _catalog() -> dict[str, Any]:
    catalog: dict[str, Any] = json.loads(CATALOG_FILE.read_text(encoding="utf-8"))
    return catalog


def lookup_model(model: str) -> ModelSpec | None:
    catalog = _catalog()
    entry = catalog["models"].get(model)
    if entry is None:
        return None
    transport, window, profile = entry
    provider, provider_model = model.split("/", 1)
    return ModelSpec(
        model=model,
        provider=provider,
        provider_model=provider_model,
        transport=transport,
        context_window=int(window),
        reasoning_efforts=tuple(catalog["reasoning_profiles"][profile]),
        base_url=catalog["base_urls"].get(provider, {}).get(transport),
        image_input=model not in _text_only(),
    )


@cache
def _text_only() -> frozenset[str]:
    return frozenset(_catalog().get("text_only", ()))


# Image types per transport: Gemini reads PNG, JPEG and WebP (not GIF); the others all four.
_GOOGLE_IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")
# Transports whose provider fetches an https image URL itself. Bedrock Converse takes bytes
# only; the Gemini API's file_data takes only its own Files API URIs (Vertex AI takes https);
# Pi's messages carry base64 images only.
_URL_TRANSPORTS = frozenset(
    {
        "openai-completions",
        "openai-responses",
        "azure-openai-responses",
        "openai-codex-responses",
        "anthropic-messages",
        "google-vertex",
        "mistral-conversations",
    }
)


def media_support(model: str, provider: Mapping[str, object]) -> MediaSupport | None:
    """The images a session's model takes on its transport (the `open` result's `media`);
    None for a text-only model or one the catalog lacks (its turn fails anyway)."""
    spec = lookup_model(model)
    if spec is None or not spec.image_input:
        return None
    transport = str(provider.get("api") or spec.transport)
    types = _GOOGLE_IMAGE_TYPES if transport.startswith("google") else IMAGE_TYPES
    return {"types": list(types), "https": transport in _URL_TRANSPORTS}


def resolve_model(model: str, *, reasoning_effort: str, provider: Mapping[str, object]) -> ResolvedModel:
    """Apply the host's `provider` overrides; raise BrainFailure for what cannot run."""
    spec = lookup_model(model)
    if spec is None:
        raise BrainFailure(f"model {model!r} is not in the model catalog")
    effort = reasoning_effort or "off"
    if effort not in REASONING_EFFORTS:
        raise BrainFailure(f"reasoning effort {effort!r} is not one of {', '.join(REASONING_EFFORTS)}")
    if effort not in spec.reasoning_efforts:
        raise BrainFailure(
            f"requested reasoning effort is unsupported by the model ({model!r} accepts "
            f"{', '.join(spec.reasoning_efforts)}; got {effort!r})"
        )
    transport = str(provider.get("api") or spec.transport)
    if transport not in IMPLEMENTED_TRANSPORTS:
        raise BrainFailure(f"transport {transport!r} of model {model!r} is not supported by the loop runner")
    base_url = str(provider.get("base_url") or spec.base_url or "")
    if not base_url:
        raise BrainFailure(f"provider {spec.provider!r} has no default endpoint; set base_url in the host config")
    return ResolvedModel(
        spec=spec,
        transport=transport,
        base_url=base_url,
        reasoning_effort=effort,
        api_key=str(provider.get("api_key") or ""),
    )


@dataclass(frozen=True, slots=True)
class Coverage:
    total: int
    covered: int
    by_transport: dict[str, int]

    @property
    def share(self) -> float:
        return self.covered / self.total if self.total else 0.0


def catalog_coverage() -> Coverage:
    by_transport: dict[str, int] = {}
    for transport, _window, _profile in _catalog()["models"].values():
        by_transport[transport] = by_transport.get(transport, 0) + 1
    covered = sum(count for transport, count in by_transport.items() if transport in TESTED_TRANSPORTS)
    return Coverage(total=sum(by_transport.values()), covered=covered, by_transport=by_transport)


def main() -> None:
    coverage = catalog_coverage()
    print(f"catalog coverage: {coverage.covered}/{coverage.total} models = {coverage.share:.1%}")
    for transport, count in sorted(coverage.by_transport.items(), key=lambda item: -item[1]):
        mark = "tested" if transport in TESTED_TRANSPORTS else "not implemented"
        print(f"  {transport:26} {count:5}  {mark}")


if __name__ == "__main__":
    main()
