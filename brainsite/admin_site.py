"""The admin site Brain serves: Django's, with a login form that throttles failed attempts."""

from __future__ import annotations

from django.contrib.admin import AdminSite

from brainsite.login_throttle import ThrottledAuthenticationForm

__all__ = ["BrainAdminSite"]


class BrainAdminSite(AdminSite):
    login_form = ThrottledAuthenticationForm
