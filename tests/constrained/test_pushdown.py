"""Pushdown grammars (constrained.pushdown) on real vocabularies: masks agree with the byte-level definition,
what the grammar generates validates, what the schema allows is accepted, recursion is exact at depth 50,
budgets close, and rule sets that cannot be grammars are refused."""

from __future__ import annotations

import itertools
import json
import random

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained import compile_json_schema
from constrained.errors import BudgetTooSmallError
from constrained.grammar import clear_memory_cache, compile_rules
from constrained import pushdown
from constrained.matcher import PushdownMatcher
from constrained.pushdown import PushdownGrammar
from constrained.rules import call

TREE = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "children": {"type": "array", "items": {"$ref": "#"}}},
    "required": ["name"],
    "additionalProperties": False,
}

JSON_RULES = {
    "value": f'(?:{call("object")}|{call("array")}|"[a-z]*"|-?(?:0|[1-9][0-9]*)|true|false|null)',
    "object": rf'\{{(?:"[a-z]*":{call("value")}(?:,"[a-z]*":{call("value")})*)?\}}',
    "array": rf'\[(?:{call("value")}(?:,{call("value")})*)?\]',
}


def _viable(grammar: PushdownGrammar, configs, data: bytes) -> bool:
    """The byte-level definition: every byte of ``data`` has a move (a pure-Python walk of the same table)."""
    for byte in data:
        configs = grammar.step(configs, byte)
        if not configs:
            return False
    return True


def _structural_ids(vocab) -> list[int]:
    """Normal tokens holding a byte where rules call or return: the ones a wrong exit would get wrong."""
    marks = set(b'{}[],:"')
    normal = vocab.normal_ids if vocab.normal_ids is not None else range(len(vocab.tokens))
    return [i for i in normal if vocab.tokens[i] and marks & set(vocab.tokens[i]) and i not in vocab.eos_token_ids]


def _check_mask(matcher: PushdownMatcher, vocab, sample: list[int]) -> None:
    """The unbudgeted mask equals the definition on ``sample``; the budgeted one is a subset of it."""
    grammar = matcher.grammar
    allowed = set(grammar.mask(matcher.configurations).combined.allowed.tolist())
    assert set(matcher.allowed_token_ids().tolist()) <= allowed
    for token_id in sample:
        expected = _viable(grammar, matcher.configurations, vocab.tokens[token_id])
        assert (token_id in allowed) == expected, (vocab.tokens[token_id], matcher)


OPEN = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}, "~x": {"type": "null"}},
}
"""Extra properties allowed (implicit), their values any JSON: key strings that must not spell a known name (the
shortcut's string-like states) right before calls of the any-value rule; "~x" makes a first byte where the key
state and the free string body disagree, below which tokens such as ``~":"`` cross into a call."""


def _checked_random_document(grammar: PushdownGrammar, vocab, max_tokens: int, seed: int, marks: bytes
                             ) -> tuple[bytes, PushdownMatcher]:
    """A random document under ``max_tokens``, preferring tokens holding one of ``marks``: every mask is checked
    against the definition on the structural tokens and a sample, and none is empty before the end."""
    structural = _structural_ids(vocab)
    normal = [t for t in vocab.normal_ids if t not in vocab.eos_token_ids and vocab.tokens[t]]
    rng = random.Random(seed)
    matcher = grammar.matcher(max_tokens=max_tokens)
    text = b""
    while not matcher.is_terminated():
        _check_mask(matcher, vocab, structural + rng.sample(normal, 300))
        allowed = matcher.allowed_token_ids().tolist()
        assert allowed, "a live matcher never offers an empty mask"
        preferred = [t for t in allowed if set(vocab.tokens[t]) & set(marks)]
        token_id = rng.choice(preferred if preferred and rng.random() < 0.6 else allowed)
        assert matcher.advance(token_id)
        if token_id in vocab.eos_token_ids:
            break
        text += vocab.tokens[token_id]
    return text, matcher


def _grammar(name: str, vocab) -> PushdownGrammar:
    grammar = compile_rules(JSON_RULES, "value", vocab) if name == "json" else \
        compile_json_schema(OPEN, vocab, whitespace="flexible")  # fmt: skip
    assert isinstance(grammar, PushdownGrammar)
    return grammar


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", ["json", "open-object"])
def test_masks_equal_the_byte_level_definition_along_random_documents(llama3_vocab, name, seed):
    grammar = _grammar(name, llama3_vocab)
    text, matcher = _checked_random_document(grammar, llama3_vocab, 60, seed, b'[{}]"')  # deep documents, many exits
    document = json.loads(text)  # budget-aware closing: always a complete document
    assert matcher.tokens_consumed <= 60 and grammar.accepts(text)
    if name == "open-object":
        jsonschema.validate(document, OPEN)



