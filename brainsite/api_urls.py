"""URLconf of the API alone, served by brainsite.apihandler without Django's middleware."""

from __future__ import annotations

from django.urls import path

from brainsite.api import api, swagger_asset
from brainsite.home import home, to_docs

urlpatterns = [
    path("", home, name="home"),  # before the API's own "" route, ninja's docs redirect that fails
    path("docs/", to_docs),
    path("docs/<str:name>", swagger_asset, name="swagger-asset"),
    path("", api.urls),
]
