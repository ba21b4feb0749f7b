"""Strict argument validation: every error with its path and kind, and the only way to get ValidatedArguments."""

from __future__ import annotations

import copy
import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from agent.errors import ToolDefinitionError
from agent.schema import (
    ArgumentErrors,
    ValidatedArguments,
    ValidationErrorKind as K,
    close_schema,
    render_path,
    validate_arguments,
)

CALC = {
    "type": "object",
    "properties": {
        "operation": {"type": "string", "enum": ["add", "sub", "mul", "div"]},
        "a": {"type": "number"},
        "b": {"type": "number"},
    },
    "required": ["operation", "a", "b"],
}

ORDER = {
    "type": "object",
    "properties": {
        "customer": {"type": "object", "properties": {"id": {"type": "string", "pattern": "^C[0-9]{3}$"},
                                                      "email": {"type": "string", "format": "email"}},
                     "required": ["id"]},
        "items": {"type": "array", "minItems": 1, "maxItems": 3,
                  "items": {"type": "object", "properties": {"sku": {"type": "string", "minLength": 2,
                                                                     "maxLength": 8},
                                                             "qty": {"type": "integer", "minimum": 1,
                                                                     "exclusiveMaximum": 100}},
                            "required": ["sku", "qty"]}},
        "note": {"type": ["string", "null"]},
    },
    "required": ["customer", "items"],
}


def errors_of(schema, raw, **kw):
    result = validate_arguments("t", schema, raw, **kw)
    assert isinstance(result, ArgumentErrors), f"expected errors, got {result!r}"
    assert result.errors, "ArgumentErrors is never empty"
    return [(e.path, e.kind, e.reason) for e in result.errors]


def kinds_at(schema, raw, **kw):
    return [(path, kind) for path, kind, _ in errors_of(schema, raw, **kw)]


# -- the seed's example ----------------------------------------------------------------------------------------

def test_seed_example_collects_all_three_errors_in_the_seed_wording():
    result = validate_arguments("calc", CALC, {"a": "1", "b": 2, "precision": 3})
    assert isinstance(result, ArgumentErrors)
    assert result.detail == "3 invalid arguments for tool 'calc'"  # the ok:false result: tests/agent/test_results.py
    assert [e.to_json() for e in result.errors] == [{"path": "a", "reason": "expected number, got string"},
                                                    {"path": "operation", "reason": "missing required argument"},
                                                    {"path": "precision", "reason": "unknown field"}]


# -- one test per kind ------------------------------------------------------------------------------------------

def test_missing_required():
    assert kinds_at(CALC, {"operation": "add", "a": 1}) == [("b", K.MISSING_REQUIRED)]


def test_unknown_field_is_rejected_even_when_the_schema_does_not_say_additionalProperties():
    assert "additionalProperties" not in CALC
    assert kinds_at(CALC, {"operation": "add", "a": 1, "b": 2, "precision": 3}) == [("precision", K.UNKNOWN_FIELD)]


def test_explicit_additional_properties_true_allows_free_form_keys():
    schema = {"type": "object", "properties": {"meta": {"type": "object", "additionalProperties": True}}}
    assert isinstance(validate_arguments("t", schema, {"meta": {"anything": 1}}), ValidatedArguments)


def test_bare_object_type_accepts_no_keys_because_none_are_declared():
    schema = {"type": "object", "properties": {"meta": {"type": "object"}}}
    assert kinds_at(schema, {"meta": {"k": 1}}) == [("meta.k", K.UNKNOWN_FIELD)]


def test_wrong_type_names_expected_and_actual_json_types():
    assert errors_of(CALC, {"operation": "add", "a": [1], "b": None}) == [
        ("a", K.WRONG_TYPE, "expected number, got array"), ("b", K.WRONG_TYPE, "expected number, got null")]


