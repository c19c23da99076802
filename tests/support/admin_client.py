"""An admin test client whose requests carry an application object in their ASGI scope, as
requests do under runbrain, so admin saves reach that process's caches."""

from __future__ import annotations

from typing import Any

from django.test import AsyncClient


class BrainAdminClient(AsyncClient):
    def __init__(self, brain: Any, **defaults: Any) -> None:
        super().__init__(**defaults)
        self.brain = brain

    def _base_scope(self, **request: Any) -> dict[str, Any]:
        scope: dict[str, Any] = super()._base_scope(**request)  # type: ignore[misc]  # django-stubs omit it
        scope["brain"] = self.brain
        return scope
