"""The admin site Brain serves: Django's, titled for Brain, with a login form that throttles failed
attempts."""

from __future__ import annotations

from django.contrib.admin import AdminSite

from brainsite.login_throttle import ThrottledAuthenticationForm

__all__ = ["BrainAdminSite"]


class BrainAdminSite(AdminSite):
    login_form = ThrottledAuthenticationForm
    site_header = "Brain administration"
    site_title = "Brain admin"
    index_title = "Tenants, tokens, sessions and tools"
    site_url = None  # Brain serves no site besides the API and this admin: no "View site" link