def test_booleans_are_not_integers_and_integers_are_not_booleans():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"},
                                               "f": {"type": "boolean"}}}
    assert errors_of(schema, {"n": True, "x": False, "f": 1}) == [
        ("f", K.WRONG_TYPE, "expected boolean, got integer"), ("n", K.WRONG_TYPE, "expected integer, got boolean"),
        ("x", K.WRONG_TYPE, "expected number, got boolean")]


def test_enum_and_const_mismatch():
    schema = {"type": "object", "properties": {"op": {"enum": ["add", "sub"]}, "v": {"const": 2}}}
    assert errors_of(schema, {"op": "mul", "v": 3}) == [
        ("op", K.ENUM_MISMATCH, 'expected one of "add", "sub", got "mul"'),
        ("v", K.ENUM_MISMATCH, "expected 2, got 3")]


def test_out_of_range_for_every_numeric_bound():
    schema = {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0}, "b": {"type": "integer", "maximum": 9},
        "c": {"type": "number", "exclusiveMinimum": 0}, "d": {"type": "number", "exclusiveMaximum": 1},
        "e": {"type": "integer", "multipleOf": 5}}}
    assert errors_of(schema, {"a": -1, "b": 10, "c": 0, "d": 1, "e": 7}) == [
        ("a", K.OUT_OF_RANGE, "must be >= 0, got -1"), ("b", K.OUT_OF_RANGE, "must be <= 9, got 10"),
        ("c", K.OUT_OF_RANGE, "must be > 0, got 0"), ("d", K.OUT_OF_RANGE, "must be < 1, got 1"),
        ("e", K.OUT_OF_RANGE, "must be a multiple of 5, got 7")]


def test_pattern_mismatch():
    schema = {"type": "object", "properties": {"from": {"type": "string", "pattern": "^[A-Z]{3}$"}}}
    assert errors_of(schema, {"from": "Madrid"}) == [("from", K.PATTERN_MISMATCH, "does not match pattern ^[A-Z]{3}$")]


@pytest.mark.parametrize(("fmt", "good", "bad"), [
    ("date", ["2026-10-03", "2024-02-29"], ["3rd October 2026", "2026-13-01", "2023-02-29", "20261003"]),
    ("time", ["14:30:00Z", "23:59:60+02:00", "08:00:00.5-05:30"], ["14:30", "24:00:00Z", "14:30:00"]),
    ("date-time", ["2026-10-03T14:30:00Z", "2026-10-03t14:30:00+01:00"], ["2026-10-03", "2026-10-03T25:00:00Z"]),
    ("email", ["a@example.com"], ["a@", "no at sign", "a@b"]),
    ("ipv4", ["192.0.2.1"], ["256.1.1.1", "01.2.3.4", "1.2.3"]),
    ("ipv6", ["::1", "2001:db8::1"], ["::g", "fe80::1%eth0"]),
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000", "xyz"]),
    ("uri", ["https://example.com/a?b=c#d", "urn:isbn:0451450523"], ["/relative/path", "http://exa mple.com"]),
])
def test_formats_are_asserted(fmt, good, bad):
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    for value in good:
        assert isinstance(validate_arguments("t", schema, {"v": value}), ValidatedArguments), value
    for value in bad:
        assert kinds_at(schema, {"v": value}) == [("v", K.PATTERN_MISMATCH)], value


def test_too_long_and_too_short_for_strings_and_arrays():
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 3},
                                               "t": {"type": "string", "maxLength": 3},
                                               "l": {"type": "array", "minItems": 1}, "m": {"maxItems": 1}}}
    assert errors_of(schema, {"s": "a", "t": "abcd", "l": [], "m": [1, 2]}) == [
        ("l", K.TOO_SHORT, "must have at least 1 items, got 0"),
        ("m", K.TOO_LONG, "must have at most 1 items, got 2"),
        ("s", K.TOO_SHORT, "must be at least 2 characters, got 1"),
        ("t", K.TOO_LONG, "must be at most 3 characters, got 4")]


def test_items_false_after_prefix_items_is_too_long():
    schema = {"type": "object", "properties": {"p": {"type": "array", "prefixItems": [{"type": "integer"}],
                                                     "items": False}}}
    assert errors_of(schema, {"p": [1, 2]}) == [("p", K.TOO_LONG, "must have at most 1 items, got 2")]


