"""URLconf of the API alone, served by brainsite.apihandler without Django's middleware."""

from __future__ import annotations

from django.urls import path

from brainsite.api import api, swagger_asset

urlpatterns = [
    path("docs/<str:name>", swagger_asset, name="swagger-asset"),
    path("", api.urls),
]