@pytest.mark.parametrize("max_tokens", [None, 64])
@pytest.mark.parametrize(("name", "document"), [
    ("json", b'{"a":[1,{"b":null}],"c":{"d":[[]]}}'),
    ("json-doc", b'{"a":[1,{"b":null}],"c":{"d":[[]]}}'),
    ("open-object", b'{"id":3,"tags":["x"],"~x":null,"more":{"k":[true,{"z":"w"}]}}'),
])  # fmt: skip
def test_masks_of_a_fresh_grammar_equal_the_definition(llama3_vocab, name, document, max_tokens):
    """The kernels read the rules' table in its class form: every mask along a document that enters each rule of a
    freshly compiled grammar agrees with the definition (`step`, one move at a time), unbudgeted (the walks alone)
    and budgeted (bounds first)."""
    clear_memory_cache()
    if name == "json-doc":  # objects and arrays two calls from the start
        grammar = compile_rules({**JSON_RULES, "doc": call("value")}, "doc", llama3_vocab)
    else:
        grammar = _grammar(name, llama3_vocab)
    _greedy(grammar.matcher(max_tokens=max_tokens), llama3_vocab, document, _structural_ids(llama3_vocab))

def _greedy(matcher: PushdownMatcher, vocab, data: bytes, sample: list[int] | None = None, *,
            complete: bool = True) -> None:
    """Feed ``data`` with the longest allowed token at each step (every step checked against the definition; with a
    ``sample``, the whole mask on it too); ``complete``: it is a whole document."""
    position = 0
    while position < len(data):
        if sample is not None:
            _check_mask(matcher, vocab, sample)
        allowed = matcher.allowed_token_ids().tolist()
        fitting = [t for t in allowed if vocab.tokens[t] and data.startswith(vocab.tokens[t], position)]
        assert fitting, f"refused at byte {position}: {data[:position]!r} | {data[position:position + 20]!r}"
        best = max(fitting, key=lambda t: len(vocab.tokens[t]))
        assert matcher.advance(best)
        position += len(vocab.tokens[best])
    assert matcher.is_accepting() == complete


def _tree(depth: int) -> dict:
    node: dict = {"name": "leaf"}
    for level in range(depth):
        node = {"name": f"n{level}", "children": [node, {"name": "x"}] if level % 2 else [node]}
    return node


def test_recursive_schema_is_exact_at_depth_50(qwen2_vocab):
    grammar = compile_json_schema(TREE, qwen2_vocab)
    assert isinstance(grammar, PushdownGrammar)
    document = json.dumps(_tree(50), separators=(",", ":")).encode()
    matcher = grammar.matcher()
    _greedy(matcher, qwen2_vocab, document)
    assert matcher.stack_depth == 0 or matcher.is_accepting()
    assert not grammar.accepts(document[:-1])
    assert not grammar.accepts(document.replace(b'"name":"n3"', b'"name":3'))


