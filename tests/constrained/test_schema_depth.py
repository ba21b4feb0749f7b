"""Schema depth: deep schemas compile into working grammars up to `MAX_SCHEMA_DEPTH`, and past it are refused with
an `UnsupportedSchemaError` naming the limit and the pointer where it was crossed (never a `RecursionError`).
The 300/1,000/10,000 matrix across every front end is tests/hostile/test_hostile_depth.py."""

from __future__ import annotations

import sys
from typing import Any

import pytest

import constrained
from constrained.errors import UnsupportedSchemaError
from constrained.schema import schema_to_pattern, schema_to_rules
from constrained.schema_depth import MAX_SCHEMA_DEPTH, check_schema_depth, recursion_room
from constrained.vocabulary import Vocabulary


def _objects(levels: int) -> tuple[dict[str, Any], bytes]:
    schema: dict[str, Any] = {"type": "integer"}
    doc = "42"
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
        doc = '{"a":' + doc + "}"
    return schema, doc.encode()


def _arrays(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


def _feed(matcher: Any, vocab: Vocabulary, doc: bytes) -> bool:
    """Advance through ``doc`` with real tokens: at each point the longest token the matcher allows that spells
    the next bytes (shorter ones when it refuses)."""
    by_bytes = {token: i for i, token in enumerate(vocab.tokens) if i in vocab.normal_ids and token}
    longest = max(len(token) for token in by_bytes)
    at = 0
    while at < len(doc):
        for size in range(min(longest, len(doc) - at), 0, -1):
            token_id = by_bytes.get(doc[at:at + size])
            if token_id is not None and matcher.advance(token_id):
                at += size
                break
        else:
            return False
    return True


def test_a_300_level_object_schema_compiles_and_its_instance_goes_through_the_matcher(
        qwen2_vocab: Vocabulary) -> None:
    schema, doc = _objects(300)  # issue #44: a RecursionError in schema_to_rules
    grammar = constrained.compile_json_schema(schema, qwen2_vocab)
    matcher = grammar.matcher()
    assert _feed(matcher, qwen2_vocab, doc)
    assert matcher.is_accepting()
    assert set(qwen2_vocab.eos_token_ids) & set(matcher.allowed_token_ids().tolist())
    cut = grammar.matcher()
    assert _feed(cut, qwen2_vocab, doc[:-1]) and not cut.is_accepting()
    assert not grammar.accepts(doc.replace(b"42", b'"x"'))


def test_a_schema_exactly_max_schema_depth_deep_compiles_and_one_more_level_is_refused() -> None:
    deepest = _arrays(MAX_SCHEMA_DEPTH - 1)  # the integer schema is the last of MAX_SCHEMA_DEPTH containers
    rules, start = schema_to_rules(deepest)
    assert start in rules
    with pytest.raises(UnsupportedSchemaError) as info:
        schema_to_rules(_arrays(MAX_SCHEMA_DEPTH))
    assert info.value.path == "#" + "/items" * MAX_SCHEMA_DEPTH
    assert info.value.keyword == "items"
    assert f"deeper than MAX_SCHEMA_DEPTH = {MAX_SCHEMA_DEPTH:,} containers" in str(info.value)


_BYTES = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"</s>"], eos_token_ids=[256],
                                special_ids_by_name={"</s>": 256}, normal_ids=range(256), name="bytes")
ENTRIES = {"schema_to_pattern": schema_to_pattern, "schema_to_rules": schema_to_rules,
           "compile_json_schema": lambda schema: constrained.compile_json_schema(schema, _BYTES)}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_a_10000_level_schema_is_refused_before_any_recursive_walk(entry: str) -> None:
    schema, _ = _objects(10_000)  # compile_json_schema's first step was json.dumps of it: a RecursionError
    with pytest.raises(UnsupportedSchemaError) as info:
        ENTRIES[entry](schema)
    assert info.value.keyword == "properties"
    assert info.value.path.startswith("#/properties/a/properties/a/")
    assert info.value.path.count("/") == MAX_SCHEMA_DEPTH


def test_schema_text_deeper_than_the_limit_is_refused_before_it_is_parsed() -> None:
    text = '{"type":"array","items":' * 5_000 + "{}" + "}" * 5_000
    with pytest.raises(UnsupportedSchemaError, match=r"containers \(JSON text, at character [\d,]+\)") as info:
        schema_to_rules(text)
    assert info.value.path == "#"
    check_schema_depth('{"enum":["' + "[{\\\"[{" * 5_000 + '"]}')  # brackets inside strings do not count


def test_a_ref_chain_past_the_limit_is_refused_at_the_definition_where_it_crossed() -> None:
    defs = {f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}} for i in range(3_000)}
    defs["d3000"] = {"type": "integer"}
    with pytest.raises(UnsupportedSchemaError, match=r"\$ref hops included") as info:
        schema_to_rules({"$defs": defs, "$ref": "#/$defs/d0"})
    assert info.value.keyword == "$ref"
    assert info.value.path.startswith("#/$defs/d")


def test_a_schema_that_contains_itself_is_refused_as_too_deep_not_a_hang() -> None:
    schema: dict[str, Any] = {"type": "object"}
    schema["properties"] = {"a": schema}
    with pytest.raises(UnsupportedSchemaError, match="MAX_SCHEMA_DEPTH"):
        check_schema_depth(schema)


def test_the_recursion_limit_is_restored_after_a_compile_and_after_a_refusal() -> None:
    before = sys.getrecursionlimit()
    schema_to_rules(_arrays(500))
    assert sys.getrecursionlimit() == before
    defs = {f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}} for i in range(2_000)}
    for schema in (_arrays(2_000), {"$defs": defs, "$ref": "#/$defs/d0"}):  # refused up front, and mid-compile
        with pytest.raises(UnsupportedSchemaError, match="MAX_SCHEMA_DEPTH"):
            schema_to_rules(schema)
        assert sys.getrecursionlimit() == before


def test_overlapping_rooms_keep_the_limit_raised_until_the_last_one_leaves() -> None:
    before = sys.getrecursionlimit()
    first, second = recursion_room(), recursion_room()
    first.__enter__()
    raised = sys.getrecursionlimit()
    assert raised > before + 8 * MAX_SCHEMA_DEPTH
    second.__enter__()
    first.__exit__(None, None, None)  # another compile is still running: the room stays
    assert sys.getrecursionlimit() >= raised
    second.__exit__(None, None, None)
    assert sys.getrecursionlimit() == before
