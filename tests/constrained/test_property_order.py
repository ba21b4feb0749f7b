"""``property_order="any"``: an object's members in any order, each listed one at most once, the required ones all
in (`constrained.pushdown`'s guarded calls). On real vocabularies: every key order of a valid instance is accepted,
everything the grammar allows validates with no listed key twice, masks equal the byte-level definition and never
leave a matcher stranded, budgets close exactly, and the default keeps schema order."""

from __future__ import annotations

import itertools
import json
import random

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained import _kernel, compile_json_schema, pushdown
from constrained.errors import BudgetTooSmallError, GrammarError
from constrained.grammar import clear_memory_cache, compile_rules
from constrained.pushdown import PushdownGrammar
from constrained.rules import call

from .test_pushdown import _checked_random_document, _greedy, _walk_checking_budgets

CLOSED = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string", "maxLength": 6},
        "nick": {"type": "string", "maxLength": 3},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
        "ok": {"type": "boolean"},
    },
    "required": ["ok", "id"],
    "additionalProperties": False,
}
"""No extra keys: after the last member no separator may come; "name" and "nick" share a prefix."""

OPEN = {
    "type": "object",
    "properties": {
        "a": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "null"}}, "required": ["y"]},
        "b": {"type": "boolean"},
    },
    "required": ["a"],
    "additionalProperties": {"type": "integer"},
}
"""Extra keys with integer values anywhere between the listed members; a nested object with its own markers."""

SCHEMAS = {"closed": CLOSED, "open": OPEN}


def _no_repeats(pairs: list) -> dict:
    """A `json.loads` object hook: no listed key twice. (Extra keys may repeat, in either property order: which keys
    an unbounded run of extras used is more than a finite grammar can hold.)"""
    listed = [key for key, _ in pairs if key in LISTED]
    assert len(listed) == len(set(listed)), f"a listed key twice in {listed}"
    return dict(pairs)


LISTED = {key for schema in (CLOSED, OPEN, OPEN["properties"]["a"]) for key in schema["properties"]}


def _grammar(name: str, vocab, whitespace: str = "flexible") -> PushdownGrammar:
    grammar = compile_json_schema(SCHEMAS[name], vocab, whitespace, property_order="any")
    assert isinstance(grammar, PushdownGrammar)
    return grammar


