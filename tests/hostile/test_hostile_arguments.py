"""Hostile arguments: `validate_arguments` answers every raw value with ValidatedArguments or ArgumentErrors.

Wrong types everywhere, depth bombs (as text and as objects), 10 MB strings, huge integers, NaN, non-string keys,
lone surrogates, duplicate keys, non-UTF-8 bytes, non-JSON Python objects. Never an exception (for a valid tool
schema); every error has a path, a reason and a kind; and what validates really satisfies the schema.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.results import ResultErrorKind, error_result
from agent.schema import ArgumentErrors, ValidatedArguments, ValidationErrorKind, validate_arguments
from .hostile_kit import budget

SCHEMAS: dict[str, dict[str, Any]] = {
    "add": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
    "search": {"type": "object", "properties": {
        "q": {"type": "string", "minLength": 1, "maxLength": 200},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 5},
        "when": {"type": "string", "format": "date"},
        "filter": {"type": "object", "properties": {"field": {"type": "string"}, "value": {}}}},
        "required": ["q"]},
    "write_artifact": {"type": "object", "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"},
        "content": {"type": "string", "maxLength": 65536}}, "required": ["name", "content"],
        "additionalProperties": False},
    "open": {"type": "object", "additionalProperties": True},
    "choice": {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "string",
                                                                                    "format": "uuid"}]},
                                                "o": {"oneOf": [{"const": 1}, {"const": "1"}]}}},
    "nested": {"type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}},
               "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array",
                                                                            "items": {"$ref": "#/$defs/node"}}}}}},
}


class Weird:
    def __repr__(self) -> str:
        raise RuntimeError("repr bomb")


def _nest(depth: int, leaf: Any = 1, kind: str = "list") -> Any:
    for _ in range(depth):
        leaf = [leaf] if kind == "list" else {"kids": [leaf]} if kind == "tree" else {"a": leaf}
    return leaf


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(2**5000), 2**5000), st.floats(),
                    st.text(), st.sampled_from(["\ud800", "x\udfffy", "\x00", "2024-02-30", "é" * 1000]),
                    st.binary(max_size=4), st.builds(object), st.just({1, 2}), st.just(float("nan")))
VALUES = st.recursive(SCALARS, lambda c: st.one_of(
    st.lists(c, max_size=5), st.tuples(c, c),
    st.dictionaries(st.one_of(st.sampled_from(["a", "b", "q", "limit", "tags", "name", "content", "tree", "kids",
                                               "v", "o", "\ud800"]), st.text(max_size=5)), c, max_size=5),
    st.dictionaries(st.one_of(st.integers(), st.none(), st.booleans()), c, max_size=2)), max_leaves=20)
TEXTS = st.one_of(st.text(max_size=60), VALUES.map(lambda v: json.dumps(v, default=str)),
                  st.binary(max_size=30), st.sampled_from(['{"a":1,"a":2}', '{"a":NaN}', '{"a":Infinity}',
                                                           '{"a":1e999}', "[" * 100_000, '{"a":' * 50_000,
                                                           '{"a":' + "9" * 5000 + "}", "\ufeff{}", '{"q":"\\ud800"}']))
RAWS = st.one_of(VALUES, TEXTS)


def check(tool: str, raw: Any) -> ValidatedArguments | ArgumentErrors:
    out = validate_arguments(tool, SCHEMAS[tool], raw)
    assert isinstance(out, (ValidatedArguments, ArgumentErrors)), type(out)
    if isinstance(out, ArgumentErrors):
        assert out.errors
        for e in out.errors:
            assert isinstance(e.path, str) and isinstance(e.reason, str) and e.reason
            assert isinstance(e.kind, ValidationErrorKind)
        json.dumps(error_result(ResultErrorKind.INVALID_ARGUMENTS, out.detail, out.errors))  # always reinjectable
    else:
        plain = json.loads(out.to_json())
        assert jsonschema.Draft202012Validator(SCHEMAS[tool]).is_valid(plain)
    return out


TOOLS = st.sampled_from(sorted(SCHEMAS))


@budget(ci=300)
@given(tool=TOOLS, raw=RAWS)
def test_any_raw_arguments_validate_or_yield_argument_errors(tool: str, raw: Any) -> None:
    check(tool, raw)


@budget(ci=200)
@given(tool=TOOLS, arguments=st.dictionaries(st.sampled_from(["a", "b", "q", "limit", "tags", "when", "filter", "name",
                                                              "content", "tree", "v", "o", "zz"]), VALUES, max_size=6))
def test_wrong_types_in_every_field_are_argument_errors(tool: str, arguments: dict[str, Any]) -> None:
    check(tool, arguments)


BOMBS = {
    "list_depth_bomb_object": _nest(5000),
    "dict_depth_bomb_object": _nest(5000, kind="dict"),
    "tree_depth_bomb": {"tree": _nest(300, {}, kind="tree")},
    "text_depth_bomb": "[" * 1_000_000,
    "text_object_bomb": '{"a":' * 1_000_000,
    "string_10MB": {"q": "x" * (10 << 20)},
    "string_10MB_multibyte": {"content": "é" * (5 << 20), "name": "a"},
    "key_10MB": {"k" * (10 << 20): 1},
    "text_10MB": json.dumps({"q": "x" * (10 << 20)}),
    "bytes_10MB": b'{"q":"' + b"x" * (10 << 20) + b'"}',
    "many_nodes": {"tags": list(range(500_000))},
    "wide_object": {f"k{i}": i for i in range(200_000)},
    "huge_int": {"limit": 2**100_000},
    "non_utf8": b'{"q":"\xff\xfe"}',
    "surrogate_key": {"\ud800": 1},
    "repr_bomb_value": {"q": Weird()},
    "repr_bomb_key": {Weird(): 1},
    "self_reference": (lambda d: (d.__setitem__("a", d), d)[1])({}),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
@pytest.mark.parametrize("tool", ["search", "open", "nested"])
def test_bombs_are_argument_errors_not_exceptions(tool: str, name: str) -> None:
    out = check(tool, BOMBS[name])
    if name != "many_nodes" or tool != "open":
        assert isinstance(out, ArgumentErrors), name


def test_a_key_whose_repr_raises_is_an_argument_error() -> None:
    out = check("open", BOMBS["repr_bomb_key"])
    assert isinstance(out, ArgumentErrors)
    assert any("is not a string" in e.reason for e in out.errors)


@pytest.mark.slow
@budget(ci=300, fuzz=5000)
@given(tool=TOOLS, raw=RAWS)
def test_any_raw_arguments_validate_or_yield_argument_errors_fuzz(tool: str, raw: Any) -> None:
    check(tool, raw)
