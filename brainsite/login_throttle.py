"""Admin login throttling: login attempts counted per username and per client address in Django's
cache (a success takes its attempt back); past the limit every attempt, a correct password
included, is refused until the window has passed. The counts live in the `login-throttle` cache,
per process (LocMemCache).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from dataclasses import dataclass

from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.cache import BaseCache, caches
from django.core.exceptions import ValidationError

__all__ = [
    "ADDRESS_FAILURES",
    "FAILURE_WINDOW_SECONDS",
    "THROTTLE_CACHE",
    "USERNAME_FAILURES",
    "LoginThrottle",
    "ThrottledAuthenticationForm",
]

THROTTLE_CACHE = "login-throttle"  # settings.CACHES alias
FAILURE_WINDOW_SECONDS = 300  # five minutes from a key's first counted attempt
USERNAME_FAILURES = 5  # a person mistyping a password does not fail five times in five minutes
# Higher than per username: one address may be a whole office, or the proxy in front of Brain.
ADDRESS_FAILURES = 20


@dataclass(frozen=True, slots=True)
class LoginThrottle:
    """Attempt counters per key in a fixed window that starts at the key's first attempt.

    An attempt is counted before its password is checked, with the cache's atomic add and incr,
    so concurrent attempts cannot all pass a check that none of them has counted yet."""

    cache: BaseCache
    window_seconds: int = FAILURE_WINDOW_SECONDS

    def begin_attempt(self, *, username: str, address: str) -> int:
        """Count an attempt; return the seconds to wait (0: check the password now)."""
        waits = [
            self._count(_username_key(username), USERNAME_FAILURES),
            self._count(_address_key(address), ADDRESS_FAILURES),
        ]
        return max(waits)

    def succeeded(self, *, username: str, address: str) -> None:
        """A successful login clears the username's count and takes back the address's attempt."""
        self.cache.delete_many([_username_key(username), _started_key(_username_key(username))])
        with contextlib.suppress(ValueError):  # the window has just ended
            self.cache.decr(_address_key(address))

    def _count(self, key: str, limit: int) -> int:
        now = time.time()
        self.cache.add(_started_key(key), now, timeout=self.window_seconds)
        self.cache.add(key, 0, timeout=self.window_seconds)
        try:
            attempts = self.cache.incr(key)
        except ValueError:  # expired between add and incr: a new window
            self.cache.set(key, 1, timeout=self.window_seconds)
            attempts = 1
        if attempts <= limit:
            return 0
        started = self.cache.get(_started_key(key))
        if not isinstance(started, float):
            return self.window_seconds
        return max(1, math.ceil(started + self.window_seconds - now))


def _username_key(username: str) -> str:
    # casefold: a case-insensitive authentication backend must not multiply the allowance
    digest = hashlib.sha256(username.casefold().encode()).hexdigest()
    return f"login-failures:user:{digest}"


def _address_key(address: str) -> str:
    return f"login-failures:address:{address}"


def _started_key(key: str) -> str:
    return f"{key}:started"


class ThrottledAuthenticationForm(AdminAuthenticationForm):
    """The admin login form, refusing throttled attempts before any password is checked."""

    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "throttled": "Too many failed login attempts. Try again in %(seconds)s s.",
    }

    def clean(self) -> dict[str, object]:
        username = str(self.cleaned_data.get("username") or "")
        if not (username and self.cleaned_data.get("password")):
            return super().clean()  # the field errors answer; no password is checked
        throttle = LoginThrottle(caches[THROTTLE_CACHE])
        address = self.request.META.get("REMOTE_ADDR", "") if self.request is not None else ""
        seconds = throttle.begin_attempt(username=username, address=address)
        if seconds:
            raise ValidationError(self.error_messages["throttled"], code="throttled", params={"seconds": seconds})
        cleaned: dict[str, object] = super().clean()  # a wrong password raises: the attempt stays counted
        throttle.succeeded(username=username, address=address)
        return cleaned
