"""What a failed argument validation says: the error values, and how a validator's errors become them.

    jsonschema-rs ValidationError (instance path, schema path, typed kind) ─► ArgumentError(path, reason, kind)
    structural walk / JSON parse failures ──────────────────────────────────► ArgumentError
                                                   every one, sorted ─────► ArgumentErrors

`ArgumentError` / `ArgumentErrors` / `ValidationErrorKind` are public through `agent.schema` (their home for
callers); `describe_errors` reads the closed schema and the instance so reasons quote values as declared and as
sent. One error per missing or unknown field, at the field's own path; an unmatched ``anyOf``/``oneOf`` reports
the errors inside the one alternative the value's type fits, or the types that would have fitted.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import jsonschema_rs

from agent.schema_formats import FORMAT_HINTS

__all__ = ["ArgumentError", "ArgumentErrors", "ValidationErrorKind", "describe_errors", "failed", "json_type",
           "render_path", "safe_repr", "show_value"]


class ValidationErrorKind(enum.StrEnum):
    """Why one argument was rejected."""

    MISSING_REQUIRED = "missing_required"
    UNKNOWN_FIELD = "unknown_field"
    WRONG_TYPE = "wrong_type"
    ENUM_MISMATCH = "enum_mismatch"
    OUT_OF_RANGE = "out_of_range"
    PATTERN_MISMATCH = "pattern_mismatch"
    """``pattern`` or ``format`` not matched."""
    TOO_LONG = "too_long"
    TOO_SHORT = "too_short"
    TOO_DEEP = "too_deep"
    UNGROUNDED = "ungrounded"
    """A value its tool requires to be grounded was found in no admitted source (`agent.grounding`)."""
    NOT_AN_OBJECT = "not_an_object"
    OTHER = "other"
    """Everything else: invalid JSON text, non-JSON values, ``uniqueItems``, unmatched ``anyOf``…"""


@dataclass(frozen=True, kw_only=True)
class ArgumentError:
    """One rejected argument: where, why (for the model), and what kind of failure (for code)."""

    path: str
    """Dotted/indexed location, e.g. ``items[0].qty``; ``""`` is the arguments object itself."""
    reason: str
    """Human sentence for the model, e.g. ``expected number, got string``."""
    kind: ValidationErrorKind

    def to_json(self) -> dict[str, str]:
        """The model-facing form, ``{"path": ..., "reason": ...}``."""
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class ArgumentErrors:
    """Validation failed: every error found, sorted deterministically. Never empty. The ok:false result the model
    receives is built from it by `agent.results.error_result` (``kind``, `detail`, `errors`)."""

    tool_name: str
    errors: tuple[ArgumentError, ...]

    @property
    def detail(self) -> str:
        """One line summarising the errors, for ``detail`` in the ok:false result."""
        n = len(self.errors)
        return f"{n} invalid argument{'s' if n != 1 else ''} for tool {self.tool_name!r}"



# ---------------------------------------------------------------------------------------------------------
# paths
# ---------------------------------------------------------------------------------------------------------

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def render_path(parts: Sequence[str | int]) -> str:
    """``("items", 0, "qty")`` → ``items[0].qty``; non-identifier keys are JSON-quoted: ``meta["a.b"]``."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENT_RE.match(part):
            out.append(("." if out else "") + part)
        else:
            out.append("[" + json.dumps(part, ensure_ascii=False) + "]")
    return "".join(out)


def _sort_key(item: tuple[tuple[str | int, ...], ArgumentError]) -> tuple[Any, ...]:
    parts, error = item
    segs = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in parts)
    return (segs, error.kind.value, error.reason)



