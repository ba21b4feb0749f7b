"""String values as pattern text: string bodies that avoid a set of names, and string languages computed as automata.

    names (the keys listed, the strings ``not`` excludes)  ──string_body_excluding──►  a trie's complement, as text
                                                            ──excluded_keys_automaton──►  the same, as an automaton
    pattern / format / lengths / ¬pattern                   ──string_language──►  their intersection, an automaton
    ¬pattern                                                ──not_pattern_body──►  a DFA difference

A string body is a sequence of `json_lexemes.UNIT`: one character as json.dumps(ensure_ascii=False) writes it. The
computed languages are embedded in the pattern as ``(?@...)`` automata (`constrained.fsm`, imported when needed).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from constrained.automata.dfa import MAX_DFA_STATES, compile_dfa
from constrained.automata.operations import automaton, difference, intersection
from constrained.dialect.json_lexemes import SHORT_ESCAPES, UNIT
from constrained.dialect.json_string import json_char_pattern, json_string_body_pattern
from constrained.dialect.nodes import ANY_SCALAR, normalize_ranges
from constrained.dialect.parser import automaton_text
from constrained.dialect.writer import Pattern, alt, class_member, class_text, escape_literal, one_of, rep
from constrained.errors import EmptyLanguageError, InvalidSchemaError, UnsupportedSchemaError

__all__ = [
    "unit_alternatives",
    "string_body_excluding",
    "names_trie",
    "names_complement",
    "ascii_names_complement",
    "excluded_keys_automaton",
    "string_language",
    "bodies_dfa",
    "not_pattern_body",
    "is_wide_lexeme",
]

# -- string sets ----------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _unit_encodings(ch: str) -> tuple[str, ...]:
    """Every UNIT spelling that decodes to ch (the canonical one first)."""
    if ch == '"':
        return (r'\\"',)
    if ch == "\\":
        return (r"\\\\",)
    if ord(ch) < 0x20:
        spelled = (rf"\\u00{ord(ch):02x}",)
        return ((rf"\\{SHORT_ESCAPES[ch]}",) if ch in SHORT_ESCAPES else ()) + spelled
    return (escape_literal(ch),)


@functools.lru_cache(maxsize=4096)
def _unit_excluding(chars: frozenset[str]) -> str:
    """One UNIT that does not decode to any of ``chars``."""
    plain = "".join(sorted(class_member(ord(c)) for c in chars if c not in '"\\' and ord(c) >= 0x20))
    parts = [f'[^"\\\\\\x00-\\x1f{plain}]']
    specials = [c for c in chars if c in '"\\' or ord(c) < 0x20]
    if not specials:
        parts.append(r'\\["\\bfnrt]|\\u00[01][0-9a-f]')
    else:
        for code in list(range(0x20)) + [ord('"'), ord("\\")]:
            if chr(code) not in chars:
                parts.extend(_unit_encodings(chr(code)))
    return "(?:" + "|".join(parts) + ")"


@functools.lru_cache(maxsize=4096)
def unit_alternatives(ch: str) -> str:
    """A pattern of every UNIT spelling of ``ch``."""
    return alt(list(_unit_encodings(ch))) or ""


@functools.lru_cache(maxsize=256)
def string_body_excluding(names: tuple[str, ...]) -> str:
    """String bodies (any UNIT sequence) that do not decode to one of `names`: the trie's prefixes that are not
    names, or a path down the trie that leaves it by one unit and then goes on freely. The free tail is written
    once, not under every trie node (a third shorter pattern, the same minimal DFA). Cached: a third of the calls
    of a compile repeat a name set (an object met again through `$ref` or another branch)."""
    trie = names_trie(names)
    if all(ch in _ASCII_PLAIN for name in names for ch in name):
        return ascii_names_complement(trie)
    return names_complement(trie)


def names_trie(names: Iterable[str]) -> dict:
    """The names as a character trie: a node maps each next character to its child, and ``""`` marks a name's end."""
    trie: dict = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[""] = True
    return trie


def names_complement(trie: dict) -> str:
    """`string_body_excluding` for any names: a whole UNIT (every spelling of a character) under each node."""
    def walk(node: dict) -> tuple[Pattern, str]:  # (prefixes that are not names, prefixes that have left)
        chars = [c for c in node if c]
        inside: list[Pattern] = [] if "" in node else [""]
        left = [_unit_excluding(frozenset(chars))]
        for ch in chars:
            unit = unit_alternatives(ch)
            child_inside, child_left = walk(node[ch])
            if child_inside is not None:
                inside.append(unit + child_inside)
            left.append(unit + child_left)
        return alt(inside), alt(left) or ""  # alt refuses more than MAX_ALTERNATION

    inside, left = walk(trie)
    return alt([inside, left + UNIT + "*"]) or ""


_ASCII_PLAIN = frozenset(map(chr, range(0x20, 0x80))) - {'"', "\\"}
"""The characters a string body spells one way, as themselves, in one byte."""
_LEAVES_ANY_ASCII_NAME = r'(?:[^\x00-\x7f]|\\["\\bfnrt]|\\u00[01][0-9a-f])'
"""A UNIT that decodes to no `_ASCII_PLAIN` character: a non-ASCII one or an escape."""


