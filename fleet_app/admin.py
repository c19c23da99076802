"""The fleet's page of the admin: its instances, read-only, shown only by a server that runs with
a `cluster` block. brainsite's admin site mounts it (instances_urls, fleet_section)."""

from __future__ import annotations

from typing import Any, Protocol

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from . import db
from .app_object import in_fleet_scope

__all__ = ["INSTANCES_PERMISSION", "fleet_section", "in_fleet", "instances_urls"]

INSTANCES_TEMPLATE = "admin/fleet_app/instances.html"
INSTANCES_PERMISSION = "fleet_app.view_instance"  # Django's own view permission of the Instance model


class Site(Protocol):
    """What the page needs of Django's AdminSite."""

    name: str

    def admin_view(self, view: Any, cacheable: bool = ...) -> Any: ...
    def each_context(self, request: HttpRequest) -> dict[str, Any]: ...


def in_fleet(request: HttpRequest) -> bool:
    """Whether the server answering the request runs with a `cluster` block."""
    return in_fleet_scope(getattr(request, "scope", None))


def instances_urls(site: Site) -> list[URLPattern]:
    def instances_view(request: HttpRequest) -> HttpResponse:
        """Every instance of the fleet, read-only: its URL, last heartbeat, whether it is alive,
        the leases it holds that have not expired, and whether it is draining. Not found without
        a `cluster` block."""
        if not in_fleet(request):
            raise Http404("this server is not part of a fleet")
        if not request.user.has_perm(INSTANCES_PERMISSION):
            raise PermissionDenied
        context = {**site.each_context(request), "title": "Instances", "instances": db.list_instances()}
        return TemplateResponse(request, INSTANCES_TEMPLATE, context)

    return [path("fleet/instances/", site.admin_view(instances_view), name="fleet_instances")]


def fleet_section(site: Site, request: HttpRequest) -> dict[str, Any] | None:
    """In a fleet, for a user who may see it: the admin index's "Fleet" section linking to the
    instances page; else None."""
    if not (in_fleet(request) and request.user.has_perm(INSTANCES_PERMISSION)):
        return None
    url = reverse("admin:fleet_instances", current_app=site.name)
    instances = {"name": "Instances", "object_name": "Instance", "admin_url": url, "add_url": None}
    model = {**instances, "view_only": True, "perms": {"view": True}}
    return {"name": "Fleet", "app_label": "fleet_app", "app_url": url, "has_module_perms": True, "models": [model]}
