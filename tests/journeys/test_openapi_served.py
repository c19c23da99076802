"""A running server publishes the wire contract: GET /openapi.json equals the spec's document
(as tests/unit/brainsite/test_openapi.py compares them), and /docs is Swagger UI whose files
the server serves itself, without a CDN."""

from __future__ import annotations

import re

import httpx

from tests.fixtures.server import BrainServer, create_session
from tests.unit.brainsite.test_openapi import _contract, _differences


def test_the_served_document_is_the_contract(module_brain: BrainServer) -> None:
    # when: no token; the document is public
    response = httpx.get(module_brain.url + "/openapi.json")

    # then
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-request-id"]
    assert _differences(response.json(), _contract()) == []


def test_a_documented_route_answers_on_its_documented_path(module_brain: BrainServer) -> None:
    # given
    document = httpx.get(module_brain.url + "/openapi.json").json()
    session = create_session(module_brain)
    path = "/sessions/{id}"

    # when
    with module_brain.client() as client:
        response = client.get(path.format(id=session["id"]))

    # then
    assert document["paths"][path]["get"]["operationId"] == "get"
    assert response.status_code == 200
    assert response.json()["id"] == session["id"]


def test_the_docs_page_loads_swagger_ui_from_the_server_itself(module_brain: BrainServer) -> None:
    # when
    with httpx.Client(base_url=module_brain.url, timeout=30) as client:
        page = client.get("/docs")
        assets = re.findall(r'(?:href|src)="([^"]+)"', page.text)
        fetched = {asset: client.get(asset) for asset in assets}

    # then
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '"url": "/openapi.json"' in page.text
    assert sorted(assets) == [
        "/docs/favicon.png",
        "/docs/swagger-ui-bundle.js",
        "/docs/swagger-ui-init.js",
        "/docs/swagger-ui.css",
    ]
    assert {asset: response.status_code for asset, response in fetched.items()} == dict.fromkeys(assets, 200)
    assert fetched["/docs/swagger-ui-bundle.js"].headers["content-type"] == "text/javascript"
    assert fetched["/docs/swagger-ui.css"].headers["content-type"] == "text/css"
    assert b"SwaggerUIBundle" in fetched["/docs/swagger-ui-bundle.js"].content


def test_an_unknown_docs_file_is_the_404_envelope(module_brain: BrainServer) -> None:
    # when
    response = httpx.get(module_brain.url + "/docs/settings.py")

    # then
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
