"""The admin site Brain serves: Django's, titled for Brain, with a login form that throttles failed
attempts, and in a fleet (a `cluster` block) a read-only page of the fleet's instances."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse

from brainsite.login_throttle import ThrottledAuthenticationForm
from fleet_app import db as fleet_db
from foundation.app_object import SCOPE_KEY

__all__ = ["BrainAdminSite"]

INSTANCES_TEMPLATE = "admin/fleet_app/instances.html"
INSTANCES_PERMISSION = "fleet_app.view_instance"  # Django's own view permission of the Instance model


def in_fleet(request: HttpRequest) -> bool:
    """Whether the server answering the request runs with a `cluster` block (its app object then
    has a lease manager). A request outside a server (a WSGI test client) is not in a fleet."""
    scope = getattr(request, "scope", None)
    brain = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return getattr(brain, "leases", None) is not None


class BrainAdminSite(AdminSite):
    login_form = ThrottledAuthenticationForm
    site_header = "Brain administration"
    site_title = "Brain admin"
    index_title = "Tenants, tokens, sessions and tools"
    site_url = None  # Brain serves no site besides the API and this admin: no "View site" link

    def get_urls(self) -> list[URLResolver | URLPattern]:
        instances = path("fleet/instances/", self.admin_view(self.instances_view), name="fleet_instances")
        return [instances, *super().get_urls()]

    def _shows_fleet(self, request: HttpRequest) -> bool:
        return in_fleet(request) and request.user.has_perm(INSTANCES_PERMISSION)

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[Any]:
        """Django's list, and in a fleet a "Fleet" section linking to the instances page."""
        apps: list[Any] = super().get_app_list(request, app_label)
        if app_label is None and self._shows_fleet(request):
            url = reverse("admin:fleet_instances", current_app=self.name)
            instances = {"name": "Instances", "object_name": "Instance", "admin_url": url, "add_url": None}
            model = {**instances, "view_only": True, "perms": {"view": True}}
            apps.append(
                {"name": "Fleet", "app_label": "fleet_app", "app_url": url, "has_module_perms": True, "models": [model]}
            )
        return apps

    def instances_view(self, request: HttpRequest) -> HttpResponse:
        """Every instance of the fleet, read-only: its URL, last heartbeat, whether it is alive,
        the leases it holds that have not expired, and whether it is draining. Not found without
        a `cluster` block."""
        if not in_fleet(request):
            raise Http404("this server is not part of a fleet")
        if not request.user.has_perm(INSTANCES_PERMISSION):
            raise PermissionDenied
        context = {**self.each_context(request), "title": "Instances", "instances": fleet_db.list_instances()}
        return TemplateResponse(request, INSTANCES_TEMPLATE, context)
