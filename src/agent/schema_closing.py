"""The strict rule of argument validation: object schemas that leave unknown keys unspecified reject them.

`close_schema` rewrites a parameters schema for validation (``unevaluatedProperties: false`` where an object says
nothing about unknown keys); `close_for_grammar` is the same rule in the keywords a grammar compiler reads
(``additionalProperties: false`` where that is equivalent). A tool's declared ``parameters`` are never rewritten in
place: both return copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["close_for_grammar", "close_schema"]

_SCHEMA_MAPS: Final = ("properties", "patternProperties", "$defs", "definitions")
"""Keywords whose values map names to subschemas validated on their own (closing positions)."""
_SCHEMA_SINGLES: Final = ("items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems",
                          "contains", "propertyNames")
_SCHEMA_LISTS: Final = ("prefixItems",)
_IN_PLACE_LISTS: Final = ("allOf", "anyOf", "oneOf")
"""Members apply to the same instance as their parent: they stay open; the parent closes over them."""
_IN_PLACE_SINGLES: Final = ("not", "if", "then", "else")
_IN_PLACE_MAPS: Final = ("dependentSchemas",)


def _is_object_schema(schema: Mapping[str, Any]) -> bool:
    t = schema.get("type")
    return "properties" in schema or t == "object" or (isinstance(t, list) and "object" in t)


def _declares_object_members(schema: Any) -> bool:
    """Whether the schema, or a member it applies in place (allOf/anyOf/oneOf, recursively), is an object schema."""
    if not isinstance(schema, Mapping):
        return False
    if _is_object_schema(schema):
        return True
    return any(_declares_object_members(m) for key in _IN_PLACE_LISTS for m in _members(schema, key))


def _members(schema: Mapping[str, Any], key: str) -> list[Any]:
    value = schema.get(key)
    return value if isinstance(value, list) else []


def close_schema(schema: Any) -> Any:
    """A copy of ``schema`` in which every object schema that leaves unknown keys unspecified rejects them.

    The rule, applied to every subschema validated on its own (the root, a property, ``items``, a ``$defs``
    entry…) that has neither ``additionalProperties`` nor ``unevaluatedProperties``:

    - it declares ``properties``/``patternProperties``, or its ``allOf`` members declare object shapes → it gets
      ``unevaluatedProperties: false`` (which sees the properties its in-place members evaluate); the members
      stay open, since closing them would make them reject each other's keys;
    - it declares no properties of its own but its ``anyOf``/``oneOf`` alternatives are object shapes → each
      alternative is closed on its own (so a failing alternative cannot make its keys look unknown);
    - otherwise a bare ``type: "object"`` is closed: with nothing declared, every key is unknown.

    ``not``/``if``/``then``/``else``/``dependentSchemas`` members stay open. Boolean ``false`` subschemas become
    ``{"not": {}}`` (same meaning) so that their errors keep their path. Limitation: two ``$defs`` entries
    combined with ``allOf`` are each closed as standalone shapes and reject each other's keys; such schemas
    should declare ``additionalProperties`` themselves.
    """
    return _close(schema, closing=True)


def close_for_grammar(schema: Any) -> Any:
    """`close_schema` in the keywords a grammar compiler reads: ``additionalProperties: false`` wherever closing
    adds ``unevaluatedProperties: false`` to an object that applies no other schema in place (no ``allOf``,
    ``anyOf``, ``oneOf`` or ``$ref`` beside its properties, where the two keywords differ). So a constrained call
    cannot spell an unknown field that validation would reject; where the keywords differ the grammar stays as
    declared and validation alone rejects the unknown field."""
    return _unevaluated_as_additional(close_schema(schema))


_VALUES: Final = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose value is instance data, not a schema."""


def _unevaluated_as_additional(node: Any) -> Any:
    if isinstance(node, list):
        return [_unevaluated_as_additional(v) for v in node]
    if not isinstance(node, Mapping):
        return node
    out = {k: v if k in _VALUES else _unevaluated_as_additional(v) for k, v in node.items()}
    if out.get("unevaluatedProperties") is False and "additionalProperties" not in node:
        del out["unevaluatedProperties"]
        if not any(k in node for k in ("allOf", "anyOf", "oneOf", "$ref")):
            out["additionalProperties"] = False
    return out


_KEEP_FALSE: Final = frozenset({"items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems"})
"""Keywords whose literal ``false`` the validator reports with a proper path already."""


def _close(schema: Any, *, closing: bool) -> Any:
    if schema is False:
        return {"not": {}}
    if not isinstance(schema, Mapping):
        return schema
    own_shape = "properties" in schema or "patternProperties" in schema
    alternatives_closed = not own_shape and any(
        _declares_object_members(m) for key in ("anyOf", "oneOf") for m in _members(schema, key))
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {k: _close(v, closing=True) for k, v in value.items()}
        elif key in _IN_PLACE_MAPS and isinstance(value, Mapping):
            out[key] = {k: _close(v, closing=False) for k, v in value.items()}
        elif key in _KEEP_FALSE and value is False:
            out[key] = value
        elif key in _SCHEMA_SINGLES:
            out[key] = _close(value, closing=True)
        elif key in _IN_PLACE_SINGLES:
            out[key] = _close(value, closing=False)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_close(v, closing=True) for v in value]
        elif key in ("anyOf", "oneOf") and isinstance(value, list):
            out[key] = [_close(v, closing=alternatives_closed) for v in value]
        elif key == "allOf" and isinstance(value, list):
            out[key] = [_close(v, closing=False) for v in value]
        else:
            out[key] = value
    if closing and "additionalProperties" not in out and "unevaluatedProperties" not in out:
        all_of_shapes = any(_declares_object_members(m) for m in _members(out, "allOf"))
        if own_shape or all_of_shapes or (_is_object_schema(out) and not alternatives_closed):
            out["unevaluatedProperties"] = False
    return out

