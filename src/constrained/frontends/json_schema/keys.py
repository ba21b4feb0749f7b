"""An object's keys beyond its listed properties: ``patternProperties`` regions, the keys ``additionalProperties``
governs, and the ``propertyNames`` filter, each a key-body language computed as an automaton.

    patternProperties  ──KeyPatterns──►  per listed name: the patterns it matches; per subset of pattern groups: the
                                         unlisted keys matching exactly those (`key_regions`); the rest (`key_others`)
    propertyNames      ──KeyFilter──►    whether a listed name is allowed; the allowed part of a key language

Keys are canonical JSON string bodies; a key must match its patterns under both engines' meanings and the others
under neither (`regex.json_string_body_pattern`, ``wide``), so the engines' differences never let a key through.
"""

from __future__ import annotations

import functools
import itertools
import json

from constrained.automata.dfa import DFA, compile_dfa
from constrained.automata.operations import automaton, difference, intersection
from constrained.dialect.json_string import json_char_pattern, json_string_body_pattern
from constrained.dialect.nodes import ANY_SCALAR
from constrained.dialect.parser import automaton_text
from constrained.dialect.writer import escape_literal
from constrained.errors import EmptyLanguageError, UnsupportedSchemaError
from constrained.frontends.json_schema.flat_nodes import json_text

__all__ = ["key_regions", "key_others", "KeyPatterns", "KeyFilter"]

_MAX_KEY_GROUPS = 6
"""Most patternProperties with distinct schemas one object may have (their overlaps split keys 2^n ways)."""


def _key_literal(name: str) -> str:
    """A key's body as literal pattern text."""
    return escape_literal(json_text(name)[1:-1])


@functools.lru_cache(maxsize=256)
def key_regions(groups: tuple[str, ...], wide: tuple[str, ...], names: tuple[str, ...]
                 ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The keys matching exactly the groups of each non-empty subset of ``groups`` (body patterns) and no listed
    name: (key body pattern, group indices), empty regions left out. A key must match its groups under both
    engines' meanings (``groups``) and the others under neither (``wide``, see `regex.json_string_body_pattern`)."""

    dfas = [compile_dfa(g) for g in groups]
    out = []
    for size in range(1, len(groups) + 1):
        for subset in itertools.combinations(range(len(groups)), size):
            common = dfas[subset[0]]
            dfa: DFA | None = common
            for i in subset[1:]:
                dfa = intersection(common, dfas[i])
                if dfa is None:
                    break
                common = dfa
            excluded = [wide[i] for i in range(len(groups)) if i not in subset] + [_key_literal(n) for n in names]
            if dfa is not None and excluded:
                dfa = difference(dfa, compile_dfa("(?:" + "|".join(excluded) + ")"))
            if dfa is not None:
                out.append((automaton_text(automaton(dfa)), subset))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def key_others(wide: tuple[str, ...], names: tuple[str, ...]) -> str | None:
    """Canonical key bodies matching no group (``wide`` bodies) and no listed name (None: there are none)."""

    universe = compile_dfa(json_char_pattern(ANY_SCALAR)[0] + "*")
    excluded = list(wide) + [_key_literal(n) for n in names]
    dfa = difference(universe, compile_dfa("(?:" + "|".join(excluded) + ")"))
    return None if dfa is None else automaton_text(automaton(dfa))


class KeyPatterns:
    """One object's patternProperties: key patterns (JSON Schema search semantics) over canonical key bodies."""

    def __init__(self, patterns: dict, path: str) -> None:

        self.schemas = patterns
        self.bodies: dict[str, str] = {}
        self.wide: dict[str, str] = {}
        """What a key matching a pattern under either engine's meaning may look like (for exclusions)."""
        for pattern in patterns:
            try:
                self.bodies[pattern] = json_string_body_pattern(pattern)
                self.wide[pattern] = json_string_body_pattern(pattern, wide=True)
            except UnsupportedSchemaError as err:
                raise UnsupportedSchemaError(path, "patternProperties", f"{pattern!r}: {err.detail}") from None
        self.dfas = {}
        for pattern, body in self.wide.items():
            try:
                self.dfas[pattern] = compile_dfa(body)
            except EmptyLanguageError:
                continue  # no key matches it
        by_schema: dict[str, list[str]] = {}
        for pattern, sub in patterns.items():
            if pattern not in self.dfas:
                continue
            by_schema.setdefault(json.dumps(sub, sort_keys=True, default=repr), []).append(pattern)
        self.groups = list(by_schema.values())
        """Patterns with identical schemas, together (a key matching several of them needs that schema once)."""
        if len(self.groups) > _MAX_KEY_GROUPS:
            raise UnsupportedSchemaError(path, "patternProperties",
                                         f"more than {_MAX_KEY_GROUPS} patterns with distinct schemas")
        self.group_bodies = tuple("(?:" + "|".join(self.bodies[p] for p in g) + ")" for g in self.groups)
        self.group_wide = tuple("(?:" + "|".join(self.wide[p] for p in g) + ")" for g in self.groups)

    def matching(self, name: str) -> list[str]:
        """The patterns a listed name may match (either engine), one per group (their schemas all apply to it)."""
        key = json_text(name)[1:-1].encode("utf-8")
        return [next(p for p in g if self.dfas[p].accepts(key)) for g in self.groups
                if any(self.dfas[p].accepts(key) for p in g)]

    def regions(self, names: list[str]) -> list[tuple[str, list[str]]]:
        """(key body pattern, one pattern per group that applies) for the keys not listed that match a pattern."""
        regions = key_regions(self.group_bodies, self.group_wide, tuple(names))
        return [(keys, [self.groups[i][0] for i in subset]) for keys, subset in regions]

    def others(self, names: list[str]) -> str | None:
        """Key body pattern of the keys additionalProperties governs (None: no such key)."""
        return key_others(self.group_wide, tuple(names))


class KeyFilter:
    """``propertyNames``: the quoted-key language its schema allows (its compiled string pattern, as a DFA)."""

    def __init__(self, names_pattern: str | None) -> None:

        self.dfa = None
        if names_pattern is not None:
            try:
                self.dfa = compile_dfa(names_pattern)
            except EmptyLanguageError:
                self.dfa = None

    def allows(self, name: str) -> bool:
        """Whether the schema allows a listed name."""
        return self.dfa is not None and self.dfa.accepts(json.dumps(name, ensure_ascii=False).encode("utf-8"))

    def keys(self, quoted: str) -> str | None:
        """The keys of ``quoted`` (a pattern of quoted keys) that the schema allows, as an automaton; None: none."""

        if self.dfa is None:
            return None
        try:
            both = intersection(compile_dfa(quoted), self.dfa)
        except EmptyLanguageError:
            return None
        return None if both is None else automaton_text(automaton(both))
