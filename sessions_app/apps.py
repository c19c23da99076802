from __future__ import annotations

from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Tenants and sessions"  # the admin's heading; "Sessions" is one of its models
