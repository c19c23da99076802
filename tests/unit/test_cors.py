"""CORS for browser clients: the host config's `cors` block refuses what is no exact origin, and
the ASGI middleware answers preflights itself (the app behind it, with authentication and fleet
forwarding, never sees one) and names only a listed Origin on the API's responses."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection
from typing import Any

import pytest
from channels.testing import HttpCommunicator

from brainsite.cors import CorsMiddleware
from foundation.hostconfig import ConfigError, parse_host_config

LISTED = "https://app.example.com"
OTHER = "https://evil.example.net"
MINIMAL: dict[str, Any] = {
    "tokens": [{"token_env": "BRAIN_API_KEY", "tenant": "local"}],
    "harnesses": {"pi": {"command": ["node", "runners/pi/dist/main.js"]}},
}
EXPOSED = b"X-Request-ID, Retry-After, WWW-Authenticate"
HEX32 = re.compile(r"^[0-9a-f]{32}$")


class RecordingApp:
    """The rest of the HTTP stack: records each scope and answers 200 with `headers` and a body
    sent in two chunks, as a stream is."""

    def __init__(self, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.scopes: list[dict[str, Any]] = []
        self.headers = headers if headers is not None else [(b"content-type", b"application/json")]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scopes.append(scope)
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": list(self.headers)})
        await send({"type": "http.response.body", "body": b'{"a":', "more_body": True})
        await send({"type": "http.response.body", "body": b"1}"})


class Origins:
    """`origins_of` that counts its calls."""

    def __init__(self, origins: Collection[str] | None) -> None:
        self.origins = origins
        self.calls = 0

    def __call__(self) -> Collection[str] | None:
        self.calls += 1
        return self.origins


def middleware(inner: RecordingApp, origins: Collection[str] | None = (LISTED,)) -> CorsMiddleware:
    return CorsMiddleware(inner, origins_of=Origins(origins))


async def call(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    communicator = HttpCommunicator(app, method, path, headers=headers or [])
    response: dict[str, Any] = await communicator.get_response()
    return response


def preflight(origin: str, method: bytes = b"POST") -> list[tuple[bytes, bytes]]:
    return [
        (b"origin", origin.encode()),
        (b"access-control-request-method", method),
        (b"access-control-request-headers", b"authorization,content-type"),
    ]


def without_request_id(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [header for header in headers if header[0] != b"x-request-id"]


# --- the host config ---


def test_a_cors_block_keeps_its_exact_origins() -> None:
    # given
    origins = ["https://app.example.com", "http://127.0.0.1:5173", "http://[::1]:3000", "https://xn--bcher-kva.ch"]
    # when
    config = parse_host_config(json.dumps({**MINIMAL, "cors": {"origins": origins}}).encode())
    # then
    assert config.cors is not None and config.cors.origins == origins


def test_a_config_without_a_cors_block_has_none() -> None:
    assert parse_host_config(json.dumps(MINIMAL).encode()).cors is None


@pytest.mark.parametrize(
    ("origins", "message"),
    [
        pytest.param(
            ["*"],
            "cors.origins[0]: '*' is refused: requests carry an Authorization header, so list each origin "
            "exactly (scheme://host[:port])",
            id="wildcard_case",
        ),
        pytest.param(
            [LISTED, "null"],
            "cors.origins[1]: 'null' is refused: sandboxed frames and local files send it, and any page can be one",
            id="null_origin_case",
        ),
        pytest.param(
            ["https://app.example.com/"],
            "cors.origins[0]: 'https://app.example.com/' is not written as a browser sends it: "
            "write 'https://app.example.com'",
            id="trailing_slash_case",
        ),
        pytest.param(
            ["https://App.Example.com"],
            "cors.origins[0]: 'https://App.Example.com' is not written as a browser sends it: "
            "write 'https://app.example.com'",
            id="uppercase_case",
        ),
        pytest.param(
            ["https://app.example.com:443"],
            "cors.origins[0]: 'https://app.example.com:443' is not written as a browser sends it: "
            "write 'https://app.example.com'",
            id="default_port_case",
        ),
        pytest.param(
            ["https://app.example.com/ui"],
            "cors.origins[0]: 'https://app.example.com/ui' is not an origin: "
            "write scheme://host[:port] with scheme http or https",
            id="path_case",
        ),
        pytest.param(
            ["app.example.com"],
            "cors.origins[0]: 'app.example.com' is not an origin: write scheme://host[:port] with scheme http or https",
            id="no_scheme_case",
        ),
        pytest.param(
            ["ftp://app.example.com"],
            "cors.origins[0]: 'ftp://app.example.com' is not an origin: "
            "write scheme://host[:port] with scheme http or https",
            id="other_scheme_case",
        ),
        pytest.param(
            ["https://user@app.example.com"],
            "cors.origins[0]: 'https://user@app.example.com' is not an origin: "
            "write scheme://host[:port] with scheme http or https",
            id="credentials_case",
        ),
        pytest.param(
            ["https://app.example.com:99999"],
            "cors.origins[0]: 'https://app.example.com:99999' is not an origin: "
            "write scheme://host[:port] with scheme http or https",
            id="port_out_of_range_case",
        ),
        pytest.param(
            ["https://bücher.ch"],
            "cors.origins[0]: 'https://bücher.ch' is not an origin: "
            "write scheme://host[:port] with scheme http or https",
            id="non_ascii_host_case",
        ),
        pytest.param(
            [LISTED, "http://127.0.0.1:5173", LISTED],
            "cors.origins[2]: 'https://app.example.com' is listed twice",
            id="duplicate_case",
        ),
        pytest.param([], "cors.origins: List should have at least 1 item after validation, not 0", id="empty_case"),
        pytest.param(LISTED, "cors.origins: Input should be a valid list", id="not_a_list_case"),
        pytest.param([7], "cors.origins[0]: Input should be a valid string", id="not_a_string_case"),
    ],
)
def test_a_cors_origin_that_is_not_exact_is_refused_naming_the_entry(origins: Any, message: str) -> None:
    # when
    with pytest.raises(ConfigError) as refused:
        parse_host_config(json.dumps({**MINIMAL, "cors": {"origins": origins}}).encode())
    # then
    assert str(refused.value) == message


def test_an_unknown_field_in_the_cors_block_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_host_config(json.dumps({**MINIMAL, "cors": {"origins": [LISTED], "credentials": True}}).encode())
    assert str(refused.value) == "cors.credentials: unknown field"


# --- the middleware ---


async def test_a_preflight_from_a_listed_origin_is_answered_without_reaching_the_app() -> None:
    # given
    inner = RecordingApp()
    # when
    response = await call(middleware(inner), "OPTIONS", "/sessions/" + "a" * 32 + "/events", preflight(LISTED))
    # then
    assert response["status"] == 204
    assert response["body"] == b""
    assert without_request_id(response["headers"]) == [
        (b"vary", b"Origin"),
        (b"x-content-type-options", b"nosniff"),
        (b"access-control-allow-origin", LISTED.encode()),
        (b"access-control-allow-methods", b"GET, POST, DELETE"),
        (
            b"access-control-allow-headers",
            b"Authorization, Content-Type, Accept, Last-Event-ID, traceparent, tracestate",
        ),
        (b"access-control-max-age", b"600"),
    ]
    assert HEX32.match(dict(response["headers"])[b"x-request-id"].decode())
    assert inner.scopes == []  # no authentication, no body limit, no fleet forwarding


async def test_a_preflight_from_an_unlisted_origin_is_refused_without_cors_headers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given
    inner = RecordingApp()
    # when
    with caplog.at_level(logging.INFO, logger="brain"):
        response = await call(middleware(inner), "OPTIONS", "/sessions", preflight(OTHER, b"GET"))
    # then
    assert response["status"] == 403
    headers = dict(response["headers"])
    assert without_request_id(response["headers"]) == [
        (b"vary", b"Origin"),
        (b"x-content-type-options", b"nosniff"),
        (b"content-type", b"application/json"),
    ]
    assert json.loads(response["body"]) == {
        "error": {"code": "forbidden", "message": "origin not allowed"},
        "request_id": headers[b"x-request-id"].decode(),
    }
    assert inner.scopes == []
    refusals = [record for record in caplog.records if record.getMessage() == "cors origin refused"]
    assert [(r.origin, r.path, r.requested_method) for r in refusals] == [(OTHER, "/sessions", "GET")]  # type: ignore[attr-defined]  # logging extras


@pytest.mark.parametrize("path", ["/sessions", "/sessions/" + "b" * 32 + "/events", "/catalog", "/health/ready"])
async def test_a_request_from_a_listed_origin_names_it_and_exposes_the_api_headers(path: str) -> None:
    # given
    inner = RecordingApp(headers=[(b"content-type", b"text/event-stream"), (b"x-request-id", b"r" * 32)])
    # when
    response = await call(middleware(inner), "GET", path, [(b"origin", LISTED.encode())])
    # then
    assert response["status"] == 200
    assert response["body"] == b'{"a":1}'
    assert response["headers"] == [
        (b"content-type", b"text/event-stream"),
        (b"x-request-id", b"r" * 32),
        (b"vary", b"Origin"),
        (b"access-control-allow-origin", LISTED.encode()),
        (b"access-control-expose-headers", EXPOSED),
    ]
    assert [scope["path"] for scope in inner.scopes] == [path]


async def test_a_request_from_an_unlisted_origin_gets_no_cors_header() -> None:
    # given
    inner = RecordingApp()
    # when
    response = await call(middleware(inner), "POST", "/sessions", [(b"origin", OTHER.encode())])
    # then: served as before (a simple request reaches the server), but the browser may not read it
    assert response["headers"] == [(b"content-type", b"application/json"), (b"vary", b"Origin")]
    assert len(inner.scopes) == 1


async def test_an_origin_sent_twice_matches_nothing() -> None:
    inner = RecordingApp()
    headers = [(b"origin", LISTED.encode()), (b"origin", LISTED.encode())]
    response = await call(middleware(inner), "GET", "/sessions", headers)
    assert response["headers"] == [(b"content-type", b"application/json"), (b"vary", b"Origin")]


async def test_an_origin_is_matched_exactly() -> None:
    inner = RecordingApp()
    for near in ("https://app.example.com.evil.net", "https://APP.example.com", "http://app.example.com", LISTED + "/"):
        response = await call(middleware(inner), "OPTIONS", "/sessions", preflight(near))
        assert response["status"] == 403, near
    assert inner.scopes == []


async def test_cors_headers_from_behind_are_replaced_not_doubled() -> None:
    # given: an answer that already carries CORS headers and varies by Origin
    inner = RecordingApp(
        headers=[
            (b"Access-Control-Allow-Origin", b"*"),
            (b"access-control-allow-credentials", b"true"),
            (b"Vary", b"Accept, origin"),
        ]
    )
    # when
    response = await call(middleware(inner), "GET", "/sessions", [(b"origin", LISTED.encode())])
    # then
    assert response["headers"] == [
        (b"Vary", b"Accept, origin"),
        (b"access-control-allow-origin", LISTED.encode()),
        (b"access-control-expose-headers", EXPOSED),
    ]


@pytest.mark.parametrize("path", ["/admin/", "/admin/login/", "/static/admin/css/base.css", "/executors/x/commands"])
async def test_the_admin_and_the_executor_routes_answer_no_other_origin(path: str) -> None:
    # given
    inner = RecordingApp()
    # when
    preflighted = await call(middleware(inner), "OPTIONS", path, preflight(LISTED))
    requested = await call(middleware(inner), "GET", path, [(b"origin", LISTED.encode())])
    # then: both reach the app untouched, as without a cors block
    for response in (preflighted, requested):
        assert response["headers"] == [(b"content-type", b"application/json")]
    assert [scope["method"] for scope in inner.scopes] == ["OPTIONS", "GET"]


async def test_without_a_cors_block_nothing_changes() -> None:
    # given
    inner = RecordingApp()
    app = middleware(inner, origins=None)
    # when
    preflighted = await call(app, "OPTIONS", "/sessions", preflight(LISTED))
    requested = await call(app, "GET", "/sessions", [(b"origin", LISTED.encode())])
    # then
    for response in (preflighted, requested):
        assert (response["status"], response["headers"], response["body"]) == (
            200,
            [(b"content-type", b"application/json")],
            b'{"a":1}',
        )
    assert [scope["method"] for scope in inner.scopes] == ["OPTIONS", "GET"]


async def test_an_options_request_that_is_no_preflight_reaches_the_app() -> None:
    inner = RecordingApp()
    response = await call(middleware(inner), "OPTIONS", "/sessions", [(b"origin", LISTED.encode())])
    assert response["status"] == 200
    assert dict(response["headers"])[b"access-control-allow-origin"] == LISTED.encode()
    assert [scope["method"] for scope in inner.scopes] == ["OPTIONS"]


async def test_the_origins_are_read_once() -> None:
    # given
    origins = Origins([LISTED])
    app = CorsMiddleware(RecordingApp(), origins_of=origins)
    # when
    for _ in range(3):
        await call(app, "GET", "/sessions", [(b"origin", LISTED.encode())])
    # then
    assert origins.calls == 1
