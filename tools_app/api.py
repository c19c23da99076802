"""GET /catalog: the tools the caller's tenant may enable. POST /executors: client-side runtime
tools are not built into this server yet, so registering an executor is 422 `unsupported`."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from brainsite.application import request_brain
from brainsite.errors import Unsupported
from brainsite.principal import principal_of, require_manage

router = Router(tags=["tools"])


@router.get("/catalog")
async def catalog(request: HttpRequest) -> dict[str, Any]:
    return {"tools": await request_brain(request).registry.acatalog_for(principal_of(request).tenant)}


@router.post("/executors")
async def register_executor(request: HttpRequest) -> dict[str, Any]:
    require_manage(principal_of(request))
    raise Unsupported("runtime tool executors are not enabled on this server")
