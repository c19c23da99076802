"""REST tools in the admin: the form checks templates with the startup rules, and a saved binding
loads with its request template."""

from __future__ import annotations

import json
from typing import Any

import pytest

from foundation.rest_templates import RestTemplate
from tests.tools.test_admin_bindings import VALID
from tools_app.admin import ToolBindingForm
from tools_app.db import load_admin_bindings

SCHEMA = {"type": "object", "properties": {"order": {"type": "string"}, "count": {"type": "integer"}}}
# the form's own defaults first, so fields other than these keep their initial values
DEFAULTS = {name: field.initial for name, field in ToolBindingForm.base_fields.items() if field.initial is not None}
REST: dict[str, Any] = {
    **DEFAULTS,
    **VALID,
    "name": "update_order",
    "input_schema": json.dumps(SCHEMA),
    "transport": "rest",
    "url": "http://127.0.0.1:9/orders/{{order}}",
    "method": "PATCH",
    "query": json.dumps({"count": "{{count}}"}),
    "headers": json.dumps({"X-Order": "{{order}}"}),
    "body": json.dumps({"count": "{{count}}", "note": "order {{order}}"}),
}


def form(**changes: Any) -> ToolBindingForm:
    return ToolBindingForm(data={**REST, **changes})


@pytest.mark.django_db
def test_a_rest_binding_saved_in_the_admin_loads_with_its_template() -> None:
    # given
    bound = form()
    assert bound.is_valid(), bound.errors
    bound.save()

    # when
    (loaded,) = load_admin_bindings()

    # then
    assert loaded.rest_template() == RestTemplate(
        method="PATCH",
        url="http://127.0.0.1:9/orders/{{order}}",
        query=(("count", "{{count}}"),),
        headers=(("X-Order", "{{order}}"),),
        body={"count": "{{count}}", "note": "order {{order}}"},
    )


@pytest.mark.django_db
def test_a_rest_binding_without_query_headers_or_body_passes() -> None:
    bound = form(method="", query="", headers="", body="")
    assert bound.is_valid(), bound.errors


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        pytest.param({"url": "http://127.0.0.1:9/{{nope}}"}, "url", "{{nope}} names no property", id="unknown_case"),
        pytest.param({"url": "http://127.0.0.1:{{count}}/x"}, "url", "", id="placeholder_in_port_case"),
        pytest.param(
            {"headers": json.dumps({"Authorization": "Bearer {{order}}"})},
            "headers",
            "the bearer token comes from token_env",
            id="authorization_case",
        ),
        pytest.param({"method": "TRACE"}, "method", "must be one of", id="method_case"),
        pytest.param({"body": json.dumps({"{{order}}": 1})}, "body", "object keys", id="body_key_case"),
        pytest.param(
            {"transport": "", "url": "http://127.0.0.1:9/x"}, "method", "only for transport rest", id="http_case"
        ),
    ],
)
def test_the_admin_form_refuses_a_bad_rest_template_on_its_field(
    changes: dict[str, Any], field: str, message: str
) -> None:
    # when
    bound = form(**changes)

    # then
    assert not bound.is_valid()
    assert field in bound.errors, bound.errors
    assert message in " ".join(str(error) for error in bound.errors[field])
