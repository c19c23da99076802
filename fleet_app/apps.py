from __future__ import annotations

from django.apps import AppConfig


class FleetAppConfig(AppConfig):
    name = "fleet_app"
    verbose_name = "Fleet"
