"""Provider transports, imported lazily, and a pool of clients shared by every attachment.

One HTTP connection pool serves all SDK clients in the host process; SDK clients are cached per
endpoint (transport, base URL, key). Importing an SDK costs hundreds of milliseconds, so it happens
on the first turn that needs it, in a worker thread.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from ..metering import count_attempt, note_response
from .base import CONNECT_TIMEOUT, POOL_TIMEOUT, READ_TIMEOUT, WRITE_TIMEOUT, Endpoint, Provider

__all__ = ["TRANSPORTS", "ProviderPool"]

# transport name → (module, class); the class has `create(endpoint, http_client)`.
TRANSPORTS = {
    "openai-completions": ("runners.loop.providers.openai_completions", "OpenAICompletions"),
    "openai-responses": ("runners.loop.providers.openai_responses", "OpenAIResponses"),
    "azure-openai-responses": ("runners.loop.providers.openai_responses", "AzureOpenAIResponses"),
    "anthropic-messages": ("runners.loop.providers.anthropic_messages", "AnthropicMessages"),
    "bedrock-converse-stream": ("runners.loop.providers.bedrock_converse", "BedrockConverse"),
    "google-generative-ai": ("runners.loop.providers.google_genai", "GoogleGenerativeAI"),
    "google-vertex": ("runners.loop.providers.google_genai", "GoogleVertex"),
    "mistral-conversations": ("runners.loop.providers.mistral_conversations", "MistralConversations"),
    "pi-messages": ("runners.loop.providers.pi_messages", "PiMessages"),
    "openai-codex-responses": ("runners.loop.providers.openai_codex_responses", "OpenAICodexResponses"),
}
# Open connections kept across all sessions of the host.
MAX_CONNECTIONS = 64


class ProviderPool:
    def __init__(self) -> None:
        self._providers: dict[Endpoint, Provider] = {}
        self._http_client: Any = None
        self._lock = asyncio.Lock()

    async def get(self, endpoint: Endpoint) -> Provider:
        provider = self._providers.get(endpoint)
        if provider is not None:
            return provider
        async with self._lock:
            if endpoint not in self._providers:
                module_name, class_name = TRANSPORTS[endpoint.transport]
                module = await asyncio.to_thread(importlib.import_module, module_name)
                factory = getattr(module, class_name)
                self._providers[endpoint] = factory.create(endpoint, await self._shared_http_client())
            return self._providers[endpoint]

    async def _shared_http_client(self) -> Any:
        if self._http_client is None:
            httpx = await asyncio.to_thread(importlib.import_module, "httpx")
            self._http_client = httpx.AsyncClient(
                timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT, write=WRITE_TIMEOUT, pool=POOL_TIMEOUT),
                limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
                follow_redirects=True,
                # every attempt of the SDKs' retries, and the provider's request id, for model.request
                event_hooks={"request": [count_attempt], "response": [note_response]},
            )
        return self._http_client

    async def aclose(self) -> None:
        if self._http_client is not None:
            await self._http_client.aclose()
            self._http_client = None
        self._providers.clear()