def test_string_over_the_byte_cap_is_too_long_before_schema_evaluation():
    schema = {"type": "object", "properties": {"s": {"type": "string"}}}
    assert kinds_at(schema, {"s": "é" * 600}, max_string_bytes=1000) == [("s", K.TOO_LONG)]
    assert isinstance(validate_arguments("t", schema, {"s": "é" * 500}, max_string_bytes=1000), ValidatedArguments)


def test_default_string_cap_is_one_mebibyte():
    schema = {"type": "object", "properties": {"s": {"type": "string"}}}
    assert kinds_at(schema, {"s": "x" * (1024 * 1024 + 1)}) == [("s", K.TOO_LONG)]


def test_too_many_values_is_too_long_at_the_root():
    schema = {"type": "object", "properties": {"l": {"type": "array"}}}
    assert kinds_at(schema, {"l": list(range(50))}, max_nodes=20) == [("", K.TOO_LONG)]


def test_nesting_past_max_depth_is_too_deep_at_the_deepest_allowed_path():
    schema = {"type": "object", "additionalProperties": True}
    assert kinds_at(schema, {"a": {"b": {"c": {}}}}, max_depth=3) == [("a.b.c", K.TOO_DEEP)]
    assert isinstance(validate_arguments("t", schema, {"a": {"b": {}}}, max_depth=3), ValidatedArguments)


def test_pathological_nesting_is_too_deep_without_recursion_errors():
    deep: dict = {}
    node = deep
    for _ in range(100_000):
        node["x"] = {}
        node = node["x"]
    schema = {"type": "object", "additionalProperties": True}
    assert [kind for _, kind in kinds_at(schema, deep)] == [K.TOO_DEEP]
    assert [kind for _, kind in kinds_at(schema, '{"x":' * 100_000 + "1" + "}" * 100_000)] == [K.TOO_DEEP]


def test_max_depth_outside_its_range_is_misuse():
    with pytest.raises(ValueError):
        validate_arguments("t", CALC, {}, max_depth=0)
    with pytest.raises(ValueError):
        validate_arguments("t", CALC, {}, max_depth=10_000)


def test_not_an_object():
    for raw in ([1, 2], "[1, 2]", "3", None, 3):
        assert kinds_at(CALC, raw) == [("", K.NOT_AN_OBJECT)]


@pytest.mark.parametrize("text", ['{"a": 1', '{"a": NaN}', '{"a": Infinity}', '{"a": 1, "a": 2}', "{'a': 1}"])
def test_invalid_json_text_is_other_at_the_root(text):
    assert kinds_at(CALC, text) == [("", K.OTHER)]


def test_non_finite_floats_are_rejected_in_parsed_input():
    schema = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}
    assert kinds_at(schema, {"x": float("nan"), "y": float("-inf")}) == [("x", K.WRONG_TYPE), ("y", K.WRONG_TYPE)]


def test_non_json_python_values_are_rejected():
    schema = {"type": "object", "additionalProperties": True}
    assert kinds_at(schema, {"s": {1, 2}, "k": {1: "x"}}) == [("k", K.OTHER), ("s", K.OTHER)]


def test_other_covers_unique_items_and_forbidden_properties():
    schema = {"type": "object", "properties": {"u": {"type": "array", "uniqueItems": True}, "x": False}}
    assert errors_of(schema, {"u": [1, 1], "x": 0}) == [("u", K.OTHER, "items must be unique"),
                                                       ("x", K.OTHER, "not allowed here")]


# -- collection, paths, order -------------------------------------------------------------------------------------