_names = st.text(alphabet="abcxyz é\"\\", max_size=8)
_trees = st.recursive(
    st.builds(lambda n: {"name": n}, _names),
    lambda inner: st.builds(lambda n, c: {"name": n, "children": c}, _names, st.lists(inner, max_size=3)),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(instance=_trees)
def test_every_valid_tree_is_accepted(qwen2_vocab, instance):
    grammar = compile_json_schema(TREE, qwen2_vocab)
    jsonschema.validate(instance, TREE)
    document = json.dumps(instance, separators=(",", ":"), ensure_ascii=False).encode()
    assert grammar.accepts(document)
    _greedy(grammar.matcher(), qwen2_vocab, document)


@pytest.mark.parametrize("seed", range(6))
def test_every_generated_tree_validates(qwen2_vocab, seed):
    grammar = compile_json_schema(TREE, qwen2_vocab)
    rng = np.random.default_rng(seed)
    matcher = grammar.matcher(max_tokens=80)
    text = b""
    while not matcher.is_terminated():
        allowed = matcher.allowed_token_ids()
        token_id = int(rng.choice(allowed))
        assert matcher.advance(token_id)
        if token_id in qwen2_vocab.eos_token_ids:
            break
        text += qwen2_vocab.tokens[token_id]
    jsonschema.validate(json.loads(text), TREE)


def test_budget_too_small_is_refused_up_front(qwen2_vocab):
    grammar = compile_json_schema(TREE, qwen2_vocab)
    needed = grammar.upper_bound(grammar.closure(grammar.initial))
    assert needed > 1
    with pytest.raises(BudgetTooSmallError):
        grammar.matcher(max_tokens=needed - 1)
    matcher = grammar.matcher(max_tokens=needed)
    while not matcher.is_accepting():
        forced = matcher.allowed_token_ids()
        assert len(forced) and matcher.advance(int(forced[0]))
    assert matcher.tokens_consumed <= needed


def test_serving_contract_rollback_copy_validate(qwen2_vocab):
    grammar = compile_json_schema(TREE, qwen2_vocab)
    matcher = grammar.matcher()
    ids = [qwen2_vocab.tokens.index(piece) for piece in (b'{"', b"name", b'":"', b"x", b'"}')]
    assert matcher.validate_tokens(ids) == len(ids) and matcher.tokens_consumed == 0
    assert matcher.validate_tokens(ids[:2] + ids[:1]) == 2
    twin = matcher.copy()
    assert all(matcher.advance(t) for t in ids) and matcher.is_accepting()
    assert twin.tokens_consumed == 0
    matcher.rollback(2)
    assert not matcher.is_accepting() and matcher.advance(ids[3])
    bits = np.zeros(-(-len(qwen2_vocab.tokens) // 32), dtype=np.uint32)
    matcher.fill_bitmask(bits)
    allowed = matcher.allowed_token_ids()
    assert int(np.unpackbits(bits.view(np.uint8)).sum()) == len(allowed)
    assert (bits[allowed >> 5] >> (allowed & 31).astype(np.uint32) & 1).all()


def test_forced_bytes_follow_the_stack(qwen2_vocab):
    rules = {"start": rf'\[{call("pair")}\]', "pair": rf'\{{"k":{call("num")}\}}', "num": "[0-9]"}
    grammar = compile_rules(rules, "start", qwen2_vocab)
    matcher = grammar.matcher()
    assert matcher.forced_bytes() == b'[{"k":'
    assert matcher.advance(qwen2_vocab.tokens.index(b"[{"))
    assert matcher.forced_bytes() == b'"k":'
    assert matcher.advance(qwen2_vocab.tokens.index(b'"k'))
    assert matcher.advance(qwen2_vocab.tokens.index(b'":'))
    assert matcher.advance(qwen2_vocab.tokens.index(b"7"))
    assert matcher.forced_bytes() == b"}]"


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"a": f"{call('a')}x|y"}, "left recursion"),
        ({"a": f"{call('b')}x", "b": f"(?:{call('a')})?z?"}, "left recursion"),
        ({"a": f"x{call('missing')}"}, "undefined"),
        ({"a": f"x{call('a')}"}, "no finite document"),
        ({"a": "(?&<|im_start|>)x"}, "allow_special"),
    ],
)
def test_rule_sets_that_cannot_be_grammars_are_refused(qwen2_vocab, rules, message):
    with pytest.raises(ValueError, match=message):
        compile_rules(rules, "a", qwen2_vocab)


def test_right_recursion_and_ambiguity_are_fine(qwen2_vocab):
    rules = {"list": f"x(?:,{call('list')})?", "start": f"(?:{call('list')}|{call('other')})", "other": "x,y"}
    grammar = compile_rules(rules, "start", qwen2_vocab)
    for good in (b"x", b"x,x,x", b"x,y"):
        assert grammar.accepts(good), good
    assert not grammar.accepts(b"x,")



@pytest.mark.parametrize("n_calls", [3, 40])
def test_a_dispatch_over_many_rules_calls_each_from_its_own_state(qwen2_vocab, n_calls):
    """A rule naming dozens of others (a tool-call envelope over many tools) reads its call columns in one pass:
    each key still calls its own rule and goes on where that call left off; two keys share a callee."""
    names = [f"k{i:02d}" for i in range(n_calls)]
    callees = {name: f"r{min(i, n_calls - 2)}" for i, name in enumerate(names)}  # the last two share one
    rules = {"start": "(?:" + "|".join(f"{name}={call(callee)};" for name, callee in callees.items()) + ")",
             **{callee: f"<{callee}>" for callee in callees.values()}}
    grammar = compile_rules(rules, "start", qwen2_vocab)
    for name, callee in callees.items():
        assert grammar.accepts(f"{name}=<{callee}>;".encode()), name
        other = next(c for c in set(callees.values()) if c != callee)
        assert not grammar.accepts(f"{name}=<{other}>;".encode()), (name, other)
        assert not grammar.accepts(f"{name}=<{callee}>".encode())


