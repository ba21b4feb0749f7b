"""validate_arguments against jsonschema's reference Draft 2020-12 validator, on real tool schemas.

The schemas: the tool schemas of the tests (`test_schema`, the hostile argument suite, the orchestration benchmark's
tools) and an evenly spaced sample of the BFCL dev split's tool parameters (``shared/corpus/bfcl-dev/cases.jsonl``,
one ``{"id", "messages", "tools"}`` per line, tools in OpenAI format; skipped where the corpus is not present).
For each, instances are drawn that are mostly valid, then perturbed (a value of another type, a missing required
field, an unknown field, an enum miss, a bad format). The oracle is the reference validator over the closed schema
(`close_schema`: the strict rule, nothing else) with the same format checkers; it must accept exactly what we
accept, and the places it reports errors must be the places we report them (a missing or unknown field at the
field's own path; ``anyOf``/``oneOf`` alternatives may be reported inside the alternative that fits).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from agent.schema import (FORMAT_CHECKER, ArgumentErrors, ValidatedArguments, ValidationErrorKind, close_schema,
                          render_path, validate_arguments)

from ..hostile.test_hostile_arguments import SCHEMAS as HOSTILE_SCHEMAS
from .test_schema import CALC, ORDER

BFCL_CASES = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "bfcl-dev" / "cases.jsonl"
BFCL_SAMPLE = 60
"""Tool parameter schemas taken from the corpus, evenly spaced over its unique schemas."""

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "date"],
           "properties": {"city": {"type": "string"}, "date": {"type": "string"}}}
FLIGHT = {"type": "object", "additionalProperties": False, "required": ["city", "date", "passengers", "cabin"],
          "properties": {"city": {"type": "string"}, "date": {"type": "string"}, "passengers": {"type": "integer"},
                         "cabin": {"type": "string", "enum": ["economy", "premium_economy", "business", "first"]}}}


def _bfcl_schemas() -> list[tuple[str, dict[str, Any]]]:
    if not BFCL_CASES.exists():
        return []
    unique: dict[str, tuple[str, dict[str, Any]]] = {}
    for line in BFCL_CASES.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        for tool in case["tools"]:
            function = tool["function"]
            unique.setdefault(json.dumps(function["parameters"], sort_keys=True),
                              (f"bfcl:{function['name']}", function["parameters"]))
    schemas = list(unique.values())
    step = max(1, len(schemas) // BFCL_SAMPLE)
    return schemas[::step][:BFCL_SAMPLE]


TOOL_SCHEMAS: list[tuple[str, dict[str, Any]]] = [
    ("calc", CALC), ("order", ORDER), ("get_weather", WEATHER), ("book_flight", FLIGHT),
    *((f"hostile:{name}", schema) for name, schema in HOSTILE_SCHEMAS.items()),
    *_bfcl_schemas(),
]

# -- instances: mostly valid, then perturbed ---------------------------------------------------------------------

_ANY = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-5, 5, allow_nan=False),
                              st.just(10**30), st.text("aZé0-", max_size=4)),
                    lambda c: st.one_of(st.lists(c, max_size=2), st.dictionaries(st.text("abz", max_size=2), c,
                                                                                 max_size=2)), max_leaves=4)
_FORMAT_SAMPLES = {"date": ["2024-02-29", "2023-02-29", "03/14/2025"], "time": ["14:30:00Z", "14:30"],
                   "date-time": ["2026-10-03T14:30:00Z", "2026-10-03"], "email": ["a@example.com", "a@"],
                   "uuid": ["123e4567-e89b-12d3-a456-426614174000", "xyz"], "uri": ["https://e.x/a", "/rel"],
                   "ipv4": ["192.0.2.1", "256.1.1.1"], "ipv6": ["::1", "::g"]}


def _resolve(root: dict[str, Any], schema: Any) -> Any:
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
        node: Any = root
        for part in schema["$ref"][2:].split("/"):
            node = node[part]
        return node
    return schema


def _instances(root: dict[str, Any], schema: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    schema = _resolve(root, schema)
    if not isinstance(schema, dict) or depth > 3:
        return _ANY
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), _ANY) if schema["enum"] else _ANY
    if "const" in schema:
        return st.one_of(st.just(schema["const"]), _ANY)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of(*(_instances(root, member, depth + 1) for member in schema[key]), _ANY)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = [k for k in schema.get("required", []) if k in props]
        return st.fixed_dictionaries(
            {k: _instances(root, props[k], depth + 1) for k in required},
            optional={**{k: _instances(root, v, depth + 1) for k, v in props.items() if k not in required},
                      "zz_unknown": _ANY})
    if kind == "array":
        return st.lists(_instances(root, schema.get("items", {}), depth + 1), max_size=3)
    if kind == "string":
        samples = _FORMAT_SAMPLES.get(schema.get("format"), [])
        return st.one_of(st.text("abcXYZ019 .-_é", min_size=0, max_size=8), *(st.sampled_from(samples) for _ in
                                                                              samples[:1]), _ANY)
    if kind == "integer":
        return st.one_of(st.integers(-3, 120), st.just(2.0), _ANY)
    if kind == "number":
        return st.one_of(st.integers(-3, 120), st.floats(-1e3, 1e3, allow_nan=False), _ANY)
    if kind == "boolean":
        return st.one_of(st.booleans(), _ANY)
    return _ANY


@st.composite
def _cases(draw: st.DrawFn) -> tuple[str, dict[str, Any], Any]:
    name, schema = draw(st.sampled_from(TOOL_SCHEMAS))
    instance = draw(_instances(schema, schema))
    if isinstance(instance, dict) and instance and draw(st.booleans()):  # drop one field (maybe a required one)
        instance.pop(draw(st.sampled_from(sorted(instance))))
    return name, schema, instance


# -- the oracle's error locations, from the reference validator's public error fields -----------------------------

_IN_PLACE = ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas")


def _oracle_locations(schema: dict[str, Any], instance: Any) -> set[tuple[Any, ...]]:
    out: set[tuple[Any, ...]] = set()
    for error in Draft202012Validator(close_schema(schema), format_checker=FORMAT_CHECKER).iter_errors(instance):
        path = tuple(error.absolute_path)
        here = error.schema if isinstance(error.schema, dict) else {}
        if error.validator == "required":
            out |= {path + (p,) for p in error.validator_value if p not in error.instance}
        elif error.validator in ("additionalProperties", "unevaluatedProperties") and error.validator_value is False:
            if error.validator == "unevaluatedProperties" and any(k in here for k in _IN_PLACE):
                out.add(("<unevaluated>",) + path)  # which keys were evaluated is not public: compared by prefix
                continue
            patterns = list(here.get("patternProperties", {}))
            out |= {path + (k,) for k in error.instance
                    if k not in here.get("properties", {}) and not any(re.search(p, k) for p in patterns)}
        else:
            out.add(path)
    return out


def _matches(ours: set[tuple[Any, ...]], oracle: set[tuple[Any, ...]]) -> bool:
    """Equal, except that an alternative's or an unevaluated key's error may sit below the oracle's location."""
    def covered(path: tuple[Any, ...], by: set[tuple[Any, ...]]) -> bool:
        return any(path[:len(o)] == o or (o and o[0] == "<unevaluated>" and path[:len(o) - 1] == o[1:]) for o in by)

    return all(covered(p, oracle) for p in ours) and all(
        any(p[:len(o)] == o or (o and o[0] == "<unevaluated>" and p[:len(o) - 1] == o[1:]) for p in ours)
        for o in oracle)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_cases())
