"""What every transport implements, and the pieces they share (timeouts, text of tool results).

A provider turns a `ModelRequest` into exactly one request body (`build_body`, deterministic, so
a restored session sends the byte-identical request) and streams it (`generate`). Bodies go,
encoded once with orjson, through the SDK client's `post` (base URL, auth, headers, retries and
status errors stay the SDK's), which hands back the raw streaming response (`cast_to=httpx.Response`,
what `with_streaming_response` returns); `sse.py` reads its events without a typed object per
event. Not the typed `create` helpers: their per-field param transform walks the whole
conversation in Python on every call (about 0.25 ms per item, so seconds for long sessions) and
would rewrite the body we built.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypedDict, TypeVar

from runners.media import Media, MediaError, data_url_payload, decode_data_url, is_data_url
from runners.protocol import FrameError, JSONObject, decode_json

from ..errors import BrainFailure, ProviderFailure
from ..messages import Generation, ModelRequest, ToolResult
from ..metering import RequestMeter

if TYPE_CHECKING:
    import httpx  # the SDK transports import it; startup must not (the loop starts before any call)

__all__ = [
    "image_base64",
    "image_bytes",
    "refuse_image_url",
    "MAX_RETRIES",
    "ClientOptions",
    "ClientProvider",
    "OUTPUT_TOKENS",
    "THINKING_BUDGETS",
    "Endpoint",
    "Provider",
    "TextSink",
    "client_options",
    "compact_json",
    "parse_arguments",
    "provider_failure",
    "tool_result_text",
]

# Bounded SDK retries (exponential backoff, 408/409/429/5xx and connection errors only).
MAX_RETRIES = 2
# Seconds; reads wait long because reasoning models may think for minutes before a token.
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 600.0
WRITE_TIMEOUT = 60.0
POOL_TIMEOUT = 60.0

# Room for the visible answer where the API wants a limit; thinking budgets come on top (Claude
# wants max_tokens > budget).
OUTPUT_TOKENS = 8192
# reasoning_effort → Claude extended-thinking budget in tokens (1024 is the API's minimum).
THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 24576, "max": 32768}

TextSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to reach one provider; pooled clients are keyed by it."""

    transport: str
    base_url: str
    provider: str
    api_key: str = field(repr=False)


class Provider(Protocol):
    def build_body(self, request: ModelRequest) -> JSONObject: ...

    async def generate(self, request: ModelRequest, *, on_text: TextSink, meter: RequestMeter) -> Generation:
        """Stream one generation; name the usage profile on `meter` first, then report usage and
        the provider's ids on it as they arrive (also when the request fails)."""
        ...


class ClientOptions(TypedDict):
    """What the Anthropic and OpenAI SDK clients are built with."""

    api_key: str
    base_url: str
    max_retries: int
    http_client: httpx.AsyncClient


def client_options(endpoint: Endpoint, http_client: httpx.AsyncClient) -> ClientOptions:
    """An SDK client's options for `endpoint` on the shared pooled HTTP client."""
    return {
        "api_key": endpoint.api_key,
        "base_url": endpoint.base_url,
        "max_retries": MAX_RETRIES,
        "http_client": http_client,
    }


ClientT = TypeVar("ClientT")


class ClientProvider(Generic[ClientT]):
    """A transport over one SDK client for one endpoint; subclasses build it in `create`."""

    def __init__(self, client: ClientT, endpoint: Endpoint) -> None:
        self._client = client
        self._endpoint = endpoint


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def tool_result_text(result: ToolResult) -> str:
    """Transports without an error flag see failed tool results as text starting with `Error:`."""
    return result.text if not result.is_error or result.text.startswith("Error:") else f"Error: {result.text}"


def parse_arguments(raw: str) -> JSONObject:
    """Tool arguments as streamed; broken JSON is wrapped, not dropped.

    Decoded under the frame rules, so arguments with NaN, integers beyond 64 bits or lone
    surrogates (which no `tool.call` frame could carry to Brain) are wrapped the same way.
    """
    if not raw.strip():
        return {}
    try:
        value = decode_json(raw.encode())
    except (FrameError, UnicodeEncodeError):
        return {"_raw_arguments": raw}
    return value if isinstance(value, dict) else {"_value": value}


def provider_failure(name: str, exc: Exception) -> ProviderFailure:
    """One message shape for SDK errors: status code if there is one, then the provider's text."""
    status = getattr(exc, "status_code", None)
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    prefix = f"{name} HTTP {status}" if status else f"{name} {type(exc).__name__}"
    return ProviderFailure(f"{prefix}: {message}")


def image_base64(item: Media) -> str | None:
    """The base64 text of a data: image (None for an https one), as providers that take base64 want it."""
    return data_url_payload(item["url"])[1] if is_data_url(item["url"]) else None


def image_bytes(item: Media) -> bytes | None:
    """The bytes of a data: image (None for an https one), for SDKs that encode them themselves."""
    if not is_data_url(item["url"]):
        return None
    try:
        return decode_data_url(item["url"], expected_type=item["type"])
    except MediaError as exc:
        raise BrainFailure(f"image: {exc}") from None


def refuse_image_url(transport: str) -> BrainFailure:
    """The failure for an https image on a transport whose provider cannot fetch URLs."""
    return BrainFailure(f"{transport} cannot take image URLs; send the image as a data: URL")