def ascii_names_complement(trie: dict) -> str:
    """`string_body_excluding` for names of `_ASCII_PLAIN` characters (nearly every key): a prefix of the trie
    that is no name; or a path down it, then an ASCII character that leaves it or (at any node) a unit that no
    name has, then anything. Each node carries one byte class instead of a whole UNIT: half the pattern, and of
    the native compiler's time on it, for the same language."""
    def walk(node: dict) -> tuple[str | None, str, str]:  # (prefixes that are no name, ASCII exits, all prefixes)
        chars = [c for c in node if c]
        inside: list[str] = [] if "" in node else [""]
        left, prefixes = [_ascii_plain_except("".join(sorted(chars)))], [""]
        for ch in chars:
            child_inside, child_left, child_prefixes = walk(node[ch])
            unit = escape_literal(ch)
            if child_inside is not None:
                inside.append(unit + child_inside)
            left.append(unit + child_left)
            prefixes.append(unit + child_prefixes)
        return (one_of(inside) if inside else None), one_of(left), one_of(prefixes)

    inside, left, prefixes = walk(trie)
    return alt([inside, f"(?:{left}|{prefixes}{_LEAVES_ANY_ASCII_NAME}){UNIT}*"]) or ""


@functools.lru_cache(maxsize=4096)
def _ascii_plain_except(chars: str) -> str:
    """A class of the `_ASCII_PLAIN` characters but ``chars``, as ranges (a positive class: generators that sample
    a negated class from all of Unicode, such as hypothesis' ``from_regex``, would almost never hit ASCII)."""

    ranges = normalize_ranges([(ord(c), ord(c)) for c in _ASCII_PLAIN.difference(chars)])
    return class_text(ranges) if ranges else "[^\\x00-\\U0010ffff]"  # every character goes on: none leaves


# -- computed string languages (intersections and complements, embedded as automata) ---------------------------------


@functools.lru_cache(maxsize=64)
def excluded_keys_automaton(names: tuple[str, ...]) -> str:
    """`string_body_excluding` as an embedded automaton, from a DFA difference: the same language, for the finer
    rules, where a hundred names make the pattern's NFA too big (a unit class under every trie node) while the
    DFA has about one state per trie node."""
    if not names:
        return UNIT + "*"

    spelled = "|".join("".join(unit_alternatives(ch) for ch in name) for name in names)
    universe, names_dfa = compile_dfa(UNIT + "*"), compile_dfa(spelled)
    dfa = difference(universe, names_dfa, max_states=MAX_DFA_STATES)  # it goes into a rule: a rule's budget
    assert dfa is not None, "finitely many names never exhaust the string bodies"
    return automaton_text(automaton(dfa))


def _longest(dfa: Any) -> int | None:
    """Most symbols in an accepted string (None: unbounded); the DFA is trimmed, so every cycle is live."""
    rows = [sorted({t for t in row if t >= 0}) for row in dfa.class_table.tolist()]
    indegree = [0] * len(rows)
    for row in rows:
        for t in row:
            indegree[t] += 1
    order = [s for s in range(len(rows)) if indegree[s] == 0]
    for s in order:
        for t in rows[s]:
            indegree[t] -= 1
            if indegree[t] == 0:
                order.append(t)
    if len(order) < len(rows):
        return None
    longest = [0] * len(rows)
    for s in reversed(order):
        longest[s] = max((longest[t] + 1 for t in rows[s]), default=0)
    return longest[0]


@functools.lru_cache(maxsize=64)
def bodies_dfa(bodies: tuple[str, ...]) -> Any:
    """The minimal DFA of the intersection of string-body patterns (None: it is empty)."""
    try:
        dfa = compile_dfa(bodies[0])
    except EmptyLanguageError:
        return None
    for body in bodies[1:]:
        both = intersection(dfa, compile_dfa(body))
        if both is None:
            return None
        dfa = both
    return dfa


@functools.lru_cache(maxsize=256)
def string_language(bodies: tuple[str, ...], lo: int, hi: int | None) -> str | None:
    """A string-body pattern for the intersection of body patterns and a length range (JSON characters); None
    when it is empty. One body whose strings already satisfy the lengths comes back as it is."""

    dfa = bodies_dfa(bodies)
    if dfa is None:
        return None
    longest = _longest(dfa) if hi is not None else None
    if hi is not None and longest is not None and longest <= hi:  # a character is at least one byte
        hi = None
    if lo and -(-int(dfa.distance[0]) // 6) >= lo:  # and at most six (\u00xx)
        lo = 0
    if lo or hi is not None:
        counted = intersection(dfa, compile_dfa(rep(UNIT, lo, hi)))
        return None if counted is None else automaton_text(automaton(counted))
    if len(bodies) == 1:
        return bodies[0]
    return automaton_text(automaton(dfa))


def not_pattern_body(patterns: list[str], path: str) -> str | None:
    """String bodies (canonical encoding) that match none of the ECMA patterns under either engine's meaning."""

    wide = []
    for p in patterns:
        if not isinstance(p, str):
            raise InvalidSchemaError(path, "pattern must be a string")
        try:
            wide.append(json_string_body_pattern(p, wide=True))
        except UnsupportedSchemaError as err:
            raise UnsupportedSchemaError(path, "not", f"pattern {p!r}: {err.detail}") from None
    universe = compile_dfa(json_char_pattern(ANY_SCALAR)[0] + "*")
    try:
        matched = compile_dfa("(?:" + "|".join(wide) + ")")
    except EmptyLanguageError:
        return automaton_text(automaton(universe))
    rest = difference(universe, matched)
    return None if rest is None else automaton_text(automaton(rest))


_WIDE_BYTES = 64
"""Rule mode: a string lexeme with a state where this many bytes go on is wide (see `is_wide_lexeme`)."""


def is_wide_lexeme(lexeme: str) -> bool:
    """Whether a string lexeme has a state where many bytes go on (a URL's, ``\\w+``): the states whose masks walk
    most of the token trie, worth sharing; a narrow one (a date) walks little and is cheaper inline."""

    dfa = compile_dfa(lexeme)
    return bool(((dfa.transitions[:, :256] >= 0).sum(axis=1) >= _WIDE_BYTES).any())