_closed_instances = st.fixed_dictionaries(
    {"id": st.integers(-99, 99), "ok": st.booleans()},
    optional={"name": st.text("abé\"", max_size=6), "nick": st.text("xy", max_size=3),
              "tags": st.lists(st.text("t", max_size=4), max_size=2)},  # fmt: skip
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(instance=_closed_instances, data=st.data())
def test_every_key_order_of_a_valid_instance_is_accepted(qwen2_vocab, instance, data):
    jsonschema.validate(instance, CLOSED)
    keys = data.draw(st.permutations(list(instance)))
    document = json.dumps({key: instance[key] for key in keys}, ensure_ascii=False).encode()
    grammar = _grammar("closed", qwen2_vocab)
    assert grammar.accepts(document)
    _greedy(grammar.matcher(), qwen2_vocab, document)


def test_the_default_keeps_schema_order(qwen2_vocab):
    ordered = compile_json_schema(CLOSED, qwen2_vocab, "flexible")  # one DFA: schema order needs no stack
    assert not isinstance(ordered, PushdownGrammar)
    assert ordered.accepts(b'{"id": 1, "ok": true}')
    assert not ordered.accepts(b'{"ok": true, "id": 1}')
    assert _grammar("closed", qwen2_vocab).accepts(b'{"ok": true, "id": 1}')
    with pytest.raises(ValueError, match="property_order"):
        compile_json_schema(CLOSED, qwen2_vocab, property_order="sorted")


@pytest.mark.parametrize("document", [
    b'{"id": 1}',  # a required member missing
    b'{"ok": true}',
    b'{}',
    b'{"id": 1, "ok": true, "id": 2}',  # a listed key twice
    b'{"ok": true, "name": "a", "id": 1, "name": "b"}',
    b'{"id": 1, "ok": true,}',
    b'{"id": 1, "ok": true, "other": 1}',  # no extra keys here
])  # fmt: skip
def test_repeats_missing_members_and_strays_are_refused(qwen2_vocab, document):
    jsonschema_valid = True
    try:
        jsonschema.validate(json.loads(document, object_pairs_hook=_no_repeats), CLOSED)
    except (AssertionError, ValueError, jsonschema.ValidationError):
        jsonschema_valid = False
    assert not jsonschema_valid
    assert not _grammar("closed", qwen2_vocab).accepts(document)


def test_no_separator_once_every_member_is_in(qwen2_vocab):
    """Every listed key is in and none other may come: a separator would strand the matcher, so none is offered."""
    grammar = _grammar("closed", qwen2_vocab, "compact")
    matcher = grammar.matcher()
    _greedy(matcher, qwen2_vocab, b'{"tags":[],"nick":"","ok":false,"name":"","id":0', complete=False)
    offered = {qwen2_vocab.tokens[t] for t in matcher.allowed_token_ids().tolist()}
    assert b"}" in offered and not any(b"," in piece for piece in offered)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", ["closed", "open"])
def test_masks_equal_the_byte_level_definition_along_random_documents(llama3_vocab, name, seed):
    """Along random documents (any member order the walk picks), every mask agrees with the byte-level definition
    on the structural tokens and a sample; none is empty before the end; the document validates, with no key
    twice, and closes within its budget."""
    text, matcher = _checked_random_document(_grammar(name, llama3_vocab), llama3_vocab, 70, seed, b'{},"')
    jsonschema.validate(json.loads(text, object_pairs_hook=_no_repeats), SCHEMAS[name])
    assert matcher.tokens_consumed <= 70


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", ["closed", "open"])
def test_budgeted_masks_keep_exactly_the_tokens_whose_completion_fits(qwen2_vocab, name, seed):
    """The budget's bounds read the markers: a state owes the required members still out. Every budgeted mask
    equals the definition (the tokens whose next configuration, markers and all, can still finish in time)."""
    _walk_checking_budgets(_grammar(name, qwen2_vocab), 40, seed)


@pytest.mark.parametrize("whitespace", ["compact", "spaced", "flexible"])
@pytest.mark.parametrize("name", ["closed", "open"])
def test_the_smallest_budget_always_finishes(qwen2_vocab, name, whitespace):
    """At exactly the budget the grammar asks for, random walks still end in a valid document: the bounds of the
    required members still owed are exact, so no walk is cut off."""
    grammar = _grammar(name, qwen2_vocab, whitespace)
    needed = grammar.upper_bound(grammar.closure(grammar.initial))
    with pytest.raises(BudgetTooSmallError):
        grammar.matcher(max_tokens=needed - 1)
    rng = random.Random(7)
    for _ in range(15):
        matcher = grammar.matcher(max_tokens=needed)
        text = b""
        while not matcher.is_terminated():
            allowed = matcher.allowed_token_ids().tolist()
            assert allowed, "a live matcher never offers an empty mask"
            token_id = rng.choice(allowed)
            assert matcher.advance(token_id)
            if token_id in qwen2_vocab.eos_token_ids:
                break
            text += qwen2_vocab.tokens[token_id]
        jsonschema.validate(json.loads(text, object_pairs_hook=_no_repeats), SCHEMAS[name])


@pytest.mark.parametrize("capacity", [(16_384, 4_096), (1, 1)])
def test_a_family_walk_finds_what_its_members_walked_one_by_one_find(llama3_vocab, monkeypatch, capacity):
    """The kernel walks an object's members below the same trie nodes in one pass: it finds each member's tokens,
    next states and exits exactly as the member's own walk does (its inside mask, over the whole trie), also when
    its first buffers are too small."""
    monkeypatch.setattr(pushdown, "FAMILY_CAPACITY", capacity)
    grammar = _grammar("closed", llama3_vocab)
    family_states = [state for state in grammar._pushes.guarded if grammar._family_of(state)]
    exits = [roots for start in grammar._starts.values() for _, roots in grammar._inside_of(start)[1]]
    roots_sets = [pushdown._WHOLE_TRIE, pushdown.root_children(grammar.trie), *exits]  # at every depth a rule ends
    assert family_states and len(roots_sets) > 3
    compared = 0
    for state in family_states:
        family = grammar._family_of(state)
        for roots in roots_sets:
            walk = grammar._walk_family(family, roots)
            found = {bit: (walk.mask(index), deeper) for index, (bit, _, _, deeper) in enumerate(walk.members)}
            for callee, _, bit in family:
                whole = roots is pushdown._WHOLE_TRIE  # the member's inside mask
                mask, deeper = grammar._inside_of(callee) if whole else grammar._subtree_of(callee, roots)[1:]
                if not len(mask) and not deeper:
                    assert bit not in found
                    continue
                got_mask, got_deeper = found[bit]
                assert got_mask.allowed.tolist() == mask.allowed.tolist()
                assert got_mask.next_states.tolist() == mask.next_states.tolist()
                assert [(s, r.tolist()) for s, r in got_deeper] == [(s, r.tolist()) for s, r in deeper]
                compared += 1
    assert compared > 10


def test_a_family_walk_refuses_a_class_map_out_of_the_table(llama3_vocab):
    """`walk_family` reads the table through each symbol's class: a map naming a column the table lacks, or too
    short for the bytes, is refused, not followed."""
    grammar = _grammar("closed", llama3_vocab)
    trie, (classes, symbol_class) = grammar.trie, grammar._table
    starts = np.asarray([callee for callee, _, _ in grammar._family_of(next(
        state for state in grammar._pushes.guarded if grammar._family_of(state)))], dtype=np.int32)
    buffers = pushdown.family_buffers(*pushdown.FAMILY_CAPACITY)
    columns = symbol_class.copy()
    columns[65] = classes.shape[1]
    for bad in (columns, symbol_class[:255]):
        with pytest.raises(ValueError, match="walk_family"):
            _kernel.walk_family(classes, np.ascontiguousarray(bad), starts, grammar._boundary, pushdown._WHOLE_TRIE,
                                trie.native, *buffers)  # fmt: skip


def test_a_loaded_rule_set_keeps_its_guards(qwen2_vocab):
    """The disk cache stores the guards with the call moves: a grammar loaded back refuses and accepts the same."""
    grammar = _grammar("closed", qwen2_vocab)
    grammar.save()
    clear_memory_cache()
    loaded = _grammar("closed", qwen2_vocab)
    assert loaded is not grammar and loaded.guards == grammar.guards and loaded.guards
    for keys in itertools.permutations(["id", "ok", "nick"]):
        document = json.dumps(dict.fromkeys(keys, 0) | {"ok": True, "nick": ""}).encode()
        assert loaded.accepts(document) == grammar.accepts(document) == True  # noqa: E712
    assert not loaded.accepts(b'{"id": 1, "ok": true, "id": 1}')


@pytest.mark.parametrize(("guard", "message"), [
    ("once=", "malformed guard"),
    ("once=1,2", "malformed guard"),
    ("needs=a", "malformed guard"),
    ("sometimes", "malformed guard"),
])  # fmt: skip
def test_malformed_guards_are_refused_naming_the_call(qwen2_vocab, guard, message):
    with pytest.raises(GrammarError, match=message):
        call("member", guard)
    with pytest.raises(GrammarError, match=f"'member'.*{message}"):
        compile_rules({"start": f"a(?&=member|{guard})", "member": "b"}, "start", qwen2_vocab)
