"""Declarative REST tools: `{{name}}` placeholders in a URL, query, headers and a JSON body,
checked against the input schema when the config loads and filled from a call's arguments.

Imports no Django: the host config checks templates before settings load.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import orjson

__all__ = [
    "METHODS",
    "FilledRequest",
    "RestTemplate",
    "TemplateError",
    "check_rest_template",
    "fill_request",
]

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]{0,63})\}\}")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")  # an RFC 9110 token, used with fullmatch
# Headers Brain sets itself (the bearer token, tracing) or that frame the connection: a
# template never names them, so arguments cannot replace the credential or the target host.
RESERVED_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "te",
        "upgrade",
        "traceparent",
    }
)
MAX_BODY_DEPTH = 32  # a body template nests at most this deep (it is config, but bounded all the same)
_DOT_SEGMENTS = frozenset({".", ".."})


class TemplateError(ValueError):
    """A template the config cannot use, or arguments a call cannot fill it with. `field` names
    the binding's field at fault (method, url, query, headers or body)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class RestTemplate:
    """A REST binding's request, as validated by check_rest_template."""

    method: str
    url: str
    query: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    body: object = None  # a JSON template; None sends no body


@dataclass(frozen=True, slots=True)
class FilledRequest:
    method: str
    url: str  # path and query already percent-encoded
    headers: dict[str, str]
    body: bytes | None

    def __repr__(self) -> str:
        return f"FilledRequest({self.method} {self.url.split('?', 1)[0]!r})"


# -- checking (startup, admin save) ---------------------------------------------------------------


def _check_text(field: str, text: str, properties: Collection[str]) -> None:
    for name in PLACEHOLDER.findall(text):
        if name not in properties:
            raise TemplateError(field, f"placeholder {{{{{name}}}}} names no property of input_schema")
    rest = PLACEHOLDER.sub("", text)
    if "{{" in rest or "}}" in rest:
        raise TemplateError(
            field, "has a malformed placeholder (write {{name}}, a letter or _ then letters, digits, _)"
        )


def _has_braces(text: str) -> bool:
    return "{{" in text or "}}" in text


