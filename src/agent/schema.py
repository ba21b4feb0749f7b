"""Raw JSON arguments → `ValidatedArguments`, or every reason they are not.

Parsing a JSON-looking span is syntax recognition, not permission. This module is the only place that turns a
model's argument object into something a tool may run on:

    raw (JSON text or parsed object)
      ─► parse ─► object? ─► structural walk ─► JSON Schema (Draft 2020-12, closed, formats) ─► ValidatedArguments
          │          │        (depth, node count, string     │   one jsonschema-rs validator,
          │          │         size, JSON-ness, NaN)         │   compiled once per schema
          └──────────┴───────────────┴───────────────────────┴──► ArgumentErrors (every error, with its path)

Owns:
- **Strictness.** Unknown fields are rejected: an object schema (one that declares ``properties``, or
  ``type: "object"``) that says nothing about ``additionalProperties``/``unevaluatedProperties`` is validated as
  if it said ``unevaluatedProperties: false`` (`close_schema`, in `agent.schema_closing`). To accept free-form
  keys, say so (``"additionalProperties": true``). A tool's *declared* ``parameters`` are not rewritten (the
  grammar compiler reads them as written); only validation closes them.
- **Formats are asserted**, not annotated: the stdlib-only checkers of `agent.schema_formats` (``date``,
  ``time``, ``date-time``, ``email``, ``ipv4``, ``ipv6``, ``uuid``, ``uri``). Other formats are not checked.
- **Bounds before recursion.** Nesting deeper than ``max_depth`` containers (``too_deep``), more than
  ``max_nodes`` values or strings over ``max_string_bytes`` UTF-8 bytes (``too_long``) are found by a bounded walk
  *before* the schema is evaluated; when any is exceeded the schema is not evaluated at all. Non-JSON values
  (NaN, Infinity, sets, non-string keys, unpaired surrogates) are refused by the same walk. Booleans are not
  integers or numbers (JSON Schema agrees).
- **One validator, compiled once.** `compile_parameters` (which `Tool` calls at definition) checks the schema
  (jsonschema's meta-schema check, so definition errors read as before), closes it and compiles it with
  jsonschema-rs (`jsonschema_rs.Draft202012Validator`, through its public API only) into `CompiledParameters`;
  `validate_arguments` takes it in place of the schema, so a call never recompiles or rehashes. That one
  validator decides validity and reports every error (``iter_errors``: instance path, schema path, typed kind).
  ``pattern`` is evaluated with Python's `re` (``re.search``, a custom keyword), as jsonschema's reference
  validator does; remote ``$ref`` is never fetched (an unresolvable reference is a `ToolDefinitionError` when
  the schema is compiled). Known differences from the reference validator, outside what tool schemas use:
  ``patternProperties`` keys are ECMA-262 regexes (Rust ``regex``), and ``multipleOf`` with a fractional divisor
  is exact (0.3 is a multiple of 0.1) where the reference divides floats.
- **Every error, with its path and kind, sorted**: by path (array indices numerically), then kind, then reason.
  Paths are dotted and indexed, ``items[0].qty``; keys that are not identifiers are quoted, ``meta["a.b"]``;
  the arguments object itself is the empty path ``""``. A missing or unknown field is reported at the field's own
  path, one error per field.

Refuses: schemas that are not valid Draft 2020-12 or nest deeper than `MAX_SCHEMA_DEPTH` containers
(`ToolDefinitionError`), ``max_depth`` outside 1..256.

`ValidatedArguments` can only be built here (a private constructor token) and is immutable: a deep-frozen copy
(read-only mappings, tuples for arrays) taken after validation, so nothing the caller still holds can change it.
That guards against accidents, not against deliberate in-process forgery (nothing in Python can).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import jsonschema
import jsonschema_rs
from jsonschema import Draft202012Validator

from agent.argument_errors import (ArgumentError, ArgumentErrors, ValidationErrorKind, describe_errors, failed,
                                   json_type, render_path, safe_repr, show_value)
from agent.errors import ToolDefinitionError
from agent.json_depth import shown_path, text_depth, too_deep
from agent.schema_closing import close_for_grammar, close_schema
from agent.schema_formats import FORMAT_CHECKER, FORMATS

__all__ = [
    "close_for_grammar",
    "ArgumentError",
    "ArgumentErrors",
    "FORMAT_CHECKER",
    "MAX_DEPTH_LIMIT",
    "MAX_NODES",
    "MAX_SCHEMA_DEPTH",
    "MAX_STRING_BYTES",
    "MAX_TEXT_BYTES",
    "ValidatedArguments",
    "ValidationErrorKind",
    "CompiledParameters",
    "canonical_json",
    "check_parameters_schema",
    "close_schema",
    "compile_parameters",
    "enforcement_refusal",
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
MAX_SCHEMA_DEPTH: Final = 64
"""The deepest parameters schema accepted, in containers of the schema document (a nested object schema takes two:
itself and its ``properties``), checked without recursion before anything reads the schema: jsonschema's
meta-schema check takes ~8 frames a level (it failed at ~100 nested objects) and jsonschema-rs stops at ~255
containers. Function-calling APIs allow about 10 levels of nesting; 64 containers is 31 nested objects."""
_MAX_INT_BITS: Final = 4096
"""Integers past 2**4096 are refused (``out_of_range``): they cannot round-trip through every JSON reader."""


# ---------------------------------------------------------------------------------------------------------
# ValidatedArguments
# ---------------------------------------------------------------------------------------------------------

_CONSTRUCTOR_TOKEN: Final = object()


_CANONICAL_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                                             allow_nan=False)
"""Built once (``json.dumps`` with these options builds one per call); encoders keep no state between calls."""


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
        text = _CANONICAL_ENCODER.encode(plain)
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
# compiling a parameters schema: one jsonschema-rs validator over the closed schema
# ---------------------------------------------------------------------------------------------------------

class _PythonPattern:
    """``pattern`` as jsonschema's reference validator evaluates it: ``re.search`` with Python's `re`
    (a jsonschema-rs custom keyword; its own engine reads patterns as ECMA-262)."""

    def __init__(self, parent_schema: Any, value: Any, schema_path: Any) -> None:
        self._search = re.compile(value).search

    def validate(self, instance: Any) -> None:
        if isinstance(instance, str) and self._search(instance) is None:
            raise ValueError("does not match pattern")


def _always_conforms(value: str) -> bool:
    return True


def _format_names(node: Any) -> set[str]:
    """Every ``format`` value in a schema (values of data keywords too: a spare entry is harmless)."""
    if isinstance(node, list):
        return set().union(*map(_format_names, node)) if node else set()
    if not isinstance(node, Mapping):
        return set()
    found = {node["format"]} if isinstance(node.get("format"), str) else set()
    return found.union(*(_format_names(v) for v in node.values()))


@dataclass(frozen=True, eq=False)
class CompiledParameters:
    """A tool's parameters schema, checked, closed and compiled once (`compile_parameters`); pass it to
    `validate_arguments` instead of the schema so no call pays for compiling or hashing the schema again."""

    validator: Any
    """The jsonschema-rs validator over the closed schema: decides validity and reports every error."""
    schema_sha256: str
    """Hex sha256 of the canonical JSON of the schema as declared."""
    closed: Any
    """The closed schema the validator evaluates (error reasons read keyword values from it)."""


def check_parameters_schema(tool_name: str, schema: object) -> None:
    """Refuse a parameters schema that is not a valid Draft 2020-12 schema of an object.

    Raises:
        ToolDefinitionError: not a dict, not a valid schema, a root ``type`` other than ``object``, a
            ``$ref`` that cannot be resolved locally, or nested deeper than `MAX_SCHEMA_DEPTH` containers (the
            message names the path).
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
        path = too_deep(schema, MAX_SCHEMA_DEPTH)  # before the recursive walks: canonical JSON, the meta-schema check
    except Exception as exc:  # a hostile mapping whose items() raises
        raise ToolDefinitionError(tool_name, f"parameters is not JSON: {type(exc).__name__}") from None
    if path is not None:
        raise ToolDefinitionError(tool_name, f"parameters nest deeper than MAX_SCHEMA_DEPTH = {MAX_SCHEMA_DEPTH} "
                                             f"containers at {shown_path(path, pointer=True)}")  # fmt: skip
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
    except RecursionError:  # not within MAX_SCHEMA_DEPTH: a caller already deep in its own stack
        raise ToolDefinitionError(tool_name, "parameters nest too deeply to check here") from None
    except jsonschema.SchemaError as exc:
        where = render_path(list(exc.absolute_path)) or "(root)"
        raise ToolDefinitionError(tool_name, f"parameters is not a valid JSON Schema at {where}: "
                                             f"{exc.message}") from None
    root_type = schema.get("type")
    if root_type is not None and root_type != "object":
        raise ToolDefinitionError(tool_name, f"parameters must describe an object (type \"object\"), "
                                             f"got type {json.dumps(root_type)}")
    closed = close_schema(schema)
    formats = {name: FORMATS.get(name, _always_conforms) for name in _format_names(closed)}
    try:
        validator = jsonschema_rs.Draft202012Validator(closed, formats=formats, validate_formats=True,
                                                       keywords={"pattern": _PythonPattern}, offline=True)
    except (ValueError, re.error) as exc:  # jsonschema_rs.ValidationError is a ValueError (e.g. a remote $ref)
        reason = str(exc).split("\n", 1)[0]
        raise ToolDefinitionError(tool_name, f"parameters cannot be evaluated: {reason}") from None
    return CompiledParameters(validator=validator, schema_sha256=_sha256_text(schema_text), closed=closed)


