"""The `loop` harness: a Python agent loop served over the RunnerFrame stdio protocol.

Run as `python -m runners.loop`. Stdlib, `runners.protocol`, orjson when installed, and the provider
SDKs only (the SDKs are imported when a transport is first used); never Django or the server's apps.
"""

from __future__ import annotations
