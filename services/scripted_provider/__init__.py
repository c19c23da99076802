"""A scripted model provider: a loopback HTTP server speaking real provider streaming formats.

It serves OpenAI Chat Completions, OpenAI Responses and Anthropic Messages (streaming SSE and
plain JSON) from a rule script, so the official SDKs parse its replies unmodified. It records every
request body for tests. Stdlib only; it never imports Django or the runners.
"""

from __future__ import annotations
