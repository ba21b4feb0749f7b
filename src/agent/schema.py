"""Raw JSON arguments → `ValidatedArguments`, or every reason they are not.

Parsing a JSON-looking span is syntax recognition, not permission. This module is the only place that turns a
model's argument object into something a tool may run on:

    raw (JSON text or parsed object)
      ─► parse ─► object? ─► structural walk ─► JSON Schema (Draft 2020-12, closed, formats) ─► ValidatedArguments
          │          │        (depth, node count, string     │
          │          │         size, JSON-ness, NaN)         └─► ArgumentErrors (every error)
          └──────────┴───────────────┴──────────────────────────► ArgumentErrors

Owns:
- **Strictness.** Unknown fields are rejected: an object schema (one that declares ``properties``, or
  ``type: "object"``) that says nothing about ``additionalProperties``/``unevaluatedProperties`` is validated as
  if it said ``unevaluatedProperties: false`` (see `close_schema`). ``unevaluatedProperties`` rather than
  ``additionalProperties`` so that ``allOf``/``anyOf`` compositions still see the properties their members
  declare; the members themselves are left open. To accept free-form keys, say so
  (``"additionalProperties": true``). A tool's *declared* ``parameters`` are not rewritten (the grammar compiler
  reads them as written); only validation closes them.
- **Formats are asserted**, not annotated: ``date``, ``time``, ``date-time`` (RFC 3339), ``email``, ``ipv4``,
  ``ipv6``, ``uuid`` (hyphenated) and ``uri`` (absolute, RFC 3986 characters) are checked by the stdlib-only
  checkers below, so the outcome never depends on which optional jsonschema extras are installed. Other formats
  are not checked.
- **Bounds before recursion.** Nesting deeper than ``max_depth`` containers (``too_deep``), more than
  ``max_nodes`` values or strings over ``max_string_bytes`` UTF-8 bytes (``too_long``) are found by a bounded walk
  *before* the schema is evaluated; when any is exceeded the schema is not evaluated at all. Non-JSON values
  (NaN, Infinity, sets, non-string keys, unpaired surrogates) are refused by the same walk. Booleans are not
  integers or numbers (JSON Schema agrees).
- **Compiled once.** `compile_parameters` (which `Tool` calls at definition) checks, closes and compiles a schema
  into `CompiledParameters`; `validate_arguments` takes it in place of the schema, so a call never recompiles or
  rehashes. Compiling also builds a fast validity check for the common keywords (`_fast_check`): plain closures
  that decide exactly what the strict validator decides (property-tested against it). A value it accepts is
  valid; anything else, and every schema it cannot decide exactly, goes through jsonschema, which alone collects
  and describes errors.
- **Every error, with its path and kind, sorted**: by path (array indices numerically), then kind, then reason.
  Paths are dotted and indexed, ``items[0].qty``; keys that are not identifiers are quoted, ``meta["a.b"]``;
  the arguments object itself is the empty path ``""``.

Refuses: schemas that are not valid Draft 2020-12 (`ToolDefinitionError`), ``max_depth`` outside 1..256.

`ValidatedArguments` can only be built here (a private constructor token) and is immutable: a deep-frozen copy
(read-only mappings, tuples for arrays) taken after validation, so nothing the caller still holds can change it.
That guards against accidents, not against deliberate in-process forgery (nothing in Python can).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import ipaddress
import json
import math
import numbers
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from types import MappingProxyType
from typing import Any, Final

import jsonschema
from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema._utils import equal as _equal  # pinned jsonschema==4.26.0
from jsonschema._utils import find_evaluated_property_keys_by_schema
from jsonschema._utils import uniq as _uniq

from agent.errors import ToolDefinitionError
from agent.json_text import plain_encoder
from agent.results import ResultErrorKind, error_result

__all__ = [
    "close_for_grammar",
    "ArgumentError",
    "ArgumentErrors",
    "FORMAT_CHECKER",
    "MAX_DEPTH_LIMIT",
    "MAX_NODES",
    "MAX_STRING_BYTES",
    "MAX_TEXT_BYTES",
    "ValidatedArguments",
    "ValidationErrorKind",
    "CompiledParameters",
    "canonical_json",
    "check_parameters_schema",
    "close_schema",
    "compile_parameters",
    "render_path",
    "validate_arguments",
]

MAX_STRING_BYTES: Final = 1024 * 1024
"""Default cap on one string (value or key), in UTF-8 bytes."""
MAX_NODES: Final = 100_000
"""Default cap on the number of JSON values in one arguments object (every scalar, array and object counts)."""
MAX_TEXT_BYTES: Final = 8 * 1024 * 1024
"""Cap on raw JSON argument *text*, in UTF-8 bytes, before it is parsed."""
MAX_DEPTH_LIMIT: Final = 256
"""The largest ``max_depth`` accepted: deeper bounds would let schema evaluation approach Python's recursion
limit."""
_MAX_INT_BITS: Final = 4096
"""Integers past 2**4096 are refused (``out_of_range``): they cannot round-trip through every JSON reader."""


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
    """Validation failed: every error found, sorted deterministically. Never empty."""

    tool_name: str
    errors: tuple[ArgumentError, ...]

    @property
    def detail(self) -> str:
        """One line summarising the errors, for ``detail`` in the ok:false result."""
        n = len(self.errors)
        return f"{n} invalid argument{'s' if n != 1 else ''} for tool {self.tool_name!r}"

    def to_result(self) -> dict[str, Any]:
        """The ``invalid_arguments`` ok:false result the model receives."""
        return error_result(ResultErrorKind.INVALID_ARGUMENTS, self.detail, self.errors)


# ---------------------------------------------------------------------------------------------------------
# ValidatedArguments
# ---------------------------------------------------------------------------------------------------------

_CONSTRUCTOR_TOKEN: Final = object()


_CANONICAL_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                                             allow_nan=False)
"""Built once (``json.dumps`` with these options builds one per call); encoders keep no state between calls."""


_canonical_tree: Final = plain_encoder(_CANONICAL_ENCODER)
"""`canonical_json` of the plain trees `_Walk` builds (acyclic by construction)."""


def canonical_json(value: Any) -> str:
    """Compact, key-sorted, UTF-8 JSON text: the form hashes are taken over."""
    return _CANONICAL_ENCODER.encode(value)


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) if isinstance(v, (dict, list)) else v for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) if isinstance(v, (dict, list)) else v for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_thaw(v) for v in value]
    return value


class ValidatedArguments:
    """Arguments that passed `validate_arguments` for one tool and one exact schema: the only thing a tool runs on.

    Read like a read-only mapping (``args["qty"]``, ``"qty" in args``, iteration over keys, ``len``); nested
    objects are read-only mappings and arrays are tuples. Always truthy, even with no arguments. `to_dict` gives
    a fresh mutable copy when a tool needs one.
    """

    __slots__ = ("_tool_name", "_values", "_plain", "_json", "_sha256", "_schema_sha256")

    def __init__(self, token: object, *, tool_name: str, plain: dict[str, Any], schema_sha256: str) -> None:
        if token is not _CONSTRUCTOR_TOKEN:
            raise TypeError("ValidatedArguments can only be built by agent.schema.validate_arguments()")
        text = _canonical_tree(plain)
        object.__setattr__(self, "_tool_name", tool_name)
        object.__setattr__(self, "_plain", plain)
        object.__setattr__(self, "_values", _freeze(plain))
        object.__setattr__(self, "_json", text)
        object.__setattr__(self, "_sha256", _sha256_text(text))
        object.__setattr__(self, "_schema_sha256", schema_sha256)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ValidatedArguments is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("ValidatedArguments is immutable")

    def __reduce__(self) -> Any:
        raise TypeError("ValidatedArguments cannot be pickled; validate again on the other side")

    def __copy__(self) -> ValidatedArguments:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ValidatedArguments:
        return self

    @property
    def tool_name(self) -> str:
        """The tool these arguments were validated for."""
        return self._tool_name

    @property
    def values(self) -> Mapping[str, Any]:
        """The arguments as a deep read-only mapping."""
        return self._values

    @property
    def sha256(self) -> str:
        """Hex sha256 of `to_json`."""
        return self._sha256

    @property
    def schema_sha256(self) -> str:
        """Hex sha256 of the canonical JSON of the schema they were validated against (as declared)."""
        return self._schema_sha256

    def to_json(self) -> str:
        """Canonical JSON text (compact, keys sorted)."""
        return self._json

    def to_dict(self) -> dict[str, Any]:
        """A fresh, mutable deep copy (dicts and lists)."""
        return _thaw(self._plain)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def get(self, key: str, default: Any = None) -> Any:
        """``args[key]`` if present, else ``default``."""
        return self._values.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __bool__(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ValidatedArguments):
            return NotImplemented
        return (self._tool_name, self._json, self._schema_sha256) == (
            other._tool_name, other._json, other._schema_sha256)

    def __hash__(self) -> int:
        return hash((self._tool_name, self._json, self._schema_sha256))

    def __repr__(self) -> str:
        return f"ValidatedArguments(tool_name={self._tool_name!r}, values={self._json})"


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


# ---------------------------------------------------------------------------------------------------------
# formats (stdlib only, so results never depend on optional jsonschema extras)
# ---------------------------------------------------------------------------------------------------------

FORMAT_CHECKER: Final = FormatChecker(formats=())
"""The format checker validation uses; exactly the formats listed in the module docstring."""

_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})\Z")
_TIME_RE = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))\Z")
_EMAIL_RE = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+\Z")
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*\Z")

_FORMAT_HINTS: Final = {
    "date": "a date YYYY-MM-DD",
    "time": "a time HH:MM:SS with a UTC offset, e.g. 14:30:00Z",
    "date-time": "a date-time, e.g. 2026-10-03T14:30:00Z",
    "email": "an email address",
    "ipv4": "an IPv4 address, e.g. 192.0.2.1",
    "ipv6": "an IPv6 address",
    "uuid": "a UUID, e.g. 123e4567-e89b-12d3-a456-426614174000",
    "uri": "an absolute URI, e.g. https://example.com/x",
}


@FORMAT_CHECKER.checks("date")
def _is_date(value: object) -> bool:
    if not isinstance(value, str):
        return True
    m = _DATE_RE.match(value)
    if m is None:
        return False
    try:
        date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return False
    return True


@FORMAT_CHECKER.checks("time")
def _is_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    m = _TIME_RE.match(value)
    if m is None:
        return False
    hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if hour > 23 or minute > 59 or second > 60:
        return False
    if m.group(6) is not None and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return True


@FORMAT_CHECKER.checks("date-time")
def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if len(value) < 11 or value[10] not in "Tt ":
        return False
    return _is_date(value[:10]) and _is_time(value[11:])


@FORMAT_CHECKER.checks("email")
def _is_email(value: object) -> bool:
    return not isinstance(value, str) or _EMAIL_RE.match(value) is not None


@FORMAT_CHECKER.checks("ipv4")
def _is_ipv4(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not value.isascii():
        return False
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


@FORMAT_CHECKER.checks("ipv6")
def _is_ipv6(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not value.isascii() or "%" in value:
        return False
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


@FORMAT_CHECKER.checks("uuid")
def _is_uuid(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if _UUID_RE.match(value) is None:
        return False
    uuid.UUID(value)
    return True


@FORMAT_CHECKER.checks("uri")
def _is_uri(value: object) -> bool:
    return not isinstance(value, str) or _URI_RE.match(value) is not None


# ---------------------------------------------------------------------------------------------------------
# closing object schemas (the strict additionalProperties rule)
# ---------------------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------------------
# the strict validator: one error per missing / unknown key, each with its own path
# ---------------------------------------------------------------------------------------------------------

def _required(validator: Any, required: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for prop in required:
        if prop not in instance:
            yield ValidationError("missing required argument", path=[prop])


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [k for k in instance
              if k not in properties and not any(re.search(p, k) for p in patterns)]
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif ap is False:
        for extra in extras:
            yield ValidationError("unknown field", path=[extra])


def _unevaluated_properties(validator: Any, up: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = find_evaluated_property_keys_by_schema(validator, instance, schema)
    for prop in instance:
        if prop in evaluated:
            continue
        if up is False:
            yield ValidationError("unknown field", path=[prop])
        else:
            yield from validator.descend(instance[prop], up, path=prop, schema_path=prop)


_StrictValidator = validators.extend(
    Draft202012Validator,
    {"required": _required, "additionalProperties": _additional_properties,
     "unevaluatedProperties": _unevaluated_properties},
)


# ---------------------------------------------------------------------------------------------------------
# the fast validity check: common keywords as plain Python closures, deciding exactly what the strict validator
# decides. Only a "valid" answer is used (then jsonschema is not run); "invalid" or anything it cannot decide
# goes through the full, error-collecting jsonschema path, so the fast check can cost time but never an error.
# ---------------------------------------------------------------------------------------------------------

_Check = Callable[[Any], bool]


class _Unsupported(Exception):
    """A keyword, or a combination of keywords, the fast check does not decide exactly: no fast check then."""


_VALIDATOR_KEYWORDS: Final = frozenset(Draft202012Validator.VALIDATORS)
"""Keywords jsonschema evaluates; any other key (``title``, ``description``, ``default``, ``then`` without ``if``…)
is ignored by it, and so by the fast check."""
_FAST_UNSUPPORTED: Final = frozenset({"$dynamicRef", "contains", "dependentSchemas", "multipleOf", "patternProperties",
                                      "prefixItems", "unevaluatedItems"})
_ANNOTATING: Final = frozenset({"$ref", "$dynamicRef", "additionalProperties", "patternProperties", "dependentSchemas",
                                "allOf", "oneOf", "anyOf", "if"})
"""In-place keywords whose annotations ``unevaluatedProperties`` would collect; with none of them beside it, the
evaluated keys are exactly the declared ``properties`` (`find_evaluated_property_keys_by_schema`)."""
_POINTER_SEGMENT_RE = re.compile(r"[A-Za-z0-9_.$-]+\Z")


def _is_number(x: Any) -> bool:
    return not isinstance(x, bool) and (isinstance(x, (int, float)) or isinstance(x, numbers.Number))


_TYPE_TESTS: Final[dict[str, _Check]] = {  # Draft 2020-12's type checker, keyword for keyword
    "array": lambda x: isinstance(x, list),
    "boolean": lambda x: isinstance(x, bool),
    "integer": lambda x: (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, float) and x.is_integer()),
    "null": lambda x: x is None,
    "number": _is_number,
    "object": lambda x: isinstance(x, dict),
    "string": lambda x: isinstance(x, str),
}


def _always(x: Any) -> bool:
    return True


def _never(x: Any) -> bool:
    return False


def _conjunction(checks: list[_Check]) -> _Check:
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    frozen = tuple(checks)

    def all_hold(x: Any) -> bool:
        for check in frozen:
            if not check(x):
                return False
        return True

    return all_hold


def _fast_check(root: Any) -> _Check | None:
    """A closure deciding validity under the (closed) ``root`` exactly as `_StrictValidator` does, or None when
    the schema uses something it does not decide (see `_FAST_UNSUPPORTED`; also ``$``-keywords other than
    ``$ref`` to a local ``#/...`` pointer, ``$defs`` and ``$comment``)."""
    refs: dict[str, list[_Check]] = {}

    def resolve(ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _Unsupported("$ref")
        target = root
        for segment in ref[1:].split("/")[1:] if ref != "#" else ():
            if not _POINTER_SEGMENT_RE.match(segment) or not isinstance(target, dict) or segment not in target:
                raise _Unsupported("$ref")
            target = target[segment]
        return target

    def reference(ref: Any) -> _Check:
        cell = refs.get(ref)
        if cell is None:
            cell = refs[ref] = [_never]
            cell[0] = node(resolve(ref))
        return lambda x: cell[0](x)

    def node(schema: Any) -> _Check:
        if schema is True:
            return _always
        if schema is False:
            return _never
        if not isinstance(schema, dict):
            raise _Unsupported(type(schema).__name__)
        checks = [keyword(schema, key, value) for key, value in schema.items()]
        return _conjunction([c for c in checks if c is not _always])

    def keyword(schema: dict[str, Any], key: str, value: Any) -> _Check:  # noqa: C901 - one branch per keyword
        if key.startswith("$"):
            if key in ("$comment", "$defs"):
                return _always
            if key == "$ref":
                return reference(value)
            raise _Unsupported(key)
        if key not in _VALIDATOR_KEYWORDS:
            return _always
        if key in _FAST_UNSUPPORTED:
            raise _Unsupported(key)
        if key == "type":
            tests = [_TYPE_TESTS[t] for t in ([value] if isinstance(value, str) else value)]
            return tests[0] if len(tests) == 1 else (lambda x: any(t(x) for t in tests))
        if key == "enum":
            members = list(value)
            if all(isinstance(m, str) for m in members):
                strings = frozenset(members)
                return lambda x: isinstance(x, str) and x in strings
            return lambda x: any(_equal(m, x) for m in members)
        if key == "const":
            return lambda x: _equal(x, value)
        if key == "properties":
            subs = tuple((name, node(sub)) for name, sub in value.items())

            def properties_hold(x: Any) -> bool:
                if isinstance(x, dict):
                    for name, sub in subs:
                        if name in x and not sub(x[name]):
                            return False
                return True

            return properties_hold
        if key == "required":
            names = tuple(value)
            return lambda x: not isinstance(x, dict) or all(name in x for name in names)
        if key in ("additionalProperties", "unevaluatedProperties"):
            if key == "unevaluatedProperties" and any(k in schema for k in _ANNOTATING):
                raise _Unsupported(key)
            declared = schema.get("properties", {})
            if not isinstance(declared, dict):
                raise _Unsupported(key)
            known = frozenset(declared)
            if value is True:
                return _always
            if value is False:
                return lambda x: not isinstance(x, dict) or all(k in known for k in x)
            extra = node(value)
            return lambda x: not isinstance(x, dict) or all(extra(v) for k, v in x.items() if k not in known)
        if key == "minimum":
            return lambda x: not _is_number(x) or not x < value
        if key == "maximum":
            return lambda x: not _is_number(x) or not x > value
        if key == "exclusiveMinimum":
            return lambda x: not _is_number(x) or not x <= value
        if key == "exclusiveMaximum":
            return lambda x: not _is_number(x) or not x >= value
        if key == "minLength":
            return lambda x: not isinstance(x, str) or not len(x) < value
        if key == "maxLength":
            return lambda x: not isinstance(x, str) or not len(x) > value
        if key == "minItems":
            return lambda x: not isinstance(x, list) or not len(x) < value
        if key == "maxItems":
            return lambda x: not isinstance(x, list) or not len(x) > value
        if key == "minProperties":
            return lambda x: not isinstance(x, dict) or not len(x) < value
        if key == "maxProperties":
            return lambda x: not isinstance(x, dict) or not len(x) > value
        if key == "pattern":
            search = re.compile(value).search
            return lambda x: not isinstance(x, str) or search(x) is not None
        if key == "format":
            if value not in FORMAT_CHECKER.checkers:
                return _always
            conforms = FORMAT_CHECKER.conforms
            return lambda x: conforms(x, value)
        if key == "items":
            if value is True:
                return _always
            if value is False:
                return lambda x: not isinstance(x, list) or not x
            item = node(value)
            return lambda x: not isinstance(x, list) or all(item(v) for v in x)
        if key == "uniqueItems":
            return (lambda x: not isinstance(x, list) or _uniq(x)) if value else _always
        if key == "dependentRequired":
            deps = tuple((name, tuple(needed)) for name, needed in value.items())
            return lambda x: not isinstance(x, dict) or all(n in x for name, needed in deps if name in x
                                                             for n in needed)
        if key == "propertyNames":
            name_check = node(value)
            return lambda x: not isinstance(x, dict) or all(name_check(k) for k in x)
        if key in ("allOf", "anyOf", "oneOf"):
            members = tuple(node(m) for m in value)
            if key == "allOf":
                return _conjunction(list(members))
            if key == "anyOf":
                return lambda x: any(m(x) for m in members)
            return lambda x: sum(1 for m in members if m(x)) == 1
        if key == "not":
            negated = node(value)
            return lambda x: not negated(x)
        if key == "if":
            condition = node(value)
            then = node(schema["then"]) if "then" in schema else _always
            otherwise = node(schema["else"]) if "else" in schema else _always
            return lambda x: then(x) if condition(x) else otherwise(x)
        raise _Unsupported(key)  # a keyword added to jsonschema that this function does not know

    try:
        return node(root)
    except Exception:  # _Unsupported, re.error, RecursionError on absurd nesting: the full path decides alone
        return None


@dataclass(frozen=True, eq=False)
class CompiledParameters:
    """A tool's parameters schema, checked, closed and compiled once (`compile_parameters`); pass it to
    `validate_arguments` instead of the schema so no call pays for compiling or hashing the schema again."""

    validator: Any
    """The strict jsonschema validator over the closed schema: the authority, and the error collector."""
    schema_sha256: str
    """Hex sha256 of the canonical JSON of the schema as declared."""
    fast: _Check | None
    """Exact validity check for the common keywords (`_fast_check`), or None."""



def check_parameters_schema(tool_name: str, schema: object) -> None:
    """Refuse a parameters schema that is not a valid Draft 2020-12 schema of an object.

    Raises:
        ToolDefinitionError: not a dict, not a valid schema, or a root ``type`` other than ``object``.
    """
    _compile(tool_name, schema)


def compile_parameters(tool_name: str, schema: object) -> CompiledParameters:
    """Check and compile a parameters schema once (`Tool` does so at definition).

    Raises:
        ToolDefinitionError: as `check_parameters_schema`.
    """
    return _compile(tool_name, schema)


def _compile(tool_name: str, schema: object) -> CompiledParameters:
    if not isinstance(schema, Mapping):
        raise ToolDefinitionError(tool_name, f"parameters must be a JSON Schema object, got {type(schema).__name__}")
    try:
        text = canonical_json(schema)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(tool_name, f"parameters is not JSON: {exc}") from None
    return _compiled(tool_name, text)


@functools.lru_cache(maxsize=512)
def _compiled(tool_name: str, schema_text: str) -> CompiledParameters:
    schema = json.loads(schema_text)
    try:
        Draft202012Validator.check_schema(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    except jsonschema.SchemaError as exc:
        where = render_path(list(exc.absolute_path)) or "(root)"
        raise ToolDefinitionError(tool_name, f"parameters is not a valid JSON Schema at {where}: "
                                             f"{exc.message}") from None
    root_type = schema.get("type")
    if root_type is not None and root_type != "object":
        raise ToolDefinitionError(tool_name, f"parameters must describe an object (type \"object\"), "
                                             f"got type {json.dumps(root_type)}")
    closed = close_schema(schema)
    validator = _StrictValidator(closed, format_checker=FORMAT_CHECKER)
    return CompiledParameters(validator=validator, schema_sha256=_sha256_text(schema_text), fast=_fast_check(closed))


# ---------------------------------------------------------------------------------------------------------
# the bounded structural walk
# ---------------------------------------------------------------------------------------------------------

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


class _TooManyNodes(Exception):
    pass


def _json_type(value: Any) -> str:
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


class _Walk:
    """Copy a raw value into plain JSON (dict/list/str/int/float/bool/None), collecting structural errors."""

    def __init__(self, *, max_depth: int, max_nodes: int, max_string_bytes: int) -> None:
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.max_string_bytes = max_string_bytes
        self.nodes = 0
        self.errors: list[tuple[tuple[str | int, ...], ArgumentError]] = []

    def error(self, path: tuple[str | int, ...], kind: ValidationErrorKind, reason: str) -> None:
        self.errors.append((path, ArgumentError(path=render_path(path), reason=reason, kind=kind)))

    def string(self, value: str, path: tuple[str | int, ...], what: str) -> str:
        if len(value) * 4 > self.max_string_bytes and (
                len(value) > self.max_string_bytes
                or len(value.encode("utf-8", "surrogatepass")) > self.max_string_bytes):
            self.error(path, ValidationErrorKind.TOO_LONG, f"{what} longer than {self.max_string_bytes} bytes")
        elif not value.isascii() and _SURROGATE_RE.search(value):
            self.error(path, ValidationErrorKind.OTHER, f"{what} contains an unpaired UTF-16 surrogate")
        return str(value)

    def copy(self, value: Any, path: tuple[str | int, ...], depth: int) -> Any:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise _TooManyNodes
        kind = type(value)
        if kind is str:  # the common exact types first; their subclasses take the general path below
            if len(value) * 4 <= self.max_string_bytes and value.isascii():
                return value  # short enough, and ASCII cannot hold a surrogate
            return self.string(value, path, "string")
        if kind is dict and depth < self.max_depth:
            out: dict[str, Any] = {}
            for key, item in value.items():
                if type(key) is str and len(key) * 4 <= self.max_string_bytes and key.isascii():
                    out[key] = self.copy(item, path + (key,), depth + 1)
                    continue
                if not isinstance(key, str):
                    self.error(path, ValidationErrorKind.OTHER, f"object key {_safe_repr(key)} is not a string")
                    continue
                key = self.string(key, path + (key,), "key")
                out[key] = self.copy(item, path + (key,), depth + 1)
            return out
        if kind is int and value.bit_length() <= _MAX_INT_BITS:
            return value
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            if value.bit_length() > _MAX_INT_BITS:
                self.error(path, ValidationErrorKind.OUT_OF_RANGE, f"integer larger than 2**{_MAX_INT_BITS}")
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                self.error(path, ValidationErrorKind.WRONG_TYPE, f"expected a finite number, got {value!r}")
            return float(value)
        if isinstance(value, str):
            return self.string(value, path, "string")
        if isinstance(value, (Mapping, list, tuple)):
            if depth >= self.max_depth:
                self.error(path, ValidationErrorKind.TOO_DEEP, f"nested deeper than {self.max_depth} levels")
                return None
            if isinstance(value, Mapping):
                out = {}
                for key, item in value.items():
                    if not isinstance(key, str):
                        self.error(path, ValidationErrorKind.OTHER,
                                   f"object key {_safe_repr(key)} is not a string")
                        continue
                    key = self.string(key, path + (key,), "key")
                    out[key] = self.copy(item, path + (key,), depth + 1)
                return out
            return [self.copy(item, path + (i,), depth + 1) for i, item in enumerate(value)]
        self.error(path, ValidationErrorKind.OTHER, f"not a JSON value ({type(value).__name__})")
        return None


# ---------------------------------------------------------------------------------------------------------
# jsonschema error → ArgumentError
# ---------------------------------------------------------------------------------------------------------

def _safe_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, or ``<TypeName>`` when the object's ``__repr__`` fails (a
    hostile key or value must not turn a validation error into a crash)."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _show(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return _safe_repr(value, limit)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _expected_types(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _join_or(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


_RANGE_WORDS: Final = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}


def _map_error(error: ValidationError) -> list[tuple[tuple[str | int, ...], ArgumentError]]:
    path: tuple[str | int, ...] = tuple(error.absolute_path)
    kw, expected, instance = error.validator, error.validator_value, error.instance
    kind = ValidationErrorKind.OTHER
    reason = error.message
    if kw == "required":
        kind, reason = ValidationErrorKind.MISSING_REQUIRED, "missing required argument"
    elif kw in ("additionalProperties", "unevaluatedProperties"):
        kind, reason = ValidationErrorKind.UNKNOWN_FIELD, "unknown field"
    elif kw == "type":
        kind = ValidationErrorKind.WRONG_TYPE
        reason = f"expected {_join_or(_expected_types(expected))}, got {_json_type(instance)}"
    elif kw == "enum":
        kind = ValidationErrorKind.ENUM_MISMATCH
        shown = ", ".join(_show(v, 40) for v in list(expected)[:10]) + (", …" if len(expected) > 10 else "")
        reason = f"expected one of {shown}, got {_show(instance)}"
    elif kw == "const":
        kind, reason = ValidationErrorKind.ENUM_MISMATCH, f"expected {_show(expected)}, got {_show(instance)}"
    elif kw in _RANGE_WORDS:
        kind = ValidationErrorKind.OUT_OF_RANGE
        reason = f"must be {_RANGE_WORDS[kw]} {_show(expected)}, got {_show(instance)}"
    elif kw == "multipleOf":
        kind = ValidationErrorKind.OUT_OF_RANGE
        reason = f"must be a multiple of {_show(expected)}, got {_show(instance)}"
    elif kw == "pattern":
        kind, reason = ValidationErrorKind.PATTERN_MISMATCH, f"does not match pattern {expected}"
    elif kw == "format":
        hint = _FORMAT_HINTS.get(expected, f"format {expected!r}")
        kind, reason = ValidationErrorKind.PATTERN_MISMATCH, f"expected {hint}, got {_show(instance)}"
    elif kw in ("maxLength", "minLength"):
        kind = ValidationErrorKind.TOO_LONG if kw == "maxLength" else ValidationErrorKind.TOO_SHORT
        bound = "at most" if kw == "maxLength" else "at least"
        reason = f"must be {bound} {expected} characters, got {len(instance)}"
    elif kw in ("maxItems", "minItems", "maxProperties", "minProperties"):
        kind = ValidationErrorKind.TOO_LONG if kw.startswith("max") else ValidationErrorKind.TOO_SHORT
        bound = "at most" if kw.startswith("max") else "at least"
        noun = "items" if kw.endswith("Items") else "fields"
        reason = f"must have {bound} {expected} {noun}, got {len(instance)}"
    elif kw == "items" and expected is False:
        allowed = len(error.schema.get("prefixItems", [])) if isinstance(error.schema, Mapping) else 0
        kind = ValidationErrorKind.TOO_LONG
        reason = f"must have at most {allowed} items, got {len(instance)}"
    elif kw == "unevaluatedItems" and expected is False:
        kind, reason = ValidationErrorKind.TOO_LONG, "has more items than the schema allows"
    elif kw == "uniqueItems":
        reason = "items must be unique"
    elif kw == "dependentRequired":
        out = []
        for trigger, needed in expected.items():
            if trigger in instance:
                for prop in needed:
                    if prop not in instance:
                        p = path + (prop,)
                        out.append((p, ArgumentError(path=render_path(p), kind=ValidationErrorKind.MISSING_REQUIRED,
                                                     reason=f"required when {_show(trigger)} is present")))
        return out
    elif kw in ("anyOf", "oneOf") and error.context:
        return _map_alternatives(error, path)
    elif kw == "oneOf":
        reason = "matches more than one of the allowed alternatives"
    elif kw == "not":
        reason = "not allowed here" if expected == {} else "matches a shape that is not allowed here"
    return [(path, ArgumentError(path=render_path(path), reason=reason, kind=kind))]


def _map_alternatives(error: ValidationError,
                      path: tuple[str | int, ...]) -> list[tuple[tuple[str | int, ...], ArgumentError]]:
    """An unmatched anyOf/oneOf: name the branch the value's type fits, or the types that would have fitted."""
    branches: dict[int, list[ValidationError]] = {}
    for sub in error.context or ():
        index = sub.relative_schema_path[0] if sub.relative_schema_path else -1
        branches.setdefault(index if isinstance(index, int) else -1, []).append(sub)
    type_misses = {i for i, errs in branches.items()
                   if any(e.validator == "type" and not e.relative_path for e in errs)}
    fitting = [i for i in branches if i not in type_misses]
    if len(fitting) == 1:
        out = []
        for sub in branches[fitting[0]]:
            out.extend(_map_error(sub))
        return out
    if not fitting:
        expected: list[str] = []
        for i in sorted(branches):
            for e in branches[i]:
                if e.validator == "type" and not e.relative_path:
                    expected.extend(t for t in _expected_types(e.validator_value) if t not in expected)
        reason = f"expected {_join_or(expected)}, got {_json_type(error.instance)}"
        return [(path, ArgumentError(path=render_path(path), reason=reason, kind=ValidationErrorKind.WRONG_TYPE))]
    reason = "does not match any of the allowed alternatives"
    return [(path, ArgumentError(path=render_path(path), reason=reason, kind=ValidationErrorKind.OTHER))]


# ---------------------------------------------------------------------------------------------------------
# validate_arguments
# ---------------------------------------------------------------------------------------------------------

class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_text(raw: str | bytes | bytearray) -> tuple[Any, ArgumentError | None]:
    def fail(kind: ValidationErrorKind, reason: str) -> tuple[Any, ArgumentError]:
        return None, ArgumentError(path="", reason=reason, kind=kind)

    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_TEXT_BYTES:
            return fail(ValidationErrorKind.TOO_LONG, f"arguments text longer than {MAX_TEXT_BYTES} bytes")
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return fail(ValidationErrorKind.OTHER, "arguments text is not valid UTF-8")
    if len(raw) > MAX_TEXT_BYTES or len(raw.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        return fail(ValidationErrorKind.TOO_LONG, f"arguments text longer than {MAX_TEXT_BYTES} bytes")
    try:
        return json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constants), None
    except RecursionError:
        return fail(ValidationErrorKind.TOO_DEEP, "arguments nested too deeply to parse")
    except _DuplicateKey as exc:
        return fail(ValidationErrorKind.OTHER, f"invalid JSON: duplicate key {_show(exc.args[0])}")
    except json.JSONDecodeError as exc:
        return fail(ValidationErrorKind.OTHER, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except ValueError as exc:
        return fail(ValidationErrorKind.OTHER, f"invalid JSON: {exc}")


def _failed(tool_name: str, errors: list[tuple[tuple[str | int, ...], ArgumentError]]) -> ArgumentErrors:
    unique = {(parts, e): None for parts, e in errors}
    return ArgumentErrors(tool_name=tool_name, errors=tuple(e for _, e in sorted(unique, key=_sort_key)))


def validate_arguments(tool_name: str, schema: Mapping[str, Any] | CompiledParameters, raw: object, *,
                       max_depth: int = 32,
                       max_nodes: int = MAX_NODES,
                       max_string_bytes: int = MAX_STRING_BYTES) -> ValidatedArguments | ArgumentErrors:
    """Validate a model's raw arguments against a tool's parameters schema, strictly, collecting every error.

    Args:
        tool_name: The tool the arguments are for (carried into the result).
        schema: The tool's parameters schema, as declared (closed for validation, see `close_schema`), or its
            `CompiledParameters` (`Tool.compiled_parameters`), which skips compiling and hashing it per call.
        raw: JSON text (``str``/``bytes``) or an already parsed value (e.g. ``ToolCall.arguments``).
        max_depth: Most nested containers allowed, the arguments object included (1..256).
        max_nodes: Most JSON values allowed in total.
        max_string_bytes: Longest string (value or key) allowed, in UTF-8 bytes.

    Returns:
        `ValidatedArguments` on success, else `ArgumentErrors` with every error found (never empty).

    Raises:
        ToolDefinitionError: ``schema`` is not a valid Draft 2020-12 object schema.
        ValueError: a bound is out of range.
    """
    if not (1 <= max_depth <= MAX_DEPTH_LIMIT):
        raise ValueError(f"max_depth must be in 1..{MAX_DEPTH_LIMIT}, got {max_depth}")
    if max_nodes < 1 or max_string_bytes < 1:
        raise ValueError(f"max_nodes and max_string_bytes must be positive, got {max_nodes}, {max_string_bytes}")
    compiled = schema if isinstance(schema, CompiledParameters) else _compile(tool_name, schema)

    if isinstance(raw, (str, bytes, bytearray)):
        raw, parse_error = _parse_text(raw)
        if parse_error is not None:
            return _failed(tool_name, [((), parse_error)])
    if not isinstance(raw, Mapping):
        return _failed(tool_name, [((), ArgumentError(path="", kind=ValidationErrorKind.NOT_AN_OBJECT,
                                                    reason=f"arguments must be a JSON object, got {_json_type(raw)}"))])
    walk = _Walk(max_depth=max_depth, max_nodes=max_nodes, max_string_bytes=max_string_bytes)
    try:
        plain = walk.copy(raw, (), 0)
    except _TooManyNodes:
        return _failed(tool_name, [((), ArgumentError(path="", kind=ValidationErrorKind.TOO_LONG,
                                                    reason=f"more than {max_nodes} values in the arguments"))])
    if walk.errors:
        return _failed(tool_name, walk.errors)
    if compiled.fast is not None:
        try:
            valid = compiled.fast(plain)
        except Exception:  # e.g. RecursionError: the full path below reports it the documented way
            valid = False
        if valid:
            return ValidatedArguments(_CONSTRUCTOR_TOKEN, tool_name=tool_name, plain=plain,
                                      schema_sha256=compiled.schema_sha256)
    try:
        mapped = [m for error in compiled.validator.iter_errors(plain) for m in _map_error(error)]
    except RecursionError:
        return _failed(tool_name, [((), ArgumentError(path="", kind=ValidationErrorKind.TOO_DEEP,
                                                    reason="arguments nested too deeply to validate"))])
    except Exception as exc:  # unresolvable $ref and other schema faults surface only while validating
        raise ToolDefinitionError(tool_name, f"parameters cannot be evaluated: {type(exc).__name__}: {exc}") from exc
    if mapped:
        return _failed(tool_name, mapped)
    return ValidatedArguments(_CONSTRUCTOR_TOKEN, tool_name=tool_name, plain=plain,
                              schema_sha256=compiled.schema_sha256)