def test_a_wide_anyof_is_split_into_rules_and_keeps_its_language(qwen2_vocab):
    """An envelope over 80 tools (open arguments: rule mode) becomes rules of at most 32 alternatives each; every
    tool's call is still accepted with its own arguments only, and the masks agree with the byte-level definition."""
    from constrained.schema import schema_to_rules

    def tool(i: int) -> dict:
        arguments = {"type": "object", "properties": {f"p{i}": {"type": "integer"}}, "required": [f"p{i}"]}
        return {"type": "object", "properties": {"name": {"const": f"tool_{i:02d}"}, "arguments": arguments},
                "required": ["name", "arguments"], "additionalProperties": False}

    schema = {"anyOf": [tool(i) for i in range(80)]}
    rules, _ = schema_to_rules(schema)
    assert any(name.startswith("choice") for name in rules)
    assert all(body.count("tool_") <= 32 for body in rules.values())
    grammar = compile_json_schema(schema, qwen2_vocab)
    assert isinstance(grammar, PushdownGrammar)
    for i in (0, 31, 32, 79):
        assert grammar.accepts(f'{{"name":"tool_{i:02d}","arguments":{{"p{i}":1,"x":[true]}}}}'.encode()), i
        assert not grammar.accepts(f'{{"name":"tool_{i:02d}","arguments":{{"p{(i + 1) % 80}":1}}}}'.encode()), i
    sample = _structural_ids(qwen2_vocab)[:200] + random.Random(0).sample(range(len(qwen2_vocab.tokens)), 200)
    _greedy(grammar.matcher(), qwen2_vocab, b'{"name":"tool_45","arguments":{"p45":7}}', sample)


@pytest.mark.model
def test_a_real_model_writes_recursive_documents_through_the_decode_loop(smollm2_model):
    """The pushdown matcher in the project's own loop (masks, forced batching, budget): every document validates."""
    from constrained import generate

    documents = generate(smollm2_model, TREE, "A family tree as JSON: ", n=3, temperature=0.9, seed=7, max_tokens=60)
    for document in documents:
        jsonschema.validate(document, TREE)


def _nested(depth: int) -> object:
    value: object = 1
    for level in range(depth):
        value = {"k": value} if level % 2 else [value, "x"]
    return value


@pytest.mark.parametrize(
    "schema, document",
    [
        ({"type": "object", "properties": {"id": {"type": "integer"}}}, {"id": 1, "extra": _nested(30)}),  # implicit
        ({"type": "object", "additionalProperties": True}, {"a": _nested(30)}),
        ({"type": "array", "items": {}}, [_nested(30), None]),
        (True, _nested(30)),
    ],
)
def test_open_ended_values_are_any_json_value(llama3_vocab, schema, document):
    """compile_json_schema is exact: open-ended values nest at any depth (rules), never cut at a depth bound."""
    from constrained.schema import PatternApproximates, schema_to_pattern

    with pytest.raises(PatternApproximates):
        schema_to_pattern(schema, exact=True)
    grammar = compile_json_schema(schema, llama3_vocab, whitespace="flexible")
    assert isinstance(grammar, PushdownGrammar)
    assert grammar.accepts(json.dumps(document).encode())
    assert not grammar.accepts(json.dumps(document).encode()[:-1])


_PROPS = {  # Kubernetes' JSONSchemaProps in small: one node reached through three different references
    "type": "object",
    "properties": {
        "anyOf": {"type": "array", "items": {"$ref": "#/definitions/P"}},
        "definitions": {"type": "object", "additionalProperties": {"$ref": "#/definitions/P", "description": "d"}},
        "not": {"$ref": "#/definitions/P"},
        "type": {"anyOf": [{"type": "string"}, {"$ref": "#/definitions/P"}]},
    },
    "additionalProperties": False,
}


def _props(depth: int) -> dict:
    value: dict = {}
    for level in range(depth):
        value = [{"not": value}, {"anyOf": [{}, value]}, {"definitions": {"x": value}}, {"type": value}][level % 4]
    return value