def json_type(value: Any) -> str:
    """The JSON type name of a Python value (its class name when it is none)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__



# ---------------------------------------------------------------------------------------------------------
# a jsonschema-rs error → ArgumentErrors (one per missing or unknown field, at the field's own path)
# ---------------------------------------------------------------------------------------------------------

_Found = list[tuple[tuple[str | int, ...], ArgumentError]]
_K: Final = jsonschema_rs.ValidationErrorKind
_RANGE_WORDS: Final = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
_MISSING: Final = object()


def safe_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, or ``<TypeName>`` when the object's ``__repr__`` fails (a
    hostile key or value must not turn a validation error into a crash)."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def show_value(value: Any, limit: int = 60) -> str:
    """``value`` as JSON text cut to ``limit`` characters (its `safe_repr` when it is not JSON)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return safe_repr(value, limit)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _expected_types(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _join_or(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _at(node: Any, path: Sequence[str | int]) -> Any:
    """The value at ``path`` inside a JSON tree (schema or instance), or `_MISSING`."""
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return node


def describe_errors(closed: Any, instance: Any, errors: Iterable[Any]) -> list[tuple[tuple[str | int, ...],
                                                                                 ArgumentError]]:
    """``(path parts, ArgumentError)`` for every jsonschema-rs error of validating ``instance`` under ``closed``."""
    return _Mapper(closed, instance).errors(errors)


class _Mapper:
    """Turns one validation's jsonschema-rs errors into `ArgumentError`s (with the schema and instance at hand,
    so reasons quote the values as declared and as sent)."""

    def __init__(self, closed: Any, instance: Any) -> None:
        self.closed = closed
        self.instance = instance

    def one(self, path: tuple[str | int, ...], kind: ValidationErrorKind, reason: str) -> _Found:
        return [(path, ArgumentError(path=render_path(path), reason=reason, kind=kind))]

    def errors(self, errors: Iterable[Any]) -> _Found:
        out: _Found = []
        extra_items: dict[tuple[str | int, ...], int] = {}
        for error in errors:
            path = tuple(error.instance_path)
            if isinstance(error.kind, _K.FalseSchema) and error.schema_path and error.schema_path[-1] == "items":
                extra_items[path[:-1]] = min(extra_items.get(path[:-1], path[-1]), path[-1])  # collapsed below
                continue
            out.extend(self.error(error, path))
        for parent, allowed in extra_items.items():
            got = len(_at(self.instance, parent))
            out.extend(self.one(parent, ValidationErrorKind.TOO_LONG, f"must have at most {allowed} items, got {got}"))
        return out

    def error(self, error: Any, path: tuple[str | int, ...]) -> _Found:  # one branch per keyword
        kind, keyword = error.kind, (error.schema_path[-1] if error.schema_path else "")
        expected = _at(self.closed, error.schema_path)
        instance = _at(self.instance, path)
        K = ValidationErrorKind
        if isinstance(kind, _K.Required):
            if keyword == "dependentRequired":
                triggers = [t for t, needed in (expected if isinstance(expected, Mapping) else {}).items()
                            if isinstance(instance, Mapping) and t in instance and kind.property in needed]
                p = path + (kind.property,)
                return [(p, ArgumentError(path=render_path(p), kind=K.MISSING_REQUIRED,
                                          reason=f"required when {show_value(t)} is present"))
                        for t in triggers or ["?"]]
            return self.one(path + (kind.property,), K.MISSING_REQUIRED, "missing required argument")
        if isinstance(kind, (_K.AdditionalProperties, _K.UnevaluatedProperties)):
            reason = "unknown field" if expected is False else "does not match the schema for undeclared fields"
            found: _Found = []
            for key in kind.unexpected:
                found.extend(self.one(path + (key,), K.UNKNOWN_FIELD if expected is False else K.OTHER, reason))
            return found
        if isinstance(kind, _K.Type):
            types = _expected_types(expected) if expected is not _MISSING else list(kind.types)
            return self.one(path, K.WRONG_TYPE, f"expected {_join_or(types)}, got {json_type(instance)}")
        if isinstance(kind, _K.Enum):
            options = list(expected)
            shown = ", ".join(show_value(v, 40) for v in options[:10]) + (", …" if len(options) > 10 else "")
            return self.one(path, K.ENUM_MISMATCH, f"expected one of {shown}, got {show_value(instance)}")
        if isinstance(kind, _K.Constant):
            return self.one(path, K.ENUM_MISMATCH, f"expected {show_value(expected)}, got {show_value(instance)}")
        if keyword in _RANGE_WORDS:
            return self.one(path, K.OUT_OF_RANGE, f"must be {_RANGE_WORDS[keyword]} {show_value(expected)}, "
                                                  f"got {show_value(instance)}")
        if isinstance(kind, _K.MultipleOf):
            return self.one(path, K.OUT_OF_RANGE,
                            f"must be a multiple of {show_value(expected)}, got {show_value(instance)}")
        if keyword == "pattern":
            return self.one(path, K.PATTERN_MISMATCH, f"does not match pattern {expected}")
        if isinstance(kind, _K.Format):
            hint = FORMAT_HINTS.get(expected, f"format {expected!r}")
            return self.one(path, K.PATTERN_MISMATCH, f"expected {hint}, got {show_value(instance)}")
        if isinstance(kind, (_K.MaxLength, _K.MinLength)):
            longest = isinstance(kind, _K.MaxLength)
            return self.one(path, K.TOO_LONG if longest else K.TOO_SHORT,
                            f"must be {'at most' if longest else 'at least'} {expected} characters, "
                            f"got {len(instance)}")
        if isinstance(kind, (_K.MaxItems, _K.MinItems, _K.MaxProperties, _K.MinProperties)):
            most = isinstance(kind, (_K.MaxItems, _K.MaxProperties))
            noun = "items" if isinstance(kind, (_K.MaxItems, _K.MinItems)) else "fields"
            return self.one(path, K.TOO_LONG if most else K.TOO_SHORT,
                            f"must have {'at most' if most else 'at least'} {expected} {noun}, got {len(instance)}")
        if isinstance(kind, _K.UnevaluatedItems):
            return self.one(path, K.TOO_LONG, "has more items than the schema allows")
        if isinstance(kind, _K.UniqueItems):
            return self.one(path, K.OTHER, "items must be unique")
        if isinstance(kind, (_K.AnyOf, _K.OneOfNotValid)):
            return self.alternatives(error, path)
        if isinstance(kind, _K.OneOfMultipleValid):
            return self.one(path, K.OTHER, "matches more than one of the allowed alternatives")
        if isinstance(kind, _K.Not):
            return self.one(path, K.OTHER, "not allowed here" if expected == {} else
                            "matches a shape that is not allowed here")
        if isinstance(kind, _K.FalseSchema):
            return self.one(path, K.OTHER, "not allowed here")
        return self.one(path, K.OTHER, error.message.split("\n", 1)[0])

    def alternatives(self, error: Any, path: tuple[str | int, ...]) -> _Found:
        """An unmatched anyOf/oneOf: name the branch the value's type fits, or the types that would have fitted."""
        branches = list(error.kind.context)
        type_misses = {i for i, errs in enumerate(branches)
                       if any(isinstance(e.kind, _K.Type) and tuple(e.instance_path) == path for e in errs)}
        fitting = [i for i in range(len(branches)) if i not in type_misses]
        if len(fitting) == 1:
            return self.errors(branches[fitting[0]])
        if not fitting:
            expected: list[str] = []
            for errs in branches:
                for e in errs:
                    if isinstance(e.kind, _K.Type) and tuple(e.instance_path) == path:
                        declared = _at(self.closed, e.schema_path)
                        names = _expected_types(declared) if declared is not _MISSING else list(e.kind.types)
                        expected.extend(t for t in names if t not in expected)
            return self.one(path, ValidationErrorKind.WRONG_TYPE,
                            f"expected {_join_or(expected)}, got {json_type(_at(self.instance, path))}")
        return self.one(path, ValidationErrorKind.OTHER, "does not match any of the allowed alternatives")



def failed(tool_name: str, errors: list[tuple[tuple[str | int, ...], ArgumentError]]) -> ArgumentErrors:
    unique = {(parts, e): None for parts, e in errors}
    return ArgumentErrors(tool_name=tool_name, errors=tuple(e for _, e in sorted(unique, key=_sort_key)))


