"""URLconf of the API alone, served by brainsite.apihandler without Django's middleware."""

from __future__ import annotations

from django.urls import path

from brainsite.api import api

urlpatterns = [path("", api.urls)]