@pytest.mark.parametrize(
    "schema",
    [
        {"definitions": {"P": _PROPS}, "$ref": "#/definitions/P"},
        {"definitions": {"P": _PROPS}, "type": "object", "properties": {"root": {"$ref": "#/definitions/P"}}},
        {"definitions": {"P": _PROPS}, "type": "object", "anyOf": [{"$ref": "#/definitions/P"}],  # beside siblings
         "minProperties": 1},
    ],
    ids=["root", "property", "siblings"],
)
def test_recursion_through_different_references_is_exact(llama3_vocab, schema):
    """Each recursive schema node is one rule, however many references reach it: nothing is cut at an unrolling
    depth (before, a reference met deep down was cut there and its cut rule reused at the top)."""
    grammar = compile_json_schema(schema, llama3_vocab, whitespace="flexible")
    placed = (lambda value: {"root": value}) if "properties" in schema else (lambda value: value)
    for depth in (1, 2, 3, 4, 12):
        document = placed(_props(depth))
        jsonschema.validate(document, schema)
        assert grammar.accepts(json.dumps(document).encode()), depth
    invalid = placed({"not": {"type": {"extra": 1}}})
    assert not jsonschema.Draft202012Validator(schema).is_valid(invalid)
    assert not grammar.accepts(json.dumps(invalid).encode())


def test_one_pattern_is_used_where_it_is_exact(llama3_vocab):
    closed = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
              "additionalProperties": False}  # fmt: skip
    assert not isinstance(compile_json_schema(closed, llama3_vocab), PushdownGrammar)
    deep: dict = {"type": "integer"}
    for _ in range(13):
        deep = {"type": "array", "items": deep}
    from constrained.schema import PatternApproximates, schema_to_pattern

    with pytest.raises(PatternApproximates, match="max_depth"):
        schema_to_pattern(deep, exact=True)
    grammar = compile_json_schema(deep, llama3_vocab)
    assert grammar.accepts(b"[" * 13 + b"1" + b"]" * 13)


SHARED_URLS = {
    "type": "object",
    "properties": {"home": {"type": "string", "format": "uri"}, "docs": {"type": "string", "format": "uri"},
                   "born": {"type": "string", "format": "date"}, "until": {"type": "string", "format": "date"},
                   "mail": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": True}},
}
"""Open (rule mode): wide lexemes that occur more than once (two URIs; the email's, which the optional members spell
twice) and narrow ones (dates, which stay inline)."""


def test_rule_mode_shares_a_wide_string_lexeme_and_keeps_its_language(llama3_vocab):
    from constrained.schema import FLEXIBLE_WS, schema_to_rules

    rules, start = schema_to_rules(SHARED_URLS, whitespace="flexible")
    shared = {name: rules[name].removeprefix(f"{FLEXIBLE_WS}(?:") for name in rules if name.startswith("s")}
    assert sorted(body[:11] for body in shared.values()) == ['"[A-Za-z0-9', '"[A-Za-z][A'], shared  # email, URI
    assert all(rules[start].count(call(name)) >= 2 for name in shared)
    assert "[1-9][0-9]{3}-" in rules[start]  # the dates, inline
    grammar = compile_json_schema(SHARED_URLS, llama3_vocab, whitespace="flexible")
    assert isinstance(grammar, PushdownGrammar)
    good = {"home": "https://a.example/x?y=1", "docs": "ftp://b", "born": "2024-02-29", "until": "2025-01-01",
            "mail": "a@b.example", "tags": [1, {"k": None}]}
    for document in (good, {"docs": "urn:x"}, {}):
        jsonschema.validate(document, SHARED_URLS)
        assert grammar.accepts(json.dumps(document).encode()), document
    for bad in ({"home": "no scheme"}, {"docs": "https://a b"}, {"born": "2024-13-01"}, {"home": 1}):
        assert not grammar.accepts(json.dumps(bad).encode()), bad
    sample = _structural_ids(llama3_vocab) + random.Random(0).sample(sorted(llama3_vocab.normal_ids), 300)
    data, position, matcher = json.dumps(good).encode(), 0, grammar.matcher()
    while position < len(data):  # along the document, every mask equals the byte-level definition
        _check_mask(matcher, llama3_vocab, sample)
        fitting = [t for t in matcher.allowed_token_ids().tolist() if data.startswith(llama3_vocab.tokens[t], position)
                   and llama3_vocab.tokens[t]]  # fmt: skip
        best = max(fitting, key=lambda t: len(llama3_vocab.tokens[t]))
        assert matcher.advance(best)
        position += len(llama3_vocab.tokens[best])
    assert matcher.is_accepting()


def test_rule_mode_moves_the_whitespace_before_a_value_into_the_values_rule():
    """A rule every call of which follows a whitespace slot, unguarded, takes the slot into its body; a rule called
    once without the slot or with a guard, the start rule, and a rule that already leads with the slot keep theirs."""
    from constrained.schema import FLEXIBLE_WS as ws
    from constrained.frontends.json_schema.translate import hoist_whitespace

    rules = {
        "root": rf"\[{ws}{call('v')},{ws}{call('v')},{ws}{call('w')},{call('w')},{ws}{call('g', 'once=0')}\]",
        "v": f"1|{ws}{call('lead')}", "w": "2", "g": "3", "lead": f"{ws}4",
    }  # fmt: skip
    hoisted = hoist_whitespace(rules, "root", ws)
    assert hoisted["v"] == f"{ws}(?:1|{ws}{call('lead')})"
    assert hoisted["root"] == rf"\[{call('v')},{call('v')},{ws}{call('w')},{call('w')},{ws}{call('g', 'once=0')}\]"
    assert {name: hoisted[name] for name in ("w", "g", "lead")} == {name: rules[name] for name in ("w", "g", "lead")}
    assert hoist_whitespace(hoisted, "root", ws) == hoisted
    assert hoist_whitespace(rules, "root", "") is rules


NESTED = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "owner": {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array"}}},
        "rows": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        "meta": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
    },
}
"""Values that are rules of their own after a colon, as array items and as extra properties' values."""