def _check_body(value: object, properties: Collection[str], depth: int) -> None:
    if depth > MAX_BODY_DEPTH:
        raise TemplateError("body", f"nests deeper than {MAX_BODY_DEPTH} levels")
    if isinstance(value, str):
        _check_text("body", value, properties)
    elif isinstance(value, dict):
        for key, item in value.items():
            if _has_braces(key):
                raise TemplateError("body", "placeholders are not allowed in object keys")
            _check_body(item, properties, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_body(item, properties, depth + 1)


def check_rest_template(template: RestTemplate, properties: Collection[str]) -> None:
    """Raise TemplateError unless every placeholder names one of `properties` and sits where
    it cannot change where the request goes: the URL's path and query values, query values,
    header values and body strings, never the scheme, host, port, a query name or a header name."""
    if template.method not in METHODS:
        raise TemplateError("method", f"must be one of {', '.join(METHODS)}")
    if template.body is not None and template.method == "GET":
        raise TemplateError("body", "is not allowed with GET")
    parts = urlsplit(template.url)
    if _has_braces(parts.scheme) or _has_braces(parts.netloc):
        raise TemplateError(
            "url", "placeholders are allowed only in the path and query values, not the scheme, host or port"
        )
    _check_text("url", parts.path, properties)
    for pair in parts.query.split("&") if parts.query else ():
        name, _, value = pair.partition("=")
        if _has_braces(name):
            raise TemplateError("url", "placeholders are not allowed in query parameter names")
        _check_text("url", value, properties)
    for name, value in template.query:
        if not name or _has_braces(name):
            raise TemplateError("query", "parameter names must be non-empty and without placeholders")
        _check_text("query", value, properties)
    for name, value in template.headers:
        if not HEADER_NAME.fullmatch(name):
            raise TemplateError("headers", f"{name[:40]!r} is not a valid header name")
        if name.lower() in RESERVED_HEADERS:
            detail = "the bearer token comes from token_env" if name.lower() == "authorization" else "Brain sets it"
            raise TemplateError("headers", f"{name} is not allowed: {detail}")
        if any(char in value for char in "\r\n\0"):
            raise TemplateError("headers", f"the value of {name} must not contain line breaks")
        _check_text("headers", value, properties)
    _check_body(template.body, properties, 0)


# -- filling (each call) --------------------------------------------------------------------------


def _text(value: object) -> str:
    """An argument's text: a string as it is, null as nothing, anything else as its JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return orjson.dumps(value).decode()


_ABSENT = object()  # an optional argument the call left out
_NOT_WHOLE = object()  # a text that is more than one lone placeholder


def _whole(text: str, arguments: Mapping[str, object]) -> object:
    """The argument a text that is exactly one placeholder names (_ABSENT when not given), or
    _NOT_WHOLE."""
    match = PLACEHOLDER.fullmatch(text)
    if match is None:
        return _NOT_WHOLE
    return arguments.get(match.group(1), _ABSENT)


def _substitute(text: str, arguments: Mapping[str, object], encode: Callable[[str], str] | None = None) -> str:
    def replace(match: re.Match[str]) -> str:
        value = _text(arguments.get(match.group(1)))
        return encode(value) if encode is not None else value

    return PLACEHOLDER.sub(replace, text)


def _segment(value: str) -> str:
    return quote(value, safe="")  # "/", "?", "#", "@" and ":" are encoded: one argument, one segment


def _fill_path(path: str, arguments: Mapping[str, object]) -> str:
    segments = []
    for segment in path.split("/"):
        names = PLACEHOLDER.findall(segment)
        for name in names:
            if arguments.get(name) in (None, ""):
                raise TemplateError("url", f"argument {name!r} fills a URL path segment and must be given, not empty")
        filled = _substitute(segment, arguments, _segment)
        if names and filled in _DOT_SEGMENTS:
            raise TemplateError("url", "arguments must not make a URL path segment '.' or '..'")
        segments.append(filled)
    return "/".join(segments)


def _fill_query(template: RestTemplate, query: str, arguments: Mapping[str, object]) -> str:
    pairs: list[str] = []
    for pair in query.split("&") if query else ():
        name, separator, value = pair.partition("=")
        if _whole(value, arguments) is _ABSENT:
            continue  # an optional argument left out drops its parameter
        pairs.append(name + separator + _substitute(value, arguments, _segment))
    for name, value in template.query:
        if _whole(value, arguments) is _ABSENT:
            continue
        pairs.append(f"{_segment(name)}={_segment(_substitute(value, arguments))}")
    return "&".join(pairs)


def _fill_body(value: object, arguments: Mapping[str, object]) -> object:
    if isinstance(value, str):
        whole = _whole(value, arguments)
        if whole is not _NOT_WHOLE:
            return whole  # the argument's JSON value, its type preserved (_ABSENT when left out)
        return _substitute(value, arguments)
    if isinstance(value, dict):
        filled = {key: _fill_body(item, arguments) for key, item in value.items()}
        return {key: item for key, item in filled.items() if item is not _ABSENT}
    if isinstance(value, list):
        return [None if item is _ABSENT else item for item in (_fill_body(item, arguments) for item in value)]
    return value


def fill_request(template: RestTemplate, arguments: Mapping[str, object]) -> FilledRequest:
    """The request for one call's (already validated) arguments.

    A value that is exactly `{{name}}` is left out when the argument is (a query parameter, a
    header, an object member; null in an array); inside longer text an absent argument is empty.
    Path placeholders must be given and non-empty. Raises TemplateError when the arguments
    cannot be sent (a header value with control characters, a '..' path segment).
    """
    parts = urlsplit(template.url)
    url = f"{parts.scheme}://{parts.netloc}{_fill_path(parts.path, arguments)}"
    query = _fill_query(template, parts.query, arguments)
    if query:
        url += "?" + query
    headers: dict[str, str] = {}
    for name, value in template.headers:
        if _whole(value, arguments) is _ABSENT:
            continue
        filled = _substitute(value, arguments)
        if not filled.isascii() or any(ord(char) < 0x20 or ord(char) == 0x7F for char in filled):
            raise TemplateError("headers", f"the arguments give {name} a value that cannot be sent in a header")
        headers[name] = filled
    body = None
    if template.body is not None:
        filled_body = _fill_body(template.body, arguments)
        body = orjson.dumps(None if filled_body is _ABSENT else filled_body)
    return FilledRequest(method=template.method, url=url, headers=headers, body=body)
