"""Host validation and framing on the Django stack (the admin): a Host outside ALLOWED_HOSTS is a
400 error envelope; admin pages refuse to be framed; under BRAIN_TLS each request counts as HTTPS."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import Client, override_settings

from fleet_app.fleet import SoloFleet
from tests.support.admin_client import BrainAdminClient


def test_the_test_process_allows_the_loopback_names_of_the_default_listen() -> None:
    # then: no BRAIN_CONFIG here, so the host config's default listen (127.0.0.1) decides
    assert settings.ALLOWED_HOSTS[:4] == ["127.0.0.1", "localhost", "[::1]", "::1"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "host",
    [
        pytest.param("127.0.0.1:8080", id="ipv4_case"),
        pytest.param("localhost", id="name_case"),
        pytest.param("[::1]:8080", id="ipv6_case"),
    ],
)
def test_the_admin_answers_a_loopback_host(host: str) -> None:
    # when
    response = Client().get("/admin/login/", headers={"host": host})

    # then
    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY"


@pytest.mark.django_db
def test_a_host_outside_allowed_hosts_gets_a_400_envelope(caplog: pytest.LogCaptureFixture) -> None:
    # when
    response = Client().get("/admin/login/", headers={"host": "evil.example"})

    # then
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content)["error"]["code"] == "invalid_request"
    assert json.loads(response.content)["error"]["message"] == "host not allowed"
    assert "Set-Cookie" not in response


@pytest.mark.django_db
def test_a_host_outside_allowed_hosts_gets_a_400_through_the_asgi_stack() -> None:
    # given
    client = BrainAdminClient(SimpleNamespace(fleet=SoloFleet()))

    # when
    response = async_to_sync(client.post)(
        "/admin/login/", {"username": "root", "password": "x"}, headers={"host": "evil.example:8080"}
    )

    # then
    assert response.status_code == 400
    assert json.loads(response.content)["error"]["message"] == "host not allowed"


@pytest.mark.django_db
def test_under_brain_tls_an_admin_request_counts_as_https() -> None:
    # given: BRAIN_TLS=1 with HSTS, as the settings module builds it
    tls_settings = override_settings(
        MIDDLEWARE=["brainsite.tls.tls_terminated_middleware", *settings.MIDDLEWARE],
        SECURE_SSL_REDIRECT=True,
        SECURE_HSTS_SECONDS=31536000,
        SESSION_COOKIE_SECURE=True,
        CSRF_COOKIE_SECURE=True,
    )

    # when
    with tls_settings:
        response = Client().get("/admin/login/")
        asgi_response = async_to_sync(BrainAdminClient(SimpleNamespace(fleet=SoloFleet())).get)("/admin/login/")

    # then: no redirect to https (the proxy terminated it), HSTS sent, cookies secure
    for served in (response, asgi_response):
        assert served.status_code == 200
        assert served["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
        assert served.cookies["csrftoken"]["secure"] is True


@pytest.mark.django_db
def test_without_the_tls_middleware_the_proxys_plain_http_hop_would_be_redirected() -> None:
    # given: the redirect on, but nothing saying the proxy terminated TLS
    with override_settings(SECURE_SSL_REDIRECT=True):
        # when
        response = Client().get("/admin/login/")

    # then: the proxy would forward the redirect's https request as plain HTTP again, forever
    assert (response.status_code, response["Location"]) == (301, "https://testserver/admin/login/")
