"""Hostile schemas: the JSON Schema compiler ends in a grammar or a documented error, within budget, every time.

Each schema is compiled (schema_to_pattern → compile_dfa → token index over a 256-byte vocabulary) in a guarded
worker process: an address-space limit (RLIMIT_AS, 3 GiB) catches unbounded memory, a wall timeout catches hangs,
and any exception that is not a `ConstrainedError` is a crash. When a grammar comes out, random documents it
accepts must be JSON that the schema (judged by jsonschema, Draft 2020-12) accepts: nothing gets through that does
not belong.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from .hostile_kit import Guarded, budget

HANG_S = 60.0
"""A compile taking longer than this is a hang (the documented budget is ~1 s of subset work on a quiet machine;
this machine is shared, so the guard is generous and the measured slowest call is reported)."""

PATHOLOGICAL_PATTERNS = ["(a|aa)*b", "(a|aa){1000}", "(a+)+$", "^(a|a?)+$", "a{1000}", "[ab]{0,1000}b", "(x{1000}){1000}",
                         "((a{0,50}){0,50}){0,50}", "(?:a|b|c|d|e|f|g|h)*[a-h]{20}", "\\p{L}+", "(?<=a)b", "(a)\\1",
                         "[", "(", "a{2,1}", "a**", "\\", "(?P<n>a)(?P=n)", "\ud800", "[\ud800-\udfff]+", ".{0,65535}",
                         "[^\\x00-\\x{10FFFF}]", "a{99999999999}", "(|)*", "()*", "(a*)*", "$^", "^$", "a$b", "\\u{1F600}",
                         "\\cA", "[\\s\\S]*", "\\bword\\b", "[[:alpha:]]", "\\x", "\\uZZZZ", "(?i)a"]

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
                     st.sampled_from(["\ud800", "a\udfff", "\x00", "\u2028", "é", "😀"]))
_JSON = st.recursive(_SCALARS, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=4), c,
                                                                                          max_size=4)), max_leaves=8)
_NUMBERS = st.one_of(st.integers(-10**30, 10**30), st.floats(), st.sampled_from([10**400, -10**400, 0.1, 1e308, -0.0]),
                     st.text(max_size=3), st.booleans(), st.none())
_COUNTS = st.one_of(st.integers(-3, 40), st.sampled_from([1000, 65536, 10**6, 10**12, 2.0, 2.5, float("nan"),
                                                         float("inf")]), st.text(max_size=2), st.none())
_TYPES = st.sampled_from(["null", "boolean", "object", "array", "number", "integer", "string"])
_REFS = st.sampled_from(["#", "#/$defs/a", "#/$defs/b", "#/properties/x", "#/$defs/missing", "http://e.x/s.json",
                         "#/definitions/a", "", "#/", "#/$defs/a/items", "#a", "#/$defs/%61", "~", 3])
_KEYWORDS = st.sampled_from(["not", "if", "then", "else", "contains", "propertyNames", "dependentSchemas",
                             "unevaluatedProperties", "$dynamicRef", "x-vendor", "unknownKeyword", "nullable", "id",
                             "title", "default", "examples", "deprecated"])


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    pieces = st.fixed_dictionaries({}, optional={
        "type": st.one_of(_TYPES, st.lists(_TYPES, max_size=3), st.just("foo"), st.just(3)),
        "enum": st.one_of(st.lists(_JSON, max_size=6), st.integers(0, 3000).map(lambda n: list(range(n))),
                          st.integers(0, 500).map(lambda n: [f"v{i}" for i in range(n)]), st.just("notalist")),
        "const": _JSON,
        "pattern": st.one_of(st.sampled_from(PATHOLOGICAL_PATTERNS),
                             st.text(alphabet="ab()|*+?{}[]^$.\\d,0123-:?<=!", max_size=16), st.just(5)),
        "format": st.sampled_from(["date", "time", "date-time", "uuid", "email", "ipv4", "uri", "int32", "int64",
                                   "float", "hostname", "regex", "", 7]),
        "minLength": _COUNTS, "maxLength": _COUNTS, "minItems": _COUNTS, "maxItems": _COUNTS,
        "minProperties": _COUNTS, "maxProperties": _COUNTS,
        "minimum": _NUMBERS, "maximum": _NUMBERS, "exclusiveMinimum": st.one_of(_NUMBERS, st.booleans()),
        "exclusiveMaximum": _NUMBERS, "multipleOf": _NUMBERS,
        "uniqueItems": st.one_of(st.booleans(), st.just("yes")),
        "$ref": _REFS,
        "required": st.one_of(st.lists(st.sampled_from(["a", "b", "x", "\ud800", ""]), max_size=3), st.just("a")),
    })
    extra = st.dictionaries(_KEYWORDS, _JSON, max_size=2)
    return st.tuples(pieces, extra).map(lambda t: {**t[1], **t[0]})


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = st.sampled_from(["a", "b", "x", "y", "key with space", "\ud800", "é", "\"q\"", "", "a" * 200])
    return st.one_of(
        st.tuples(_leaf(), st.dictionaries(names, children, max_size=4), st.one_of(st.booleans(), children))
          .map(lambda t: {**t[0], "type": "object", "properties": t[1], "additionalProperties": t[2]}),
        st.tuples(_leaf(), children).map(lambda t: {**t[0], "items": t[1]}),
        st.tuples(_leaf(), st.lists(children, max_size=3)).map(lambda t: {**t[0], "prefixItems": t[1]}),
        st.tuples(st.sampled_from(["allOf", "anyOf", "oneOf"]), st.lists(children, max_size=4))
          .map(lambda t: {t[0]: t[1]}),
        st.tuples(_leaf(), st.dictionaries(st.sampled_from(["a", "b"]), children, max_size=2))
          .map(lambda t: {**t[0], "$defs": t[1]}),
        st.tuples(st.sampled_from(["not", "if", "then", "patternProperties"]), children)
          .map(lambda t: {t[0]: t[1]}),
    )


SCHEMAS = st.recursive(st.one_of(_leaf(), st.booleans()), _extend, max_leaves=10)


def _deep(kind: str, depth: int) -> Any:
    node: Any = {"type": "integer"}
    for _ in range(depth):
        node = ({"type": "array", "items": node, "minItems": 1} if kind == "array" else
                {"type": "object", "properties": {"a": node}, "required": ["a"]} if kind == "object" else
                {"allOf": [node, {}]} if kind == "allOf" else {"anyOf": [node, {"type": "null"}]})
    return node


DEEP = st.tuples(st.sampled_from(["array", "object", "allOf", "anyOf"]), st.integers(0, 400)).map(lambda t: _deep(*t))
TEXT_SCHEMAS = st.one_of(st.text(max_size=40), st.binary(max_size=20).map(lambda b: b.decode("latin-1")),
                         SCHEMAS.map(lambda s: json.dumps(s)))
ALL = st.one_of(SCHEMAS, DEEP, TEXT_SCHEMAS, st.binary(max_size=10), st.lists(st.integers(), max_size=2))

CURATED: list[Any] = [
    {"type": "string", "pattern": p} for p in PATHOLOGICAL_PATTERNS
] + [
    {"$ref": "#"}, {"properties": {"a": {"$ref": "#"}}}, {"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                                                          "$ref": "#/$defs/n"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"allOf": [{"type": "string"}, {"type": "integer"}]}, {"allOf": [{"minimum": 5}, {"maximum": 3}]},
    {"allOf": [{"const": 1}, {"const": 2}]}, {"type": "string", "minLength": 5, "maxLength": 2},
    {"enum": list(range(3000))}, {"enum": [f"s{i}" for i in range(3000)]}, {"type": "string", "maxLength": 10**9},
    {"type": "string", "minLength": 1000}, {"type": "array", "minItems": 1000}, {"type": "integer", "minimum": 10**400},
    {"type": "string", "enum": ["\ud800"]}, {"const": "\udfff"}, {"properties": {"\ud800": {}}},
    {"type": "integer", "minimum": float("nan")}, {"type": "integer", "maximum": float("inf")},
    {"type": "string", "minLength": float("nan")}, {"type": "array", "maxItems": float("inf")},
    {"anyOf": [{"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(40)}}] * 3},
    _deep("array", 400), _deep("object", 400), _deep("allOf", 400), _deep("anyOf", 40), "\udcff", "{", "",
]

_compiler = Guarded("hostile_workers:compile_schema", timeout_s=HANG_S)
_stats = {"cases": 0, "grammars": 0, "errors": 0}


def check_schema(schema: Any, whitespace: str = "compact", seed: int = 0) -> dict[str, Any]:
    status, value = _compiler((schema, whitespace, seed))
    _stats["cases"] += 1
    assert status != "timeout", f"compile hung (> {HANG_S} s) on {schema!r:.300}"
    assert status != "died", f"compiler process died (exit {value}: memory limit or crash) on {schema!r:.300}"
    assert status == "ok", f"crash: {value[0]}: {value[1]}\nschema: {schema!r:.500}"
    if value["outcome"] == "error":
        _stats["errors"] += 1
    else:
        _stats["grammars"] += 1
        assert not value["unsound"], f"grammar accepts documents the schema rejects: {value['unsound'][:2]}\n" \
                                     f"schema: {schema!r:.500}"
    return value


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    print(f"\n[hostile schema compiler] cases={_stats['cases']} grammars={_stats['grammars']} "
          f"documented_errors={_stats['errors']} slowest_call_s={_compiler.slowest_s:.2f}")
    _compiler.close()


# -- curated pathologies (one test each, so every failure is named) ------------------------------------------------

@pytest.mark.parametrize("schema", CURATED, ids=lambda s: repr(s)[:40])
def test_curated_hostile_schema_compiles_or_fails_with_a_documented_error(schema: Any) -> None:
    check_schema(schema)


@pytest.mark.parametrize("schema", [{"type": "integer", "minimum": float("nan")},
                                    {"type": "integer", "maximum": float("inf")},
                                    {"type": "string", "minLength": float("nan")},
                                    {"type": "array", "maxItems": float("inf")}], ids=repr)
def test_non_finite_numeric_bounds_are_an_invalid_schema_error(schema: Any) -> None:
    from constrained.errors import InvalidSchemaError
    from constrained.schema import schema_to_pattern

    with pytest.raises(InvalidSchemaError):
        schema_to_pattern(schema)


def test_a_huge_enum_is_refused_or_compiled_within_the_compile_budget() -> None:
    import time

    from constrained.errors import ConstrainedError
    from constrained.schema import schema_to_pattern

    started = time.process_time()
    try:
        schema_to_pattern({"enum": list(range(20_000))})
    except ConstrainedError:
        pass
    assert time.process_time() - started < 3.0  # CPU seconds: the subset-work budget is ~1 s


def test_a_schema_holding_non_json_values_is_an_invalid_schema_error() -> None:
    from constrained.errors import InvalidSchemaError
    from constrained.schema import schema_to_pattern

    for schema in ({"enum": [{1, 2}]}, {"type": "string", "enum": [object()]}, {"enum": [b"x"]}, {"const": b"x"},
                   {"enum": [[1, {"a": b"x"}]]}, {"enum": [{1: "a"}]}, {"const": float("nan")}):
        with pytest.raises(InvalidSchemaError):
            schema_to_pattern(schema)


@pytest.mark.parametrize("schema", [{"type": "integer", "format": "int32", "minimum": "x"},
                                    {"type": "number", "multipleOf": float("inf")},
                                    {"type": "integer", "exclusiveMaximum": float("-inf")}], ids=repr)
def test_a_bad_numeric_keyword_is_an_invalid_schema_error(schema: Any) -> None:
    from constrained.errors import InvalidSchemaError
    from constrained.schema import schema_to_pattern

    with pytest.raises(InvalidSchemaError):
        schema_to_pattern(schema)


# -- fuzz ----------------------------------------------------------------------------------------------------------


@budget(ci=150)
@given(schema=ALL, whitespace=st.sampled_from(["compact", "flexible"]), seed=st.integers(0, 2**16))
def test_any_schema_compiles_or_fails_with_a_documented_error(schema: Any, whitespace: str, seed: int) -> None:
    check_schema(schema, whitespace, seed)


@pytest.mark.slow
@budget(ci=150, fuzz=4000)
@given(schema=ALL, whitespace=st.sampled_from(["compact", "flexible"]), seed=st.integers(0, 2**16))
def test_any_schema_compiles_or_fails_with_a_documented_error_fuzz(schema: Any, whitespace: str, seed: int) -> None:
    check_schema(schema, whitespace, seed)