def test_every_error_is_collected_with_nested_paths_in_deterministic_order():
    raw = {"customer": {"id": "X1", "email": "nope", "vip": True},
           "items": [{"sku": "A", "qty": 0}, {"qty": 1.5}, {"sku": "ok", "qty": 2, "gift": 1}, {"sku": "ok", "qty": 1}],
           "note": 7}
    assert kinds_at(ORDER, raw) == [
        ("customer.email", K.PATTERN_MISMATCH),
        ("customer.id", K.PATTERN_MISMATCH),
        ("customer.vip", K.UNKNOWN_FIELD),
        ("items", K.TOO_LONG),
        ("items[0].qty", K.OUT_OF_RANGE),
        ("items[0].sku", K.TOO_SHORT),
        ("items[1].qty", K.WRONG_TYPE),
        ("items[1].sku", K.MISSING_REQUIRED),
        ("items[2].gift", K.UNKNOWN_FIELD),
        ("note", K.WRONG_TYPE),
    ]


def test_errors_are_the_same_whatever_the_key_order_of_the_input():
    raw = {"b": "x", "a": "y", "zz": 1, "operation": 5}
    reordered = dict(reversed(list(raw.items())))
    assert errors_of(CALC, raw) == errors_of(CALC, reordered)


def test_array_indices_sort_numerically():
    schema = {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "integer"}}}}
    paths = [p for p, _ in kinds_at(schema, {"l": ["x"] * 12})]
    assert paths == [f"l[{i}]" for i in range(12)]


def test_render_path_quotes_keys_that_are_not_identifiers():
    assert render_path(["items", 0, "qty"]) == "items[0].qty"
    assert render_path(["meta", "a.b", 3, "x y"]) == 'meta["a.b"][3]["x y"]'
    assert render_path(["1st"]) == '["1st"]'
    assert render_path([]) == ""


def test_optional_value_of_the_wrong_type_names_both_allowed_types():
    schema = {"type": "object", "properties": {"n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    assert errors_of(schema, {"n": "3"}) == [("n", K.WRONG_TYPE, "expected integer or null, got string")]


def test_optional_object_reports_the_errors_inside_the_branch_that_fits():
    schema = {"type": "object", "properties": {
        "m": {"anyOf": [{"type": "object", "properties": {"x": {"type": "integer"}}}, {"type": "null"}]}}}
    assert kinds_at(schema, {"m": {"x": "y", "q": 1}}) == [("m.q", K.UNKNOWN_FIELD), ("m.x", K.WRONG_TYPE)]
    assert isinstance(validate_arguments("t", schema, {"m": None}), ValidatedArguments)


def test_all_of_members_may_declare_properties_without_rejecting_each_other():
    schema = {"type": "object", "allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}
    assert isinstance(validate_arguments("t", schema, {"a": 1, "b": 2}), ValidatedArguments)
    assert kinds_at(schema, {"a": 1, "c": 3}) == [("c", K.UNKNOWN_FIELD)]


def test_refs_to_defs_are_closed_too():
    schema = {"type": "object", "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}}},
              "properties": {"p": {"$ref": "#/$defs/P"}}}
    assert kinds_at(schema, {"p": {"x": 1, "y": 2}}) == [("p.y", K.UNKNOWN_FIELD)]


def test_close_schema_does_not_mutate_its_input():
    original = json.loads(json.dumps(ORDER))
    close_schema(ORDER)
    assert ORDER == original


# -- schemas that are not schemas -----------------------------------------------------------------------------------

@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "integr"}}},
    {"type": "object", "properties": {"a": {"pattern": "("}}},
    {"type": "array"},
    ["not", "a", "dict"],
])
def test_invalid_parameters_schema_is_a_definition_error(schema):
    with pytest.raises(ToolDefinitionError) as info:
        validate_arguments("bad_tool", schema, {})
    assert info.value.name == "bad_tool"


# -- ValidatedArguments ---------------------------------------------------------------------------------------------

def valid_calc():
    result = validate_arguments("calc", CALC, {"operation": "add", "a": 1, "b": 2.5})
    assert isinstance(result, ValidatedArguments)
    return result


