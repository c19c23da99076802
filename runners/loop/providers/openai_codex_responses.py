"""`openai-codex-responses`: the Responses API of the ChatGPT backend that Codex uses.

The same wire as `openai-responses` (input items, events, encrypted reasoning replayed verbatim),
reached at `{base_url}/codex/responses` (`https://chatgpt.com/backend-api` by default) with a
ChatGPT sign-in instead of a platform API key. The differences, all in this module:
  - the key is the ChatGPT OAuth access token (a JWT); its `https://api.openai.com/auth` claim
    names the account, sent as `chatgpt-account-id`; a key without it is refused before any call;
  - `OpenAI-Beta: responses=experimental` and an `originator` header on every request;
  - the session's prompt-cache key also goes as the `session_id` header (the backend routes its
    cache by it);
  - the backend insists on `store: false` and `instructions` (both always sent, as for
    `openai-responses`) and takes `tool_choice`, `parallel_tool_calls` and a reasoning summary.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from runners.protocol import JSONObject

from ..errors import ProviderFailure
from ..messages import ModelRequest
from .base import Endpoint
from .openai_responses import OpenAIResponses

__all__ = ["OpenAICodexResponses", "chatgpt_account_id"]

ORIGINATOR = "brain"  # names the client to the backend, as Codex's own `codex_cli_rs` does
AUTH_CLAIM = "https://api.openai.com/auth"
# What may go into the account header: printable ASCII without spaces, as account ids are.
_ACCOUNT_ID = re.compile(r"[\x21-\x7e]{1,256}")
# An access token is a few kilobytes; anything far larger is not one (and is not decoded).
MAX_TOKEN_CHARS = 64 * 1024


def chatgpt_account_id(token: str) -> str | None:
    """The ChatGPT account id in an access token's auth claim; None when the key is not one."""
    parts = token.split(".")
    if len(token) > MAX_TOKEN_CHARS or len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    claim = payload.get(AUTH_CLAIM) if isinstance(payload, dict) else None
    account = claim.get("chatgpt_account_id") if isinstance(claim, dict) else None
    return account if isinstance(account, str) and _ACCOUNT_ID.fullmatch(account) else None


class OpenAICodexResponses(OpenAIResponses):
    PATH = "/codex/responses"

    @staticmethod
    def _headers(endpoint: Endpoint) -> dict[str, str]:
        headers = {"OpenAI-Beta": "responses=experimental", "originator": ORIGINATOR}
        account = chatgpt_account_id(endpoint.api_key)
        if account is not None:
            headers["chatgpt-account-id"] = account
        return headers

    def _request_headers(self, request: ModelRequest) -> dict[str, str] | None:
        if chatgpt_account_id(self._endpoint.api_key) is None:
            raise ProviderFailure(
                f"{self._endpoint.provider}: the API key is not a ChatGPT access token "
                "(a JWT whose auth claim names the chatgpt_account_id)"
            )
        return {"session_id": request.cache_key} if request.cache_key else None

    def _settings(self, request: ModelRequest) -> JSONObject:
        body = super()._settings(request)
        body["tool_choice"] = "auto"
        body["parallel_tool_calls"] = True
        if request.reasoning_effort != "off":
            body["reasoning"] = {"effort": request.reasoning_effort, "summary": "auto"}
        return body
