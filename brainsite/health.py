"""Public health routes: never authenticated, never call a model."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import Router

from brainsite.application import request_brain

router = Router(tags=["health"])


@router.get("/health/live")
async def live(request: HttpRequest) -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/ready", response={200: dict[str, str], 503: dict[str, str]})
async def ready(request: HttpRequest) -> tuple[int, dict[str, str]] | HttpResponse:
    if request_brain(request).engine.draining:
        return 503, {"status": "not_ready"}
    return 200, {"status": "ready"}