def test_validated_arguments_cannot_be_constructed_directly():
    with pytest.raises(TypeError):
        ValidatedArguments(object(), tool_name="calc", plain={"a": 1}, schema_sha256="0" * 64)
    with pytest.raises(TypeError):
        ValidatedArguments(tool_name="calc", plain={"a": 1}, schema_sha256="0" * 64)  # type: ignore[call-arg]


def test_validated_arguments_read_like_a_mapping():
    args = valid_calc()
    assert args.tool_name == "calc"
    assert args["a"] == 1 and args.get("missing", "d") == "d" and "b" in args
    assert sorted(args) == ["a", "b", "operation"] and len(args) == 3
    assert dict(args.values) == {"operation": "add", "a": 1, "b": 2.5}


def test_validated_arguments_are_immutable_all_the_way_down():
    args = validate_arguments("t", ORDER, {"customer": {"id": "C001"}, "items": [{"sku": "ab", "qty": 1}]})
    assert isinstance(args, ValidatedArguments)
    with pytest.raises(AttributeError):
        args.tool_name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        args._values = {}  # noqa: SLF001
    with pytest.raises(TypeError):
        args.values["customer"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        args["customer"]["id"] = "C002"
    assert isinstance(args["items"], tuple)
    with pytest.raises(TypeError):
        args["items"][0]["qty"] = 5


def test_validated_arguments_are_a_copy_the_caller_cannot_change():
    raw = {"customer": {"id": "C001"}, "items": [{"sku": "ab", "qty": 1}]}
    args = validate_arguments("t", ORDER, raw)
    raw["customer"]["id"] = "EVIL"
    raw["items"].append({"sku": "zz", "qty": 99})
    assert args["customer"]["id"] == "C001" and len(args["items"]) == 1
    mutable = args.to_dict()
    mutable["items"][0]["qty"] = 42
    assert args["items"][0]["qty"] == 1


def test_validated_arguments_hash_is_canonical_over_key_order():
    a = validate_arguments("calc", CALC, {"operation": "add", "a": 1, "b": 2})
    b = validate_arguments("calc", CALC, '{"b": 2, "a": 1, "operation": "add"}')
    assert a == b and a.sha256 == b.sha256 and a.to_json() == '{"a":1,"b":2,"operation":"add"}'


def test_validated_arguments_cannot_be_pickled_and_copies_are_the_same_object():
    args = valid_calc()
    assert copy.copy(args) is args and copy.deepcopy(args) is args
    with pytest.raises(TypeError):
        pickle.dumps(args)


def test_validated_arguments_are_truthy_even_when_empty():
    args = validate_arguments("t", {"type": "object", "properties": {}}, {})
    assert isinstance(args, ValidatedArguments) and len(args) == 0 and bool(args)


# -- validate_arguments agrees with jsonschema under the strict rule -------------------------------------------------

NAMES = ["a", "b", "c"]


def leaf_schemas():
    return st.one_of(
        st.fixed_dictionaries({"type": st.just("integer")},
                              optional={"minimum": st.integers(-3, 3), "maximum": st.integers(-3, 3)}),
        st.fixed_dictionaries({"type": st.just("number")}, optional={"exclusiveMaximum": st.integers(-3, 3)}),
        st.fixed_dictionaries({"type": st.just("string")},
                              optional={"maxLength": st.integers(0, 3), "pattern": st.just("^[ab]*$")}),
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
        st.just({"enum": ["a", 1, None]}),
        st.just({"type": ["integer", "null"]}),
    )


def object_schemas(children):
    return st.lists(st.sampled_from(NAMES), unique=True, max_size=3).flatmap(
        lambda names: st.tuples(st.just(names), st.lists(children, min_size=len(names), max_size=len(names)),
                                st.lists(st.sampled_from(names), unique=True) if names else st.just([]))
    ).map(lambda t: {"type": "object", "properties": dict(zip(t[0], t[1])), "required": t[2]})


schemas = st.recursive(
    leaf_schemas(),
    lambda children: st.one_of(
        object_schemas(children),
        st.fixed_dictionaries({"type": st.just("array"), "items": children},
                              optional={"maxItems": st.integers(0, 2)})),
    max_leaves=6,
)
root_schemas = object_schemas(schemas)

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-4, 4),
              st.floats(-4, 4, allow_nan=False, allow_infinity=False), st.text("abc", max_size=4)),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.sampled_from(NAMES + ["zz"]), children, max_size=3)),
    max_leaves=8,
)


