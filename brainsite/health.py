"""Public health routes: never authenticated, never call a model."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from brainsite.application import request_brain
from foundation.wire import Status

router = Router(tags=["health"])


@router.get("/health/live", response={200: Status}, operation_id="healthLive", summary="Liveness")
async def live(request: HttpRequest) -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/ready", response={200: Status, 503: Status}, operation_id="healthReady", summary="Readiness")
async def ready(request: HttpRequest) -> tuple[int, dict[str, str]]:
    if not request_brain(request).ready:
        return 503, {"status": "not_ready"}
    return 200, {"status": "ready"}
