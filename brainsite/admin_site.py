"""The admin site Brain serves: Django's, titled for Brain, with a login form that throttles failed
attempts, and in a fleet (a `cluster` block) the fleet's page of its instances (fleet_app.admin)."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import AdminSite
from django.http import HttpRequest
from django.urls import URLPattern, URLResolver

from brainsite.login_throttle import ThrottledAuthenticationForm
from fleet_app.admin import fleet_section, instances_urls

__all__ = ["BrainAdminSite"]


class BrainAdminSite(AdminSite):
    login_form = ThrottledAuthenticationForm
    site_header = "Brain administration"
    site_title = "Brain admin"
    index_title = "Tenants, tokens, sessions and tools"
    site_url = None  # Brain serves no site besides the API and this admin: no "View site" link

    def get_urls(self) -> list[URLResolver | URLPattern]:
        return [*instances_urls(self), *super().get_urls()]

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[Any]:
        """Django's list, and in a fleet a "Fleet" section linking to the instances page."""
        apps: list[Any] = super().get_app_list(request, app_label)
        section = fleet_section(self, request) if app_label is None else None
        if section is not None:
            apps.append(section)
        return apps
