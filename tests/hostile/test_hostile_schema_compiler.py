"""Hostile schemas: the JSON Schema compiler ends in a grammar or a documented error, every time.

Each schema is compiled (schema_to_pattern → compile_dfa) in a guarded worker process: an address-space limit
(RLIMIT_AS, 3 GiB) catches unbounded memory, a wall timeout catches hangs (a guard, not a measurement), and any
exception that is not a `ConstrainedError` is a crash. When a grammar comes out, random documents it accepts must
be JSON that the schema (judged by jsonschema, Draft 2020-12) accepts: nothing gets through that does not belong.

Every curated case states its outcome: refused with a named `ConstrainedError` subclass (and the keyword or budget
its message names), or compiled into a grammar that accepts and rejects named sample documents (compact JSON).
The fuzz tests draw random schemas, so for them either outcome is fine; soundness is what they check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from .hostile_kit import Guarded, budget

HANG_S = 60.0
"""A compile taking longer than this is a hang: a guard that keeps the run from stalling, not a measurement."""

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
    wrong_shape = st.sampled_from([3, None, True, "a", [["x"]], {"a": 1}])  # where an object or an array belongs
    pieces = st.fixed_dictionaries({}, optional={
        "type": st.one_of(_TYPES, st.lists(_TYPES, max_size=3), st.just("foo"), st.just(3), st.just([["x"]]),
                          st.just({"a": 1})),
        "enum": st.one_of(st.lists(_JSON, max_size=6), st.integers(0, 3000).map(lambda n: list(range(n))),
                          st.integers(0, 500).map(lambda n: [f"v{i}" for i in range(n)]), st.just("notalist")),
        "const": _JSON,
        "pattern": st.one_of(st.sampled_from(PATHOLOGICAL_PATTERNS),
                             st.text(alphabet="ab()|*+?{}[]^$.\\d,0123-:?<=!", max_size=16), st.just(5)),
        "format": st.sampled_from(["date", "time", "date-time", "uuid", "email", "ipv4", "uri", "int32", "int64",
                                   "float", "hostname", "regex", "", 7, None]),
        "minLength": _COUNTS, "maxLength": _COUNTS, "minItems": _COUNTS, "maxItems": _COUNTS,
        "minProperties": _COUNTS, "maxProperties": _COUNTS,
        "minimum": _NUMBERS, "maximum": _NUMBERS, "exclusiveMinimum": st.one_of(_NUMBERS, st.booleans()),
        "exclusiveMaximum": _NUMBERS, "multipleOf": _NUMBERS,
        "uniqueItems": st.one_of(st.booleans(), st.just("yes")),
        "$ref": _REFS,
        "required": st.one_of(st.lists(st.sampled_from(["a", "b", "x", "\ud800", ""]), max_size=3), st.just("a"),
                              wrong_shape, st.just(["a", 3])),
        "properties": wrong_shape, "prefixItems": wrong_shape,
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

@dataclass(frozen=True)
class Refused:
    """The compiler refuses the schema with this `ConstrainedError` subclass, its message naming ``names``."""

    error: str
    names: str


@dataclass(frozen=True)
class Compiled:
    """The compiler gives a grammar that accepts every ``accept`` document and no ``reject`` document."""

    accept: tuple[str, ...]
    reject: tuple[str, ...] = ()


def _pattern(p: str) -> dict[str, Any]:
    return {"type": "string", "pattern": p}


UNSUPPORTED_PATTERN = Refused("UnsupportedSchemaError", "keyword 'pattern'")
TOO_MANY_SUBSETS = Refused("GrammarTooLargeError", "subset_work budget")
TOO_MANY_NFA_STATES = Refused("GrammarTooLargeError", "nfa_states budget")
UNSATISFIABLE = Refused("InvalidSchemaError", "no JSON document satisfies")
ANY_STRING = Compiled(accept=('""', '"x"', '"é😀 \\n"'), reject=("1", "null"))

CURATED: list[tuple[Any, Refused | Compiled]] = [
    (_pattern("(a|aa)*b"), Compiled(accept=('"b"', '"xaab"', '"bq"'), reject=('"aaa"', '""'))),
    (_pattern("(a|aa){1000}"), TOO_MANY_SUBSETS),
    (_pattern("(a+)+$"), Compiled(accept=('"a"', '"xyzaa"'), reject=('"ax"', '""'))),
    (_pattern("^(a|a?)+$"), Compiled(accept=('""', '"aaaa"'), reject=('"ab"', '"b"'))),
    (_pattern("a{1000}"), TOO_MANY_SUBSETS),  # a limit of the subset construction, not of the language
    (_pattern("[ab]{0,1000}b"), TOO_MANY_SUBSETS),
    (_pattern("(x{1000}){1000}"), TOO_MANY_NFA_STATES),
    (_pattern("((a{0,50}){0,50}){0,50}"), TOO_MANY_NFA_STATES),
    (_pattern("(?:a|b|c|d|e|f|g|h)*[a-h]{20}"), Compiled(accept=('"' + "a" * 20 + '"', '"zz' + "h" * 21 + '"'),
                                                       reject=('"' + "a" * 19 + '"',))),
    (_pattern("\\p{L}+"), UNSUPPORTED_PATTERN),
    (_pattern("(?<=a)b"), UNSUPPORTED_PATTERN),
    (_pattern("(a)\\1"), UNSUPPORTED_PATTERN),
    (_pattern("["), UNSUPPORTED_PATTERN),
    (_pattern("("), UNSUPPORTED_PATTERN),
    (_pattern("a{2,1}"), UNSUPPORTED_PATTERN),
    (_pattern("a**"), UNSUPPORTED_PATTERN),
    (_pattern("\\"), UNSUPPORTED_PATTERN),
    (_pattern("(?P<n>a)(?P=n)"), UNSUPPORTED_PATTERN),
    (_pattern("\ud800"), UNSUPPORTED_PATTERN),
    (_pattern("[\ud800-\udfff]+"), UNSUPPORTED_PATTERN),
    (_pattern(".{0,65535}"), TOO_MANY_NFA_STATES),
    (_pattern("[^\\x00-\\x{10FFFF}]"), UNSUPPORTED_PATTERN),
    (_pattern("a{99999999999}"), TOO_MANY_NFA_STATES),
    (_pattern("(|)*"), ANY_STRING),
    (_pattern("()*"), ANY_STRING),
    (_pattern("(a*)*"), ANY_STRING),
    (_pattern("$^"), Compiled(accept=('""',), reject=('"x"', '"\\n"'))),  # ECMA: both anchors hold only in ""
    (_pattern("^$"), Compiled(accept=('""',), reject=('"a"', '" "'))),
    (_pattern("a$b"), UNSATISFIABLE),  # ECMA: no string has a 'b' after its end
    (_pattern("\\u{1F600}"), UNSUPPORTED_PATTERN),
    (_pattern("\\cA"), UNSUPPORTED_PATTERN),
    (_pattern("[\\s\\S]*"), ANY_STRING),
    (_pattern("\\bword\\b"), UNSUPPORTED_PATTERN),
    (_pattern("[[:alpha:]]"), Compiled(accept=('"a]"', '"x:]y"'), reject=('"a"', '"]"'))),  # re: class [[:alph] + "]"
    (_pattern("\\x"), UNSUPPORTED_PATTERN),
    (_pattern("\\uZZZZ"), UNSUPPORTED_PATTERN),
    (_pattern("(?i)a"), UNSUPPORTED_PATTERN),
    ({"$ref": "#"}, Refused("UnsupportedSchemaError", "refers to itself without nesting a container")),
    ({"properties": {"a": {"$ref": "#"}}}, Compiled(accept=("1", '{"a":{"a":true}}', '{"a":1,"b":[]}'))),
    ({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"},
     Compiled(accept=("[]", "[[],[[]]]"), reject=("[1]", "{}"))),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
     Refused("UnsupportedSchemaError", "refers to itself without nesting a container")),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, UNSATISFIABLE),
    ({"allOf": [{"minimum": 5}, {"maximum": 3}]}, Compiled(accept=("null", '"4"', "[]"), reject=("4", "5", "3"))),
    ({"allOf": [{"const": 1}, {"const": 2}]}, UNSATISFIABLE),
    ({"type": "string", "minLength": 5, "maxLength": 2}, UNSATISFIABLE),
    ({"enum": list(range(3000))}, Compiled(accept=("0", "2999"), reject=("3000", "-1", "01"))),
    ({"enum": [f"s{i}" for i in range(3000)]}, Compiled(accept=('"s0"', '"s2999"'), reject=('"s3000"', "0"))),
    ({"type": "string", "maxLength": 10**9}, TOO_MANY_NFA_STATES),
    ({"type": "string", "minLength": 1000}, Compiled(accept=('"' + "x" * 1000 + '"',),
                                                     reject=('"' + "x" * 999 + '"',))),
    ({"type": "array", "minItems": 1000}, TOO_MANY_NFA_STATES),
    ({"type": "integer", "minimum": 10**400}, Compiled(accept=("1" + "0" * 400, "2" + "0" * 400),
                                                       reject=("9" * 400, "1"))),
    ({"type": "string", "enum": ["\ud800"]}, Refused("UnsupportedSchemaError", "lone surrogate")),
    ({"const": "\udfff"}, Refused("UnsupportedSchemaError", "lone surrogate")),
    ({"properties": {"\ud800": {}}}, Refused("UnsupportedSchemaError", "lone surrogate")),
    ({"type": "integer", "minimum": float("nan")}, Refused("InvalidSchemaError", "minimum must be a finite number")),
    ({"type": "integer", "maximum": float("inf")}, Refused("InvalidSchemaError", "maximum must be a finite number")),
    ({"type": "string", "minLength": float("nan")}, Refused("InvalidSchemaError", "minLength must be a non-negative")),
    ({"type": "array", "maxItems": float("inf")}, Refused("InvalidSchemaError", "maxItems must be a non-negative")),
    ({"anyOf": [{"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(40)}}] * 3},
     Compiled(accept=("{}", '{"p0":1,"p39":2}'), reject=('{"p0":"x"}', "[]"))),
    # 400 levels are past the compiler's nesting limit: refused as unsatisfiable "within the compiler's limits"
    (_deep("array", 400), UNSATISFIABLE),
    (_deep("object", 400), UNSATISFIABLE),
    (_deep("allOf", 400), Compiled(accept=("5", "-12"), reject=('"x"', "1.5"))),
    (_deep("anyOf", 40), Compiled(accept=("5", "null"), reject=('"x"', "[]"))),
    ("\udcff", Refused("InvalidSchemaError", "not JSON text")),
    ("{", Refused("InvalidSchemaError", "not JSON text")),
    ("", Refused("InvalidSchemaError", "not JSON text")),
]

_compiler = Guarded("hostile_workers:compile_schema", timeout_s=HANG_S)
_judge = Guarded("schema_judge:judge", timeout_s=HANG_S)
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
          f"documented_errors={_stats['errors']}")
    _compiler.close()
    _judge.close()


# -- curated pathologies (one test each, so every failure is named) ------------------------------------------------

@pytest.mark.parametrize(("schema", "expected"), CURATED, ids=lambda s: repr(s)[:40])
def test_curated_hostile_schema_has_its_stated_outcome(schema: Any, expected: Refused | Compiled) -> None:
    samples = list(expected.accept + expected.reject) if isinstance(expected, Compiled) else []
    status, value = _judge((schema, samples))
    assert status == "ok", f"{status}: {value!r:.300}"  # not a hang (timeout), a dead worker or a crash
    if isinstance(expected, Refused):
        assert (value["outcome"], value.get("type")) == ("error", expected.error), value
        assert expected.names in value["message"], value["message"]
        return
    assert value["outcome"] == "grammar", value
    assert not value["unsound"], value["unsound"][:2]
    accepts = dict(zip(samples, value["accepts"]))
    assert [d for d in expected.accept if not accepts[d]] == [], "grammar rejects documents the schema accepts"
    assert [d for d in expected.reject if accepts[d]] == [], "grammar accepts documents the schema rejects"


@pytest.mark.parametrize("schema", [{"type": "integer", "minimum": float("nan")},
                                    {"type": "integer", "maximum": float("inf")},
                                    {"type": "string", "minLength": float("nan")},
                                    {"type": "array", "maxItems": float("inf")}], ids=repr)
def test_non_finite_numeric_bounds_are_an_invalid_schema_error(schema: Any) -> None:
    from constrained.errors import InvalidSchemaError
    from constrained.schema import schema_to_pattern

    with pytest.raises(InvalidSchemaError):
        schema_to_pattern(schema)


def test_a_huge_enum_is_refused_by_the_alternatives_budget() -> None:
    from constrained.errors import GrammarTooLargeError
    from constrained.schema import schema_to_pattern

    with pytest.raises(GrammarTooLargeError, match="alternatives budget"):
        schema_to_pattern({"enum": list(range(20_000))})


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
