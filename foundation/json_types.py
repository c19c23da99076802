"""JSON values as the type checker sees them: what json.loads returns and json.dumps takes.
Imports no app. At run time the alias is pydantic's, so a schema field typed with it validates
JSON and publishes no constraint."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

__all__ = ["JSONObject", "JSONValue"]

if TYPE_CHECKING:
    JSONValue: TypeAlias = dict[str, "JSONValue"] | list["JSONValue"] | str | int | float | bool | None
else:  # pydantic resolves its own recursive alias; mypy reads the union above
    from pydantic import JsonValue as JSONValue

JSONObject: TypeAlias = dict[str, JSONValue]
