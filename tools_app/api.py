"""GET /catalog: the tools the caller's tenant may enable."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from sessions_app.auth import BearerAuth

from . import registry

router = Router(auth=BearerAuth(), tags=["tools"])


@router.get("/catalog")
async def catalog(request: HttpRequest) -> dict[str, Any]:
    return {"tools": await registry.acatalog_for(request.auth.tenant)}  # type: ignore[attr-defined]
