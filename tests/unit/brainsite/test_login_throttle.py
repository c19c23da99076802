"""Admin login throttling: five failures per username (twenty per address) in five minutes refuse
every further attempt, a correct password included, until the window has passed."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.test import Client, override_settings

from brainsite.login_throttle import (
    ADDRESS_FAILURES,
    FAILURE_WINDOW_SECONDS,
    THROTTLE_CACHE,
    USERNAME_FAILURES,
    LoginThrottle,
)

PASSWORD = "correct horse battery staple"
LOGIN = "/admin/login/?next=/admin/"
THROTTLED = "Too many failed login attempts. Try again in"
INVALID = "Please enter the correct username and password for a staff account."


@pytest.fixture(autouse=True)
def _empty_throttle() -> Iterator[None]:
    caches[THROTTLE_CACHE].clear()
    yield
    caches[THROTTLE_CACHE].clear()


@pytest.fixture
def throttle() -> Iterator[LoginThrottle]:
    cache = LocMemCache("throttle-test", {})  # LocMemCaches of one name share their entries
    cache.clear()
    yield LoginThrottle(cache)
    cache.clear()


@pytest.fixture
def root() -> Iterator[User]:
    # MD5: the default hasher's 1M iterations per attempt would dominate the test
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield User.objects.create_user("root", password=PASSWORD, is_staff=True, is_superuser=True)


def _log_in(client: Client, username: str, password: str) -> tuple[int, str]:
    response = client.post(LOGIN, {"username": username, "password": password, "next": "/admin/"})
    return response.status_code, response.content.decode()


# --- LoginThrottle ----------------------------------------------------------------------------


def test_a_usernames_sixth_attempt_in_the_window_is_refused(throttle: LoginThrottle) -> None:
    # when: five attempts with wrong passwords, then more (from other addresses, in other cases)
    allowed = [throttle.begin_attempt(username="root", address="192.0.2.1") for _ in range(USERNAME_FAILURES)]
    refused = throttle.begin_attempt(username="root", address="192.0.2.9")
    case_variant = throttle.begin_attempt(username="ROOT", address="192.0.2.9")
    other_user = throttle.begin_attempt(username="alice", address="192.0.2.9")

    # then: refused until the window that began with the first attempt has passed
    assert allowed == [0] * USERNAME_FAILURES
    assert FAILURE_WINDOW_SECONDS - 5 < refused <= FAILURE_WINDOW_SECONDS
    assert FAILURE_WINDOW_SECONDS - 5 < case_variant <= FAILURE_WINDOW_SECONDS
    assert other_user == 0


def test_attempts_are_counted_before_any_password_is_checked(throttle: LoginThrottle) -> None:
    # when: ten attempts arrive together, none of them checked yet
    waits = [throttle.begin_attempt(username="root", address=f"192.0.2.{index}") for index in range(10)]

    # then: only five may check a password
    assert [wait == 0 for wait in waits] == [True] * USERNAME_FAILURES + [False] * 5


def test_an_address_is_refused_after_its_own_limit_across_usernames(throttle: LoginThrottle) -> None:
    # when
    allowed = [
        throttle.begin_attempt(username=f"user{index}", address="192.0.2.1") for index in range(ADDRESS_FAILURES)
    ]

    # then
    assert allowed == [0] * ADDRESS_FAILURES
    assert throttle.begin_attempt(username="fresh", address="192.0.2.1") > 0
    assert throttle.begin_attempt(username="fresh", address="192.0.2.2") == 0


def test_a_success_clears_the_username_and_takes_back_the_addresss_attempt(throttle: LoginThrottle) -> None:
    # given: four failures, then a fifth attempt that succeeds
    for _ in range(USERNAME_FAILURES):
        throttle.begin_attempt(username="root", address="192.0.2.1")

    # when
    throttle.succeeded(username="root", address="192.0.2.1")

    # then: five more attempts for root; the address has counted only the four failures
    assert [throttle.begin_attempt(username="root", address="192.0.2.1") for _ in range(5)] == [0] * 5
    remaining = ADDRESS_FAILURES - (USERNAME_FAILURES - 1) - 5
    assert [throttle.begin_attempt(username=f"u{i}", address="192.0.2.1") for i in range(remaining)] == [0] * remaining
    assert throttle.begin_attempt(username="last", address="192.0.2.1") > 0


def test_a_new_window_opens_when_the_old_one_expires() -> None:
    # given: a one-second window, closed
    cache = LocMemCache("throttle-window-test", {})
    throttle = LoginThrottle(cache, window_seconds=1)
    for _ in range(USERNAME_FAILURES):
        throttle.begin_attempt(username="root", address="192.0.2.1")
    assert throttle.begin_attempt(username="root", address="192.0.2.1") == 1

    # when
    time.sleep(1.05)

    # then
    assert throttle.begin_attempt(username="root", address="192.0.2.1") == 0
    cache.clear()


# --- the admin login --------------------------------------------------------------------------


@pytest.mark.django_db
def test_after_five_failures_even_the_correct_password_is_refused(root: User) -> None:
    # given
    client = Client()
    failures = [_log_in(client, "root", "wrong") for _ in range(USERNAME_FAILURES)]

    # when
    status, page = _log_in(client, "root", PASSWORD)

    # then
    assert [(code, INVALID in body, THROTTLED in body) for code, body in failures] == [(200, True, False)] * 5
    assert status == 200
    wait = re.search(rf"{THROTTLED} (\d+) s\.", page)
    assert wait is not None, page
    assert FAILURE_WINDOW_SECONDS - 60 < int(wait.group(1)) <= FAILURE_WINDOW_SECONDS  # the first failure's age
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_the_correct_password_works_again_once_the_window_has_passed(root: User) -> None:
    # given: five failures, then the window passing (the cache entries expire with it)
    client = Client()
    for _ in range(USERNAME_FAILURES):
        _log_in(client, "root", "wrong")
    caches[THROTTLE_CACHE].clear()

    # when
    status, _ = _log_in(client, "root", PASSWORD)

    # then
    assert status == 302
    assert client.session["_auth_user_id"] == str(root.pk)


@pytest.mark.django_db
def test_a_successful_login_clears_the_usernames_failures(root: User) -> None:
    # given
    client = Client()
    for _ in range(USERNAME_FAILURES - 1):
        _log_in(client, "root", "wrong")
    assert _log_in(client, "root", PASSWORD)[0] == 302
    client.logout()

    # when: four more failures would have been nine
    for _ in range(USERNAME_FAILURES - 1):
        _log_in(client, "root", "wrong")
    status, _ = _log_in(client, "root", PASSWORD)

    # then
    assert status == 302


@pytest.mark.django_db
def test_one_address_failing_across_usernames_is_throttled(root: User) -> None:
    # given: failures for made-up usernames from one address
    client = Client()
    for index in range(ADDRESS_FAILURES):
        _log_in(client, f"guess{index}", "wrong")

    # when
    status, page = _log_in(client, "root", PASSWORD)

    # then
    assert status == 200
    assert THROTTLED in page
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_a_form_without_a_password_counts_no_failure(root: User) -> None:
    # given
    client = Client()
    for _ in range(USERNAME_FAILURES):
        client.post(LOGIN, {"username": "root", "password": ""})

    # when
    status, _ = _log_in(client, "root", PASSWORD)

    # then
    assert status == 302