def instances_for(schema):
    """Mostly-valid instances, so both outcomes are exercised."""
    t = schema.get("type")
    if t == "object":
        props = schema["properties"]
        return st.fixed_dictionaries(
            {k: instances_for(v) for k, v in props.items() if k in schema["required"]},
            optional={**{k: instances_for(v) for k, v in props.items() if k not in schema["required"]},
                      "zz": json_values})
    if t == "array":
        return st.lists(instances_for(schema["items"]), max_size=3)
    return json_values


def strictly_closed(schema):
    """The oracle's own reading of the rule: every object schema gets additionalProperties false."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items()}
    if "properties" in out:
        out["properties"] = {k: strictly_closed(v) for k, v in out["properties"].items()}
    if "items" in out:
        out["items"] = strictly_closed(out["items"])
    if out.get("type") == "object":
        out["additionalProperties"] = False
    return out


@settings(max_examples=300, deadline=None)
@given(data=st.data(), schema=root_schemas)
def test_accepts_exactly_what_jsonschema_accepts_with_unknown_fields_closed(data, schema):
    instance = data.draw(st.one_of(instances_for(schema), json_values))
    oracle = Draft202012Validator(strictly_closed(schema)).is_valid(instance)
    result = validate_arguments("t", schema, instance)
    assert isinstance(result, ValidatedArguments) == oracle, (schema, instance, result)
    from_text = validate_arguments("t", schema, json.dumps(instance))
    assert isinstance(from_text, ValidatedArguments) == oracle
    if isinstance(result, ValidatedArguments):
        assert json.loads(result.to_json()) == instance and from_text.sha256 == result.sha256


# -- the one validator decides exactly what jsonschema's reference validator decides, keyword by keyword ---------

from agent.schema import (  # noqa: E402
    FORMAT_CHECKER,
    CompiledParameters,
    canonical_json,
    compile_parameters,
)

FAST_NAMES = ["a", "b", "c", "d"]
fast_numbers = st.one_of(st.integers(-3, 3), st.floats(-3, 3, allow_nan=False).map(lambda f: round(f, 1)))
fast_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-4, 4), st.floats(-4, 4, allow_nan=False),
              st.just(2.0), st.just(10**30), st.text("ab\u00e9", max_size=4),
              st.sampled_from(["2024-02-29", "2023-02-29", "x@y.io", "a", "ab", "", "12:00:00Z"])),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.sampled_from(FAST_NAMES + ["zz", "Ab"]), children, max_size=3)),
    max_leaves=8,
)


def fast_leaves():
    return st.one_of(
        st.fixed_dictionaries({}, optional={
            "type": st.one_of(st.sampled_from(["integer", "number", "string", "boolean", "null", "array", "object"]),
                              st.lists(st.sampled_from(["integer", "string", "null", "number"]), min_size=1,
                                       max_size=2, unique=True)),
            "minimum": fast_numbers, "maximum": fast_numbers, "exclusiveMinimum": fast_numbers,
            "exclusiveMaximum": fast_numbers, "minLength": st.integers(0, 2), "maxLength": st.integers(0, 3),
            "pattern": st.sampled_from(["^a", "b$", "é"]), "format": st.sampled_from(["date", "email", "time", "x"]),
            "description": st.just("annotation"), "minItems": st.integers(0, 2), "maxItems": st.integers(0, 2),
            "uniqueItems": st.booleans(), "minProperties": st.integers(0, 2), "maxProperties": st.integers(0, 2)}),
        st.builds(lambda values: {"enum": values}, st.lists(fast_json, min_size=1, max_size=3)),
        st.builds(lambda values: {"enum": values}, st.lists(st.text("ab", max_size=2), min_size=1, max_size=3)),
        st.builds(lambda value: {"const": value}, fast_json),
        st.sampled_from([True, False, {}, {"$ref": "#/$defs/leaf"}, {"$comment": "c", "type": "integer"}]),
    )


def fast_composites(children):
    props = st.dictionaries(st.sampled_from(FAST_NAMES), children, max_size=3)
    return st.one_of(
        st.builds(lambda p, req, extra, closing: {"type": "object", "properties": p, "required": req, **extra,
                                                  **closing},
                  props, st.lists(st.sampled_from(FAST_NAMES), unique=True, max_size=2),
                  st.fixed_dictionaries({}, optional={
                      "dependentRequired": st.just({"a": ["b"]}),
                      "propertyNames": st.just({"maxLength": 1})}),
                  st.sampled_from([{}, {"additionalProperties": False}, {"additionalProperties": True},
                                   {"additionalProperties": {"type": "integer"}}, {"unevaluatedProperties": False},
                                   {"unevaluatedProperties": {"type": "string"}}])),
        st.builds(lambda item, extra: {"type": "array", "items": item, **extra}, children,
                  st.fixed_dictionaries({}, optional={"maxItems": st.integers(0, 2), "uniqueItems": st.booleans()})),
        st.builds(lambda key, members: {key: members}, st.sampled_from(["allOf", "anyOf", "oneOf"]),
                  st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda inner: {"not": inner}, children),
        st.builds(lambda c, t, e: {"if": c, "then": t, "else": e}, children, children, children),
        st.builds(lambda c, t: {"if": c, "then": t}, children, children),
    )


fast_schemas = st.recursive(fast_leaves(), fast_composites, max_leaves=6)
wrapped_roots = st.builds(
    lambda body, leaf: {"type": "object", "properties": {"v": body}, "required": ["v"], "$defs": {"leaf": leaf}},
    fast_schemas, st.sampled_from([{"type": "integer", "maximum": 2}, {"type": "string"}]))


@settings(max_examples=600, deadline=None)
@given(data=st.data(), schema=wrapped_roots)
def test_every_keyword_decides_as_the_reference_validator_over_the_closed_schema(data, schema):
    """Validity under every keyword combination drawn here (in-place applicators, $ref, if/then/else, formats,
    patterns, unevaluatedProperties…) is jsonschema's Draft 2020-12 reading of the closed schema."""
    oracle = Draft202012Validator(close_schema(schema), format_checker=FORMAT_CHECKER)
    for value in data.draw(st.lists(fast_json, min_size=1, max_size=4)):
        instance = {"v": value}
        result = validate_arguments("t", schema, instance)
        assert isinstance(result, ValidatedArguments) == oracle.is_valid(instance), (schema, instance, result)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), schema=root_schemas)
def test_compiled_parameters_validate_exactly_as_the_schema_does(data, schema):
    compiled = compile_parameters("t", schema)
    assert isinstance(compiled, CompiledParameters)
    instance = data.draw(st.one_of(instances_for(schema), json_values))
    from_schema, from_compiled = validate_arguments("t", schema, instance), validate_arguments("t", compiled, instance)
    assert type(from_schema) is type(from_compiled)
    if isinstance(from_schema, ValidatedArguments):
        assert from_schema == from_compiled and from_compiled.schema_sha256 == compiled.schema_sha256
        assert from_compiled.to_json() == canonical_json(instance)
    else:
        assert from_schema.errors == from_compiled.errors


def test_compiled_parameters_collect_every_error():
    compiled = compile_parameters("t", ORDER)
    assert kinds_at(compiled, {"customer": {"id": "X"}, "items": [{"sku": "a", "qty": 0}], "zz": 1}) == [
        ("customer.id", K.PATTERN_MISMATCH), ("items[0].qty", K.OUT_OF_RANGE), ("items[0].sku", K.TOO_SHORT),
        ("zz", K.UNKNOWN_FIELD)]