def _spaced(value, blank) -> str:
    """``value`` as JSON with ``blank()`` in every whitespace slot."""
    if isinstance(value, dict):
        items = [f"{blank()}{json.dumps(k)}{blank()}:{blank()}{_spaced(v, blank)}{blank()}" for k, v in value.items()]
        return "{" + ",".join(items) + "}" if items else "{" + blank() + "}"
    if isinstance(value, list):
        items = [f"{blank()}{_spaced(v, blank)}{blank()}" for v in value]
        return "[" + ",".join(items) + "]" if items else "[" + blank() + "]"
    return json.dumps(value)


def _one_odd_slot(value, rng: random.Random) -> str:
    """``value`` with flexible whitespace in every slot but one, which gets any of a few blanks, some of them more
    than a slot allows (two spaces, a tab, a space before a newline)."""
    slots = itertools.count()
    _spaced(value, lambda: str(next(slots)))
    odd, slot = rng.randrange(next(slots)), itertools.count()
    return _spaced(value, lambda: rng.choice(["  ", "\t", " \n", "", " ", "\n  "] if next(slot) == odd else
                                             ["", " ", "\n", "\n    "]))  # fmt: skip


def test_moving_whitespace_into_value_rules_keeps_the_language(llama3_vocab, monkeypatch):
    """The rules with each value's leading whitespace in its own rule accept exactly the documents the rules with
    the whitespace at its callers accept, on documents with whitespace of every kind in every slot."""
    from constrained.frontends.json_schema import translate
    from constrained.schema import schema_to_rules

    hoisted = schema_to_rules(NESTED, whitespace="flexible", property_order="any")
    monkeypatch.setattr(translate, "hoist_whitespace", lambda rules, start, ws: rules)
    kept = schema_to_rules(NESTED, whitespace="flexible", property_order="any")
    assert hoisted != kept and sum(body.count(FLEXIBLE_WS_CALL) for body in kept[0].values()) > 4
    grammars = [compile_rules(rules, start, llama3_vocab) for rules, start in (hoisted, kept)]
    documents = [{"id": 1, "owner": {"name": "a", "tags": [1, {"x": [None]}, []]}, "rows": [{"k": "b"}, {}],
                  "meta": {"p": [1, 2], "q": []}}, {"rows": [], "meta": {}}, {}]  # fmt: skip
    rng, accepted = random.Random(7), 0
    for document in documents:
        assert all(grammar.accepts(json.dumps(document, indent=2).encode()) for grammar in grammars)
        for _ in range(40):
            text = _one_odd_slot(document, rng).encode()
            verdicts = {grammar.accepts(text) for grammar in grammars}
            assert len(verdicts) == 1, text
            accepted += verdicts.pop()
    assert 0 < accepted < 120  # both verdicts occur


FLEXIBLE_WS_CALL = "]{0,20})?(?&="
"""The end of a flexible whitespace slot right before a call."""


