from __future__ import annotations

from django.apps import AppConfig


class PersistenceAppConfig(AppConfig):
    name = "persistence_app"
    verbose_name = "Persistence"
