"""Generate `models.json` from the model catalog page (reference-model-catalog.md).

    python -m runners.loop.catalog_gen path/to/reference-model-catalog.md > runners/loop/models.json

The page lists model id, transport and context window only. Reasoning support and default base
URLs are not on it, so this script derives them: reasoning levels from well-known model-family
names (a heuristic, marked as such in the output), base URLs from the providers' public
endpoints. Hosts that need another endpoint set `base_url` in their provider config.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

__all__ = ["build_catalog", "parse_catalog_rows"]

_ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \| (\d+) \|$")

# Named reasoning profiles: the `reasoning_effort` values each accepts ("off" always works).
REASONING_PROFILES: dict[str, list[str]] = {
    "none": ["off"],
    "openai-o-series": ["off", "low", "medium", "high"],
    "openai-gpt-5": ["off", "minimal", "low", "medium", "high"],
    "openai-gpt-5-xhigh": ["off", "minimal", "low", "medium", "high", "xhigh"],
    "anthropic-thinking": ["off", "minimal", "low", "medium", "high"],
    "anthropic-thinking-max": ["off", "minimal", "low", "medium", "high", "xhigh", "max"],
    "generic-reasoning": ["off", "low", "medium", "high"],
}

# Public default endpoints per provider and transport (the SDK appends the route).
# Providers whose endpoint is account-specific (azure, cloudflare, …) have none: set base_url.
BASE_URLS: dict[str, dict[str, str]] = {
    "openai": {"openai-responses": "https://api.openai.com/v1"},
    "anthropic": {"anthropic-messages": "https://api.anthropic.com"},
    "amazon-bedrock": {"bedrock-converse-stream": "https://bedrock-runtime.us-east-1.amazonaws.com"},
    "baseten": {"openai-completions": "https://inference.baseten.co/v1"},
    "cerebras": {"openai-completions": "https://api.cerebras.ai/v1"},
    "deepseek": {"openai-completions": "https://api.deepseek.com/v1"},
    "fireworks": {"openai-completions": "https://api.fireworks.ai/inference/v1"},
    "google": {"google-generative-ai": "https://generativelanguage.googleapis.com"},
    "google-vertex": {"google-vertex": "https://aiplatform.googleapis.com"},
    "groq": {"openai-completions": "https://api.groq.com/openai/v1"},
    "huggingface": {"openai-completions": "https://router.huggingface.co/v1"},
    "kimi-coding": {"anthropic-messages": "https://api.kimi.com/coding"},
    "minimax": {"anthropic-messages": "https://api.minimax.io/anthropic"},
    "minimax-cn": {"anthropic-messages": "https://api.minimaxi.com/anthropic"},
    "mistral": {"mistral-conversations": "https://api.mistral.ai/v1"},
    "moonshotai": {"openai-completions": "https://api.moonshot.ai/v1"},
    "moonshotai-cn": {"openai-completions": "https://api.moonshot.cn/v1"},
    "nvidia": {"openai-completions": "https://integrate.api.nvidia.com/v1"},
    "opencode": {
        "openai-completions": "https://opencode.ai/zen/v1",
        "openai-responses": "https://opencode.ai/zen/v1",
        "anthropic-messages": "https://opencode.ai/zen",
    },
    "openai-codex": {"openai-codex-responses": "https://chatgpt.com/backend-api"},
    "openrouter": {"openai-completions": "https://openrouter.ai/api/v1"},
    "together": {"openai-completions": "https://api.together.xyz/v1"},
    "vercel-ai-gateway": {"anthropic-messages": "https://ai-gateway.vercel.sh"},
    "xai": {"openai-responses": "https://api.x.ai/v1"},
    "zai": {"openai-completions": "https://api.z.ai/api/paas/v4"},
    "zai-coding-cn": {"openai-completions": "https://open.bigmodel.cn/api/coding/paas/v4"},
}

_NON_REASONING = re.compile(r"chat-latest|non-reasoning|instruct|claude-3-(5|haiku|opus|sonnet)|gpt-4|gpt-3|realtime")
_GENERIC_REASONING = re.compile(
    r"thinking|reason|(^|[-/.])r1\b|deepseek-v3\.[12]|deepseek-v4|qwen3|qwq|glm-4\.[5-9]|glm-5|kimi-k2\.[5-9]|kimi-k3"
    r"|grok-3-mini|grok-4|gemini-2\.5|gemini-3|magistral|minimax-m|nemotron|ring-|gpt-oss"
)


# Models whose names do not say they reason but Pi's registry does (Mistral Small 4, Medium 3.5).
_REASONING_MODELS = frozenset(
    {
        "mistral/mistral-small-latest",
        "mistral/mistral-small-2603",
        "mistral/mistral-medium-3.5",
        "mistral/mistral-medium-2604",
        "mistral/mistral-medium-latest",
    }
)


def reasoning_profile(model: str) -> str:
    """Heuristic: the catalog page carries no reasoning data, so infer it from the family name."""
    if model in _REASONING_MODELS:
        return "generic-reasoning"
    name = model.split("/", 1)[1].lower()
    if _NON_REASONING.search(name) and "gpt-oss" not in name:
        return "none"
    if re.search(r"(^|[/.])o[134](-|$)", name):
        return "openai-o-series"
    if "gpt-oss" in name:
        return "openai-o-series"
    gpt = re.search(r"gpt-(\d+)(?:\.(\d+))?", name)
    if gpt:
        major, minor = int(gpt.group(1)), int(gpt.group(2) or 0)
        if major >= 6 or (major == 5 and minor >= 2):
            return "openai-gpt-5-xhigh"
        return "openai-gpt-5" if major == 5 else "none"
    if "gpt-daybreak" in name:
        return "openai-gpt-5-xhigh"
    claude = re.search(r"claude-(?:opus|sonnet|haiku|fable)-(\d+)(?:[-.](\d)(?!\d))?|claude-fable", name)
    if claude:
        if claude.group(1) is None:
            return "anthropic-thinking-max"
        major, minor = int(claude.group(1)), int(claude.group(2) or 0)
        return "anthropic-thinking-max" if (major, minor) >= (4, 6) else "anthropic-thinking"
    if "claude-3-7" in name or "claude-3.7" in name:
        return "anthropic-thinking"
    if _GENERIC_REASONING.search(name):
        return "generic-reasoning"
    return "none"


# Families known to read text only (the catalog page has no input types): a heuristic, like
# the reasoning profiles. A model not matched is taken to accept images.
_TEXT_ONLY = re.compile(
    r"deepseek|nova-micro|gpt-oss|gpt-3\.5|o1-mini|o3-mini|codestral|devstral|qwq|qwen3-coder|kimi-k2(?!\.[5-9])"
    r"|glm-4\.[5-7](?!v)|minimax-m|llama-?3\.?[013]?-|llama-3\.[13]"
)


def takes_images(model: str) -> bool:
    """Heuristic: whether a model reads images, from its family name."""
    name = model.split("/", 1)[1].lower()
    return bool(re.search(r"vision|[-.]vl\b", name)) or not _TEXT_ONLY.search(name)


def parse_catalog_rows(markdown: str) -> list[tuple[str, str, int]]:
    rows = []
    for line in markdown.splitlines():
        match = _ROW.match(line.strip())
        if match:
            rows.append((match.group(1), match.group(2), int(match.group(3))))
    return rows


def build_catalog(markdown: str) -> dict[str, object]:
    rows = parse_catalog_rows(markdown)
    return {
        "source": "reference-model-catalog.md (pinned Pi 1.2.0 model registry)",
        "notes": (
            "reasoning profiles and text_only are inferred from model family names; base URLs are public defaults"
        ),
        "reasoning_profiles": REASONING_PROFILES,
        "base_urls": BASE_URLS,
        "models": {model: [transport, window, reasoning_profile(model)] for model, transport, window in rows},
        "text_only": sorted(model for model, _transport, _window in rows if not takes_images(model)),
    }


def main() -> None:
    catalog = build_catalog(Path(sys.argv[1]).read_text(encoding="utf-8"))
    json.dump(catalog, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