def _fitting(grammar: PushdownGrammar, configs, remaining: int) -> set[int]:
    """The definition of a budgeted mask: the tokens of any part whose next configuration can still finish in the
    tokens left after it."""
    fitting: set[int] = set()
    for _, mask, stack in grammar.mask(configs).all_parts():
        nexts = mask.next_states
        bound = {int(s): grammar.upper_bound([(int(s), stack)]) for s in np.unique(nexts).tolist()}
        fitting.update(t for t, s in zip(mask.allowed.tolist(), nexts.tolist()) if 1 + bound[s] <= remaining)
    return fitting


@pytest.mark.parametrize("seed", range(3))
def test_budgeted_masks_keep_exactly_the_tokens_whose_completion_fits(qwen2_vocab, seed):
    """A random walk rambles inside key and value strings until the budget bites: every budgeted mask — string
    bodies cut by the template state their tokens end in, exits by their own bound, cached per budget level —
    equals the token-by-token definition, at every budget the walk passes through."""
    _walk_checking_budgets(_grammar("open-object", qwen2_vocab), 30, seed)


def _walk_checking_budgets(grammar: PushdownGrammar, max_tokens: int, seed: int) -> None:
    """A random walk under ``max_tokens``: every budgeted mask equals `_fitting`, and the walk ends accepting."""
    rng = random.Random(seed)
    matcher = grammar.matcher(max_tokens=max_tokens)
    while not matcher.is_terminated():
        allowed = matcher.allowed_token_ids().tolist()
        assert set(allowed) == _fitting(grammar, matcher.configurations, matcher.remaining_budget)
        token_id = rng.choice(allowed)
        assert matcher.advance(token_id)
    assert matcher.is_accepting()


def test_completion_bounds_equal_a_piecewise_tokenization_of_the_canonical_completion(qwen2_vocab):
    """The kernel's UB (`_kernel.completion_bounds`) against a pure-Python reading of its definition: the
    canonical completion's symbol chain, tokenized with the fewest vocabulary tokens, plus the callee's and the
    continuation's bounds where it stops at a call; on 400 states of the open-object grammar."""
    from constrained import pushdown

    grammar = _grammar("open-object", qwen2_vocab)
    spelled = {qwen2_vocab.tokens[i] for i in qwen2_vocab.normal_ids if qwen2_vocab.tokens[i]}
    longest = max(map(len, spelled))
    memo: dict[int, int] = {}

    def fewest_tokens(symbols: list[int]) -> int:
        best = [0] + [pushdown.UNREACHABLE] * len(symbols)
        for end in range(1, len(symbols) + 1):
            if symbols[end - 1] >= 256:
                best[end] = best[end - 1] + 1
                continue
            for start in range(max(0, end - longest), end):
                piece = symbols[start:end]
                if all(b < 256 for b in piece) and bytes(piece) in spelled:
                    best[end] = min(best[end], best[start] + 1)
        return best[-1]

    def reference(state: int) -> int:
        if state not in memo:
            symbols, current = [], state
            while grammar._dist[current] > 0 and grammar._hop_kind[current] == pushdown._HOP_SYMBOL:
                symbols.append(int(grammar._hop_a[current]))
                current = grammar._table.at(current, symbols[-1])
            tail = 0
            if grammar._dist[current] > 0 or not grammar._rule_accept[current]:
                tail = reference(int(grammar._hop_a[current])) + reference(int(grammar._hop_b[current]))
            memo[state] = min(fewest_tokens(symbols) + tail, pushdown.UNREACHABLE)
        return memo[state]

    finished = np.flatnonzero(grammar._dist < pushdown.UNREACHABLE)
    states = random.Random(3).sample(finished.tolist(), min(400, finished.shape[0]))
    grammar._ub[:] = -1  # as compiled: the kernel fills what it needs from scratch
    assert [grammar.state_bound(s) for s in states] == [reference(s) for s in states]


LONG_NOTE = {"type": "object", "properties": {"note": {"type": "string", "minLength": 3, "maxLength": 5000}},
             "required": ["note"], "additionalProperties": False}
"""A length one automaton cannot count (~340k NFA states): its characters are counted in rules of 256."""


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(length=st.one_of(st.sampled_from([0, 2, 3, 255, 256, 257, 512, 4864, 4999, 5000, 5001]),
                        st.integers(0, 5100)),
       chars=st.lists(st.sampled_from(["a", "é", "日", "🎉", "\n", '"', "\\", "\x01"]), min_size=1, max_size=4))