# ---------------------------------------------------------------------------------------------------------
# the bounded structural walk
# ---------------------------------------------------------------------------------------------------------

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


class _TooManyNodes(Exception):
    pass


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
                    self.error(path, ValidationErrorKind.OTHER, f"object key {safe_repr(key)} is not a string")
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
                                   f"object key {safe_repr(key)} is not a string")
                        continue
                    key = self.string(key, path + (key,), "key")
                    out[key] = self.copy(item, path + (key,), depth + 1)
                return out
            return [self.copy(item, path + (i,), depth + 1) for i, item in enumerate(value)]
        self.error(path, ValidationErrorKind.OTHER, f"not a JSON value ({type(value).__name__})")
        return None


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


def _parse_text(raw: str | bytes | bytearray, max_depth: int) -> tuple[Any, ArgumentError | None]:
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
        depth, at = text_depth(raw, len(raw) - len(raw.lstrip(" \t\n\r")))
        deeper = f", deeper than {max_depth} levels" if depth > max_depth else ""
        return fail(ValidationErrorKind.TOO_DEEP, f"nested {depth:,} levels deep (at character {at:,}){deeper}: too "
                    f"deep to parse")  # fmt: skip
    except _DuplicateKey as exc:
        return fail(ValidationErrorKind.OTHER, f"invalid JSON: duplicate key {show_value(exc.args[0])}")
    except json.JSONDecodeError as exc:
        return fail(ValidationErrorKind.OTHER, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except ValueError as exc:
        return fail(ValidationErrorKind.OTHER, f"invalid JSON: {exc}")


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
        raw, parse_error = _parse_text(raw, max_depth)
        if parse_error is not None:
            return failed(tool_name, [((), parse_error)])
    if not isinstance(raw, Mapping):
        return failed(tool_name, [((), ArgumentError(path="", kind=ValidationErrorKind.NOT_AN_OBJECT,
                                                    reason=f"arguments must be a JSON object, got {json_type(raw)}"))])
    walk = _Walk(max_depth=max_depth, max_nodes=max_nodes, max_string_bytes=max_string_bytes)
    try:
        plain = walk.copy(raw, (), 0)
    except _TooManyNodes:
        return failed(tool_name, [((), ArgumentError(path="", kind=ValidationErrorKind.TOO_LONG,
                                                    reason=f"more than {max_nodes} values in the arguments"))])
    if walk.errors:
        return failed(tool_name, walk.errors)
    if not compiled.validator.is_valid(plain):  # the same validator; is_valid skips building error objects
        mapped = describe_errors(compiled.closed, plain, compiled.validator.iter_errors(plain))
        return failed(tool_name, mapped or [((), ArgumentError(path="", kind=ValidationErrorKind.OTHER,
                                                              reason="does not match the parameters schema"))])
    return ValidatedArguments(_CONSTRUCTOR_TOKEN, tool_name=tool_name, plain=plain,
                              schema_sha256=compiled.schema_sha256)


def enforcement_refusal(schema: Any, *, whitespace: str = "compact") -> Exception | None:
    """Why the engine cannot constrain a document to ``schema`` exactly (its schema compiler's refusal: an unsupported
    keyword, an unknown ``format``, an unsatisfiable schema, one too large), or None when it can. The one check
    behind every schema the project is asked to enforce: ``ember generate``/``call`` inputs, a constrained `Tool`,
    an MCP tool's ``inputSchema``. No vocabulary is needed: the front end alone decides."""
    from constrained import schema_refusal

    try:
        return schema_refusal(schema, whitespace=whitespace)
    except RecursionError:
        return ValueError("the schema is nested too deeply to compile")