def test_we_accept_exactly_what_the_reference_validator_accepts_and_report_the_same_places(case):
    name, schema, instance = case
    oracle = _oracle_locations(schema, instance)
    result = validate_arguments(name, schema, instance)
    if not oracle:
        assert isinstance(result, ValidatedArguments), (name, instance, result)
        return
    assert isinstance(result, ArgumentErrors), (name, instance, oracle)
    ours = {e.path for e in result.errors}
    rendered = {render_path(o) if not (o and o[0] == "<unevaluated>") else None for o in oracle}
    if not any(k in json.dumps(schema) for k in ('"anyOf"', '"oneOf"', '"allOf"', '"$ref"', '"if"')):
        assert ours == rendered, (name, instance, ours, rendered)
    else:
        parts = {tuple(_parts(e)) for e in result.errors}
        assert _matches(parts, oracle), (name, instance, ours, oracle)


def _parts(error: Any) -> list[Any]:
    """An error's path back in parts (our paths render keys that are identifiers bare, others JSON-quoted)."""
    out: list[Any] = []
    for m in re.finditer(r'\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]|\.?([A-Za-z_][A-Za-z0-9_]*)', error.path):
        out.append(int(m.group(1)) if m.group(1) else json.loads(m.group(2)) if m.group(2) else m.group(3))
    return out


def test_the_schema_sample_holds_the_bfcl_corpus_where_it_is_present():
    names = [name for name, _ in TOOL_SCHEMAS]
    assert len([n for n in names if n.startswith("hostile:")]) == len(HOSTILE_SCHEMAS)
    if BFCL_CASES.exists():
        assert len([n for n in names if n.startswith("bfcl:")]) == BFCL_SAMPLE


@pytest.mark.parametrize(("schema", "instance", "expected"), [
    (CALC, {"operation": "pow", "a": "1", "zz": 0}, [("a", ValidationErrorKind.WRONG_TYPE),
                                                    ("b", ValidationErrorKind.MISSING_REQUIRED),
                                                    ("operation", ValidationErrorKind.ENUM_MISMATCH),
                                                    ("zz", ValidationErrorKind.UNKNOWN_FIELD)]),
    (FLIGHT, {"city": "Paris", "date": "d", "passengers": 2.5, "cabin": "sofa"},
     [("cabin", ValidationErrorKind.ENUM_MISMATCH), ("passengers", ValidationErrorKind.WRONG_TYPE)]),
])
def test_error_kinds_on_the_benchmark_and_seed_tools(schema, instance, expected):
    result = validate_arguments("t", schema, instance)
    assert isinstance(result, ArgumentErrors)
    assert [(e.path, e.kind) for e in result.errors] == expected