def test_long_strings_count_their_characters_in_rules_exactly(llama3_vocab, length, chars):
    grammar = compile_json_schema(LONG_NOTE, llama3_vocab)
    assert isinstance(grammar, PushdownGrammar) and "string.chunk256" in grammar.rules
    note = "".join(chars[i % len(chars)] for i in range(length))
    text = json.dumps({"note": note}, ensure_ascii=False, separators=(",", ":")).encode()
    assert grammar.accepts(text) == (3 <= length <= 5000)


def test_masks_through_counting_rules_equal_the_definition_and_close_within_the_budget(llama3_vocab):
    grammar = compile_json_schema({"type": "string", "maxLength": 5000}, llama3_vocab)
    assert isinstance(grammar, PushdownGrammar)
    document = b'"' + b"abc 123," * 625 + b'"'  # exactly 5000 characters
    tokens = llama3_vocab.tokens
    pieces = [t for t in llama3_vocab.normal_ids if tokens[t] and tokens[t] in document[:40] + b'"']
    quotes = [t for t in llama3_vocab.normal_ids if b'"' in tokens[t]]  # where the counting rules end
    rng = random.Random(0)
    matcher, position, checked = grammar.matcher(), 0, 0
    words = np.zeros((len(tokens) + 31) // 32, dtype=np.uint32)
    while position < len(document):  # the longest fitting token each step; the definition checked at chunk ends
        if (position - 1) % 256 > 248 or position > len(document) - 4:
            _check_mask(matcher, llama3_vocab, quotes + pieces)
            checked += 1
        matcher.fill_bitmask(words)
        fitting = [t for t in pieces if words[t >> 5] >> (t & 31) & 1 and document.startswith(tokens[t], position)]
        assert fitting, f"refused at byte {position}"
        best = max(fitting, key=lambda t: len(tokens[t]))
        assert matcher.advance(best)
        position += len(tokens[best])
    assert checked > 19 and matcher.is_accepting()
    assert matcher.allowed_token_ids().tolist() == sorted(llama3_vocab.eos_token_ids)  # 5000 written: the end only
    budgeted, text = grammar.matcher(max_tokens=40), b""
    while not budgeted.is_terminated():
        token_id = rng.choice(budgeted.allowed_token_ids().tolist())
        assert budgeted.advance(token_id)
        if token_id in llama3_vocab.eos_token_ids:
            break
        text += tokens[token_id]
    assert budgeted.tokens_consumed <= 40 and isinstance(json.loads(text), str)


def test_a_rule_too_big_for_one_automaton_is_compiled_again_as_smaller_rules(llama3_vocab):
    """Twelve 1024-character strings inline are ~850k NFA states in the root rule; the finer rules (every value a
    rule, counting past 256) compile, exactly."""
    from constrained.errors import GrammarTooLargeError
    from constrained.schema import schema_to_rules

    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 1024} for i in range(12)},
              "required": ["p0"]}
    with pytest.raises(GrammarTooLargeError):
        compile_rules(*schema_to_rules(schema), llama3_vocab)
    grammar = compile_json_schema(schema, llama3_vocab)
    assert isinstance(grammar, PushdownGrammar)
    valid = {"p0": "x" * 1024, "p5": "é" * 300}
    assert grammar.accepts(json.dumps(valid, ensure_ascii=False, separators=(",", ":")).encode())
    assert not grammar.accepts(json.dumps({"p0": "x" * 1025}, separators=(",", ":")).encode())
    assert not grammar.accepts(b'{"p5":"y"}')  # p0 is required


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(chosen=st.lists(st.integers(0, 39), unique=True, max_size=6), swap=st.booleans())
def test_finer_rules_chain_optional_members_and_keep_their_order(llama3_vocab, chosen, swap):
    """No member required: the finer rules chain the members in blocks of 16 (linear, where one pattern copies
    each O(log n) times); any subsequence in schema order is accepted, nothing out of order."""
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 1024} for i in range(40)},
              "additionalProperties": False}
    grammar = compile_json_schema(schema, llama3_vocab)
    assert isinstance(grammar, PushdownGrammar) and any(name.startswith("members") for name in grammar.rules)
    order = sorted(chosen)
    if swap and len(order) > 1:
        order[0], order[1] = order[1], order[0]
    text = json.dumps({f"p{i}": "v" * i for i in order}, separators=(",", ":")).encode()
    assert grammar.accepts(text) == (order == sorted(chosen))
