"""The patterns of one flat node's values: enum/const, strings, integers, numbers, objects and arrays.

    flat node (`walk.Flat`)
        │ compile_flat: enum/const (finite, filtered by a real validator) or one branch per JSON type
        ▼
    string: units, formats (`json_lexemes.format_body`), ECMA ``pattern`` via constrained.regex, computed languages
    (`strings`); integer / number: exact digit ranges (`numbers`); object: members in schema order or any order,
    extra keys, counted members (`keys`, `members`); array: prefix items and items, counted
        ▼
    pattern text (rule mode: rules of a pushdown grammar in `rules`, nested values called where they occur)

`SchemaCompiler` is the whole compiler: `walk.SchemaWalk` (the state and the walk through schema nodes), the array
values of `arrays`, and the other value kinds here. Every keyword of a node is honoured or refused; numeric bounds are exact.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from typing import Any

from constrained.dialect.json_lexemes import UNIT, format_body
from constrained.dialect.writer import Pattern, alt, escape_literal, rep
from constrained.errors import GrammarTooLargeError, InvalidSchemaError, UnsupportedSchemaError
from constrained.frontends.json_schema import policy
from constrained.frontends.json_schema.arrays import ArrayValues
from constrained.frontends.json_schema.counted import CountedLexeme
from constrained.frontends.json_schema.flat_nodes import conj, json_text, json_type, pointer_token, type_set, value_key
from constrained.frontends.json_schema.keys import KeyFilter, KeyPatterns
from constrained.frontends.json_schema.members import counted_members, subsequences
from constrained.frontends.json_schema.numbers import compile_integer, compile_number
from constrained.frontends.json_schema.policy import Whitespace
from constrained.rules import call as rule_call
from constrained.frontends.json_schema.strings import (
    bodies_dfa,
    excluded_keys_automaton,
    is_wide_lexeme,
    not_pattern_body,
    string_body_excluding,
    string_language,
)
from constrained.frontends.json_schema.vocabulary import (
    ALL_PATTERNS,
    NOT_PATTERN,
    NOT_STRINGS,
    RULE_REF,
    SOME_MEMBER,
    TYPES,
    internal_validators,
)
from constrained.dialect.json_string import NO_BODY, json_string_body_pattern

__all__ = ["SchemaCompiler"]

_MAX_WITNESS_CHOICES = 64
"""Most alternatives `SchemaCompiler.witnessed_object` writes (each choice of witnesses among the listed names)."""
_MAX_COUNTED_WAYS = 512
"""Most gap-count combinations `SchemaCompiler.counted_witnesses` writes for one order of witnesses."""
_MAX_WITNESSES = 4
"""Most `SOME_MEMBER` entries one object's extra members must witness (their claims are the 2^n - 1 subsets)."""


def _partitions(bits: int) -> list[tuple[int, ...]]:
    """The set partitions of a bit set, each a tuple of blocks (bit sets)."""
    if not bits:
        return [()]
    low = bits & -bits
    rest = bits ^ low
    out = []
    sub = rest
    while True:  # the block holding the lowest bit: it and any subset of the rest
        for more in _partitions(rest ^ sub):
            out.append((low | sub, *more))
        if not sub:
            break
        sub = (sub - 1) & rest
    return out

_COUNTED_CHARS = 2_048
"""Rule mode: a string whose length may vary by more than this many characters counts them in rules
(`SchemaCompiler.counted_end`); ``UNIT{0,2048}`` alone is over half the NFA budget."""
_CHUNK_CHARS = 256
"""The characters one counting rule takes at a time (its automaton: ~1,300 states; 256 rules cover 65,536)."""
_MEMBER_BLOCK = 16
"""Finer rule mode: optional members per block of `SchemaCompiler.subsequence_rules`."""
_SHAPED = frozenset({"pattern", "format", NOT_PATTERN, NOT_STRINGS, ALL_PATTERNS})
"""The string keywords that give a lexeme its own automaton (worth sharing when it is wide)."""


class SchemaCompiler(ArrayValues):
    """One compilation (see `walk.SchemaWalk`), with the patterns of each kind of value (arrays: `arrays`)."""

    def __init__(self, root: Any, whitespace: Whitespace, max_depth: int, any_value_depth: int,
                 unknown_keywords: str = "warn") -> None:
        super().__init__(root, whitespace, max_depth, any_value_depth, unknown_keywords)
        self._validator: Any = None
        self._verdicts: dict[tuple[int, str], bool] = {}
        self._lexemes: dict[str, str] = {}
        """Rule mode: each constrained string value's pattern → the name of the call standing for it (see
        `share_lexemes`)."""
        self._counted: dict[tuple[tuple[str, ...], int, int | None], Pattern] = {}
        """Rule mode: the counted lexemes written so far (`counted_lexeme`), by (bodies, lo, hi)."""

    # -- one flat node ----------------------------------------------------------------------------------------------

    def compile_flat(self, flat: dict, path: str, depth: int, trail: tuple[str, ...], original: Any) -> Pattern:
        """Pattern of one flat node: a call of a recursive reference's rule, a finite set, or its types' values."""
        if RULE_REF in flat:
            return self.compile_rule(self.pointer(flat[RULE_REF], path), flat[RULE_REF], trail)
        if "enum" in flat:
            return self.compile_enum(flat, path, depth, original)
        types = flat.get("type", list(TYPES))
        parts: list[Pattern] = []
        for t in types:
            if t == "null":
                parts.append("null")
            elif t == "boolean":
                parts.append("(?:true|false)")
            elif t == "string":
                parts.append(self.string_value(flat, path, depth))
            elif t == "integer":
                parts.append(compile_integer(flat, path))
            elif t == "number":
                parts.append(compile_number(flat, path))
            elif t == "object":
                parts.append(self.compile_object(flat, path, depth + 1, trail + ("|",)))
            elif t == "array":
                parts.append(self.compile_array(flat, path, depth + 1, trail + ("|",)))
        return alt(parts)

    def compile_enum(self, flat: dict, path: str, depth: int, original: Any) -> Pattern:
        """A finite set: keep the candidates the whole node accepts, then spell each one."""
        fmt = flat.get("format")
        simple = set(flat) <= {"enum", "type", "format"}
        validator = None
        choices: dict[str, str] = {}
        for value in flat["enum"]:
            if simple:
                if "type" in flat and json_type(value) not in type_set(flat):
                    continue
            else:
                verdict_key = (id(original), value_key(value))
                if verdict_key not in self._verdicts:
                    validator = validator or self.validator().evolve(schema=original)
                    try:
                        self._verdicts[verdict_key] = validator.is_valid(value)
                    except Exception as exc:  # a malformed sibling keyword (e.g. "not": null) breaks jsonschema
                        raise InvalidSchemaError(path, f"cannot evaluate the enum/const candidates against this "
                                                       f"schema: {type(exc).__name__}: {exc}") from None
                if not self._verdicts[verdict_key]:
                    continue
            if "format" in flat and isinstance(value, str) and not re.fullmatch(format_body(fmt), value):
                continue
            choices.setdefault(value_key(value), self.literal(value, path))
        return alt(list(choices.values()))

    def validator(self) -> Any:
        """The `jsonschema` validator of the root (its draft's, the internal keywords added), made once."""
        if self._validator is None:
            import jsonschema  # noqa: PLC0415 (only the enum filter needs it)

            cls = jsonschema.validators.validator_for(self.root, default=jsonschema.Draft202012Validator)
            cls = jsonschema.validators.extend(cls, internal_validators())  # enum candidates meet them too
            self._validator = cls(self.root, format_checker=cls.FORMAT_CHECKER)
        return self._validator

    def literal(self, value: Any, path: str) -> str:
        """One JSON value spelled in the whitespace policy (keys in the value's own order)."""
        if isinstance(value, dict):
            if not value:
                return rf"\{{{self.ws}\}}"
            pairs = [f"{escape_literal(json_text(k))}{self.colon}{self.literal(v, path)}" for k, v in value.items()]
            return rf"\{{{self.ws}" + self.sep.join(pairs) + rf"{self.ws}\}}"
        if isinstance(value, list):
            if not value:
                return rf"\[{self.ws}\]"
            return rf"\[{self.ws}" + self.sep.join(self.literal(v, path) for v in value) + rf"{self.ws}\]"
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidSchemaError(path, "enum/const value is not finite JSON")
        try:
            return escape_literal(json_text(value))
        except UnsupportedSchemaError as err:
            raise UnsupportedSchemaError(path, "enum", err.detail) from None

    # -- strings -----------------------------------------------------------------------------------------------------

    def string_value(self, flat: dict, path: str, depth: int) -> Pattern:
        """A string value. In rule mode, a constrained one inside a container stands as a call of its lexeme, until
        `share_lexemes` decides whether it stays one."""
        lexeme = self.compile_string(flat, path)
        if self.rules is None or depth == 0 or lexeme is None or not _SHAPED.intersection(flat):
            return lexeme  # a string with lengths at most: the string-body shortcut serves it wherever it is
        if lexeme in self._counted.values():
            return lexeme  # already calls rules of its own (a counted lexeme)
        name = self._lexemes.get(lexeme)
        if name is None:
            name = self._lexemes[lexeme] = f"s{len(self._lexemes)}"
            self.lexeme_extra[name] = len(lexeme) - len(rule_call(name))
        return rule_call(name)

    def share_lexemes(self, rules: dict[str, str]) -> dict[str, str]:
        """Rule mode's last step: a wide string lexeme that occurs more than once in the rules becomes one rule they
        all call, so its states (and their masks, a full trie walk each for a URL's) exist once instead of once per
        occurrence; every other goes back inline, where no call costs anything."""
        for lexeme, name in self._lexemes.items():
            call = rule_call(name)
            if sum(body.count(call) for body in rules.values()) > 1 and is_wide_lexeme(lexeme):
                rules[name] = lexeme
            else:
                rules = {rule: body.replace(call, f"(?:{lexeme})") for rule, body in rules.items()}
        return rules

    def compile_string(self, flat: dict, path: str) -> Pattern:
        """A string value under the node's string keywords: lengths, ``pattern``, ``format`` and the internal ones."""
        lo, hi = flat.get("minLength", 0), flat.get("maxLength")
        if hi is not None and lo > hi:
            return None
        bodies: list[tuple[str, str]] = []
        if "pattern" in flat:
            if not isinstance(flat["pattern"], str):
                raise InvalidSchemaError(path, "pattern must be a string")
            try:

                bodies.append(("pattern", json_string_body_pattern(flat["pattern"])))
            except ImportError:
                raise UnsupportedSchemaError(path, "pattern", "ECMA pattern translation is unavailable") from None
            except UnsupportedSchemaError as err:
                raise UnsupportedSchemaError(path, "pattern", err.detail) from None
        for more in flat.get(ALL_PATTERNS) or ():
            if not isinstance(more, str):
                raise InvalidSchemaError(path, "pattern must be a string")
            try:

                bodies.append(("pattern", json_string_body_pattern(more)))
            except UnsupportedSchemaError as err:
                raise UnsupportedSchemaError(path, "pattern", err.detail) from None
        if "format" in flat:
            bodies.append(("format", format_body(flat["format"])))
        if flat.get(NOT_PATTERN):
            body = not_pattern_body(flat[NOT_PATTERN], path)
            if body is None:
                return None
            bodies.append(("not", body))
        if flat.get(NOT_STRINGS):
            bodies.append(("not", string_body_excluding(tuple(dict.fromkeys(flat[NOT_STRINGS])))))
        if any(body == NO_BODY for _, body in bodies):
            return None  # a pattern no string matches (``a$b``): no string value
        if len(bodies) == 1 and lo == 0 and hi is None:
            return f'"{bodies[0][1]}"'
        if bodies:
            try:
                body = string_language(tuple(b for _, b in bodies), lo, hi)
            except GrammarTooLargeError as err:
                keys = " and ".join(k for k, _ in bodies)
                lengths = lo or hi is not None
                if lengths and self.rules is not None:
                    try:
                        return self.counted_lexeme(tuple(b for _, b in bodies), lo, hi)
                    except GrammarTooLargeError as counted_err:
                        err = GrammarTooLargeError(counted_err.what, counted_err.limit, f"{err.detail}; counted in "
                                                   f"chunk rules instead: {counted_err.detail}")
                keys += " with minLength/maxLength" if lengths else ""
                detail = f"{path}: {keys}" + (f": {err.detail}" if err.detail else "")
                if lengths:
                    detail += (" (the automaton that checks it also counts the characters: smaller bounds fit"
                               + (")" if self.rules is not None else "; the rules of compile_json_schema count "
                                  "them in chunks)"))
                raise GrammarTooLargeError(err.what, err.limit, detail) from None
            return None if body is None else f'"{body}"'
        if self.rules is not None and hi is not None and hi - lo > (_CHUNK_CHARS if self.fine else _COUNTED_CHARS):
            return '"' + rep(UNIT, lo, lo) + self.counted_end(hi - lo)
        return '"' + rep(UNIT, lo, hi) + '"'

    def counted_lexeme(self, bodies: tuple[str, ...], lo: int, hi: int | None) -> Pattern:
        """Rule mode: the strings of the intersected ``bodies`` with ``lo..hi`` characters, counted by chunk rules
        (`counted.CountedLexeme`) where one product automaton would grow with the bound; one set of rules per
        distinct (bodies, lo, hi) of the compile."""
        assert self.rules is not None
        key = (bodies, lo, hi)
        if key not in self._counted:
            dfa = bodies_dfa(bodies)
            entry = None
            if dfa is not None:
                entry = CountedLexeme(dfa, self.rules, f"string.counted{len(self._counted)}", lo, hi).entry
            self._counted[key] = None if entry is None else '"' + entry
        return self._counted[key]

    def counted_end(self, most: int) -> str:
        """Rule mode: a call of rules taking 0 to ``most`` characters and the closing quote, for counts one
        automaton cannot hold (a DFA counts with states per character: maxLength 32767 is ~2.2M NFA states). A chunk
        of `_CHUNK_CHARS` characters is one rule; ``string.end<N>`` is fewer characters than a chunk and the quote,
        or a chunk then ``string.end<N - chunk>``: one parse per length, and the stack stays flat (the rest is a
        tail call, `pushdown.PushdownGrammar._pushes`). The quote is inside the rules, so a rule ends only at a
        chunk's end or after the quote (a rule that could end after any character would make every token an exit of
        the mask walk)."""
        assert self.rules is not None
        chunks, rest = divmod(most, _CHUNK_CHARS)
        chunk, tail, name = f"string.chunk{_CHUNK_CHARS}", f"string.end{_CHUNK_CHARS - 1}", f"string.end{rest}"
        self.rules.setdefault(chunk, rep(UNIT, _CHUNK_CHARS, _CHUNK_CHARS))
        self.rules.setdefault(tail, rep(UNIT, 0, _CHUNK_CHARS - 1) + '"')
        self.rules.setdefault(name, rep(UNIT, 0, rest) + '"')
        for i in range(1, chunks + 1):
            shorter, name = name, f"string.end{i * _CHUNK_CHARS + rest}"
            self.rules.setdefault(name, f"{rule_call(tail)}|{rule_call(chunk)}{rule_call(shorter)}")
        return rule_call(name)

    # -- objects and arrays ------------------------------------------------------------------------------------------

    def compile_object(self, flat: dict, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        """An object value: its listed members, the keys of ``patternProperties`` and ``additionalProperties``, the
        ``propertyNames`` filter, the member counts, the members that must witness ``SOME_MEMBER``."""
        if self.too_deep(depth, path):
            return None
        if flat.get(SOME_MEMBER):
            return self.witnessed_object(flat, path, depth, trail)
        return self.object_members(flat, path, depth, trail, [])

    def witnessed_object(self, flat: dict, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        """``SOME_MEMBER``: each [K, V] is met by a listed name in K (then required, its value also under V) or by
        an extra member (`object_members`' witnesses): one alternative per choice."""
        entries = flat[SOME_MEMBER]
        if not isinstance(entries, list) or not all(isinstance(e, list) and len(e) == 2 for e in entries):
            raise InvalidSchemaError(path, f"{SOME_MEMBER} must be a list of [keys, value] schemas")
        base = {k: v for k, v in flat.items() if k != SOME_MEMBER}
        props, required = base.get("properties", {}), base.get("required", [])
        if not isinstance(props, dict) or not isinstance(required, list):
            raise InvalidSchemaError(path, "properties must be an object and required an array")
        names = list(props) + [r for r in required if r not in props and isinstance(r, str)]
        key_patterns = KeyPatterns(base["patternProperties"], path) if "patternProperties" in base else None
        filters = [self.key_language(keys, f"{path}/{SOME_MEMBER}/{i}", trail) for i, (keys, _) in enumerate(entries)]
        options = [[n for n in names if f.allows(n)] + [None] for f in filters]
        if math.prod(len(o) for o in options) > _MAX_WITNESS_CHOICES:
            raise UnsupportedSchemaError(path, "not", "too many ways to choose the members that witness negations")
        parts: list[Pattern] = []
        for choice in itertools.product(*options):
            listed, needed = dict(props), list(required)
            witnesses = []
            for (keys, value), f, name in zip(entries, filters, choice):
                if name is None:
                    witnesses.append((keys, value))
                    continue
                if name not in listed:  # the schema it had as an unlisted key, patterns conj'ed later as before
                    matched = key_patterns is not None and key_patterns.matching(name)
                    listed[name] = True if matched else base.get("additionalProperties", True)
                listed[name] = conj(listed[name], value)
                needed += [name] if name not in needed else []
            variant = {**base, "properties": listed, "required": needed} if listed else base
            parts.append(self.object_members(variant, path, depth, trail, witnesses))
        return alt(parts)

    def key_language(self, keys: Any, where: str, trail: tuple[str, ...]) -> KeyFilter:
        """A schema for keys (``propertyNames``, a witness's K) as the quoted-key language it allows (its string
        values), to filter keys with."""
        flats = self.flatten({"allOf": [keys, {"type": "string"}]}, where, trail)
        return KeyFilter(alt([self.compile_flat(f, fpath, 0, ftrail, keys) for f, fpath, ftrail in flats]))

    def object_members(self, flat: dict, path: str, depth: int, trail: tuple[str, ...],
                       witnesses: list[tuple[Any, Any]]) -> Pattern:
        """`compile_object` of a node, with ``witnesses`` ([K, V] each) to be met by extra members."""
        props = flat.get("properties", {})
        required = flat.get("required", [])
        if not isinstance(props, dict):
            raise InvalidSchemaError(f"{path}/properties", "properties must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise InvalidSchemaError(f"{path}/required", "required must be an array of strings")
        required = list(dict.fromkeys(required))
        extra = flat.get("additionalProperties", True)
        members: list[tuple[str, str, bool]] = []
        names = list(props) + [r for r in required if r not in props]
        key_patterns = KeyPatterns(flat.get("patternProperties", {}), path) if "patternProperties" in flat else None
        key_filter = (self.key_language(flat["propertyNames"], f"{path}/propertyNames", trail)
                      if "propertyNames" in flat else None)
        for name in names:
            sub_path = f"{path}/properties/{pointer_token(name)}" if name in props else f"{path}/additionalProperties"
            sub: Any = props[name] if name in props else extra
            if key_patterns is not None:
                matched = key_patterns.matching(name)
                if matched:
                    sub = props[name] if name in props else True
                    for pattern in matched:
                        sub = conj(sub, key_patterns.schemas[pattern])
                    if name not in props:
                        sub_path = f"{path}/patternProperties/{pointer_token(matched[0])}"
            value = self.compile(sub, sub_path, depth, trail)
            if key_filter is not None and not key_filter.allows(name):
                value = None  # propertyNames rejects this name
            if value is None:
                if name in required:
                    return None
                continue
            try:
                key = escape_literal(json_text(name))
            except UnsupportedSchemaError as err:
                raise UnsupportedSchemaError(sub_path, "properties", err.detail) from None
            members.append((f"{key}{self.colon}{value}", name, name in required))
        regions: list[tuple[str, Any, str]] = []  # (quoted keys, value schema or None: implicit, path)
        if key_patterns is not None:
            for keys, schemas in key_patterns.regions(names):
                sub = True
                for pattern in schemas:
                    sub = conj(sub, key_patterns.schemas[pattern])
                quoted: Pattern = f'"{keys}"' if key_filter is None else key_filter.keys(f'"{keys}"')
                if quoted is not None:
                    regions.append((quoted, sub, f"{path}/patternProperties/{pointer_token(schemas[0])}"))
        if extra is not False:
            others = (key_patterns.others(names) if key_patterns is not None else
                      excluded_keys_automaton(tuple(names)) if self.fine else string_body_excluding(tuple(names)))
            quoted = (None if others is None else f'"{others}"' if key_filter is None
                      else key_filter.keys(f'"{others}"'))
            if quoted is not None:
                regions.append((quoted, extra if "additionalProperties" in flat else None,
                                f"{path}/additionalProperties"))
        extra_pattern = alt([self.extra_member(keys, sub, where, depth, trail) for keys, sub, where in regions])
        claims = self.witness_claims(regions, witnesses, path, depth, trail)
        min_p, max_p = flat.get("minProperties", 0), flat.get("maxProperties")
        n_required = sum(1 for m in members if m[2])
        if max_p is not None and n_required > max_p:
            return None
        if claims is not None:
            if not claims:
                return None
            assert extra_pattern is not None  # the claims are extra members
            if max_p is not None or min_p > n_required + 1:  # a witness is one member beyond the required ones
                with_claims = functools.partial(self.members_body, claims=claims)
                counted = functools.partial(self.counted_witnesses, extra_pattern, claims, path)
                body, _ = counted_members(members, extra_pattern, self.sep, min_p, max_p, with_claims, path, counted)
                return self.container(r"\{", r"\}", body, False)
            if self.any_order and members:
                return self.any_order_object(members, extra_pattern, claims)
            body, can_be_empty = self.members_body(members, extra_pattern, claims)
            return self.container(r"\{", r"\}", body, can_be_empty)
        if min_p > n_required or (max_p is not None and (extra_pattern is not None or len(members) > max_p)):
            body, can_be_empty = counted_members(members, extra_pattern, self.sep, min_p, max_p,
                                                 self.members_body, path)
            return self.container(r"\{", r"\}", body, can_be_empty)
        if self.any_order and members and len(members) + (extra_pattern is not None) > 1:
            return self.any_order_object(members, extra_pattern)
        body, can_be_empty = self.members_body(members, extra_pattern)
        return self.container(r"\{", r"\}", body, can_be_empty)

    def extra_member(self, quoted: str, sub: Any, where: str, depth: int, trail: tuple[str, ...],
                     also: Any = True) -> Pattern:
        """An extra member: a key of ``quoted``, its value under ``sub`` (None: implicit extras, shallower
        open-ended values) and ``also``."""
        value: Pattern
        if sub is None and (also is True or also == {}):
            budget = min(policy.IMPLICIT_EXTRA_DEPTH, self.any_value_depth)
            value = self.any_value(depth, budget, where)
        else:
            value = self.compile(conj(True if sub is None else sub, also), where, depth, trail)
        return None if value is None else f"{quoted}{self.colon}{value}"

    def witness_claims(self, regions: list[tuple[str, Any, str]], witnesses: list[tuple[Any, Any]], path: str,
                       depth: int, trail: tuple[str, ...]) -> dict[int, str] | None:
        """For each non-empty set T of ``witnesses`` (bits), the extra members that witness all of T at once
        (key in every K, value under every V); None: no witnesses."""
        if not witnesses:
            return None
        if len(witnesses) > _MAX_WITNESSES:
            raise UnsupportedSchemaError(path, "not", f"more than {_MAX_WITNESSES} extra members that must "
                                         "witness negations")
        claims: dict[int, str] = {}
        for bits in range(1, 1 << len(witnesses)):
            chosen = [w for i, w in enumerate(witnesses) if bits >> i & 1]
            keys = self.key_language({"allOf": [k for k, _ in chosen]}, f"{path}/{SOME_MEMBER}", trail)
            value = functools.reduce(conj, [v for _, v in chosen], True)
            found = []
            for quoted, sub, where in regions:
                narrowed = keys.keys(quoted)
                if narrowed is not None:
                    found.append(self.extra_member(narrowed, sub, where, depth, trail, value))
            claim = alt(found)
            if claim is not None:
                claims[bits] = claim
        full = (1 << len(witnesses)) - 1
        return claims if any(set(p) <= set(claims) for p in _partitions(full)) else {}

    def witnessed_extras(self, extra: str, claims: dict[int, str], leading: bool) -> Pattern:
        """Extra members in a row (behind a separator if ``leading``), one of them witnessing each set of a
        partition of the witnesses, in some order."""
        sep, full = self.sep, max(claims).bit_length()
        ways = []
        for blocks in _partitions((1 << full) - 1):
            if not set(blocks) <= set(claims):
                continue
            for order in itertools.permutations(blocks):
                text = ""
                for j, bits in enumerate(order):
                    text += (f"(?:{extra}{sep})*{claims[bits]}" if j == 0 and not leading
                             else f"(?:{sep}{extra})*{sep}{claims[bits]}")
                ways.append(text + f"(?:{sep}{extra})*")
        return alt(ways)

    def counted_witnesses(self, extra: str, claims: dict[int, str], path: str, started: bool, need: int,
                          room: int | None) -> Pattern:
        """`witnessed_extras` with between ``need`` and ``room`` extra members in all (behind a separator each if
        ``started``): for each order of a partition's claims, the plain extras around them counted gap by gap."""
        sep, full = self.sep, (1 << max(claims).bit_length()) - 1
        top = max(need, room or 0)
        ways: list[Pattern] = []

        def gaps(order: tuple[int, ...], k: int, lo: int, hi: int | None, first: bool) -> Pattern:
            """The plain extras before claim k then the rest (k = len(order): the last run), lo to hi of them."""
            if k == len(order):
                return None if hi is not None and hi < lo else rep(f"{sep}{extra}", lo, hi)
            unit = f"{extra}{sep}" if first else f"{sep}{extra}"
            claim = claims[order[k]] if first else f"{sep}{claims[order[k]]}"
            if hi is None and lo == 0:
                rest = gaps(order, k + 1, 0, None, False)
                return None if rest is None else f"(?:{unit})*{claim}{rest}"
            options: list[Pattern] = []
            for count in range((lo if hi is None else hi) + 1):
                more = hi is None and count == lo  # the count reached: any number more, here or after
                rest = gaps(order, k + 1, 0 if more else max(lo - count, 0), None if hi is None else hi - count,
                            False)
                if rest is not None:
                    options.append(rep(unit, count, None if more else count) + claim + rest)
            return alt(options)

        for blocks in _partitions(full):
            if not set(blocks) <= set(claims) or (room is not None and room < len(blocks)):
                continue
            if (top + 1) ** len(blocks) > _MAX_COUNTED_WAYS:
                raise UnsupportedSchemaError(path, "maxProperties", "counting members around that many witnesses")
            for order in itertools.permutations(blocks):
                lo, hi = max(need - len(order), 0), None if room is None else room - len(order)
                ways.append(gaps(order, 0, lo, hi, not started))
        return alt(ways)

    def any_order_object(self, members: list[tuple[str, str, bool]], extra: str | None,
                         claims: dict[int, str] | None = None) -> str:
        """An object whose members come in any order, each listed one at most once, the required ones all in, as a
        call of its own rule (its markers must be its own: `constrained.pushdown`'s guarded calls)::

            { ( C | M ( S M )* C )     M = ws "key" ws : ws value      S = ws ,      C = ws }

        The whitespace before a key leads its member's rule, not the separator's: a separator then ends at its
        comma, and a mask walks every member below that one exit in one pass (a separator of its own whitespace
        would end in as many states as the whitespace has, each walked on its own). A listed member ``k`` is
        called ``once=k``; C needs the required members; S has room while a listed member is out (always, with
        extra keys). With required members, ``bound`` chains give the budget its completion: the required members
        in schema order, then the brace, each piece under its member's marker."""
        assert self.rules is not None
        name = f"object{len(self.rules)}"
        n = len(members)
        claims = claims or {}
        marker = {bits: n + i for i, bits in enumerate(claims)}  # a claim of witnesses, called once
        listed = ",".join(map(str, range(n)))
        lead, separator_body = (self.ws, f"{self.ws},") if self.sep == f"{self.ws},{self.ws}" else ("", self.sep)
        for shared, body in (("obj.s", separator_body), ("obj.c", rf"{self.ws}\}}")):
            self.rules.setdefault(shared, body)
        alternatives = []
        for k, (pattern, _, _) in enumerate(members):
            self.rules[f"{name}.m{k}"] = lead + pattern
            alternatives.append(rule_call(f"{name}.m{k}", f"once={k}"))
        for bits, claim in claims.items():
            self.rules[f"{name}.m{marker[bits]}"] = lead + claim
            alternatives.append(rule_call(f"{name}.m{marker[bits]}", f"once={marker[bits]}"))
        if extra is not None:
            self.rules[f"{name}.x"] = lead + extra
            alternatives.append(rule_call(f"{name}.x"))
        required = [k for k, (_, _, is_required) in enumerate(members) if is_required]
        ways = [[marker[b] for b in blocks] for blocks in _partitions((1 << max(claims).bit_length()) - 1)
                if set(blocks) <= set(claims)] if claims else [[]]
        ways.sort(key=len)
        close = "|".join(rule_call("obj.c", f"needs={','.join(map(str, required + way))}" if required + way else "")
                         for way in ways)
        chain = required + ways[0]  # what the budget counts on: the required members, the fewest witnesses
        if chain:
            first, *rest = chain
            owed = "".join(rule_call("obj.s", f"once={k}") + rule_call(f"{name}.m{k}", f"once={k}") for k in rest)
            self.rules[f"{name}.b0"] = rule_call(f"{name}.m{first}", f"once={first}") + owed + rule_call("obj.c")
            self.rules[f"{name}.b"] = rule_call("obj.s", f"once={first}") + self.rules[f"{name}.b0"]
        close_empty = close + ("|" + rule_call(f"{name}.b0", "bound") if chain else "")
        close_after = close + ("|" + rule_call(f"{name}.b", "bound") if chain else "")
        separator = rule_call("obj.s", "" if extra is not None else f"room={listed}")
        member = f"(?:{'|'.join(alternatives)})"
        self.rules[name] = rf"\{{(?:{close_empty}|{member}(?:{separator}{member})*(?:{close_after}))"
        return rule_call(name)

    def members_body(self, members: list[tuple[str, str, bool]], extra: str | None,
                     claims: dict[int, str] | None = None) -> tuple[Pattern, bool]:
        """Comma-joined members in schema order: required always, optional ones optional, extras last (with
        ``claims``: extras that witness every `SOME_MEMBER` entry, `witnessed_extras`)."""
        sep = self.sep
        extras_tail = f"(?:{sep}{extra})*" if extra else ""
        if claims:
            assert extra is not None
            extras_tail = f"(?:{self.witnessed_extras(extra, claims, True)})"
        first_required = next((i for i, m in enumerate(members) if m[2]), None)
        if first_required is not None:
            head = "".join(f"(?:{p}{sep})?" for p, _, _ in members[:first_required]) + members[first_required][0]
            tail = "".join(f"{sep}{p}" if req else f"(?:{sep}{p})?" for p, _, req in members[first_required + 1:])
            return head + tail + extras_tail, False
        parts = [p for p, _, _ in members]
        listed = (self.subsequence_rules(parts) if self.fine else subsequences(parts, sep)) if members else None
        if claims:
            assert extra is not None
            alone = self.witnessed_extras(extra, claims, False)
            return alt([None if listed is None else f"(?:{listed}){extras_tail}", alone]), False
        first = alt([listed, extra])
        return (None if first is None else first + extras_tail), True

    def subsequence_rules(self, parts: list[str]) -> str:
        """`subsequences` as rules over blocks of `_MEMBER_BLOCK` members, linear in size (``fine`` rule mode: one
        pattern copies each member O(log n) times, too many NFA states for an object of a hundred optional
        members): ``N_k`` is a subsequence starting in block k then ``T_{k+1}``, or ``N_{k+1}``; ``T_k`` is one of
        block k behind a separator, optionally, then ``T_{k+1}``. Within a block one automaton holds the choice of
        the next member, so a mask between members has one configuration per block left, not one per member."""
        assert self.rules is not None
        prefix = f"members{len(self.rules)}"
        blocks = [subsequences(parts[i:i + _MEMBER_BLOCK], self.sep) for i in range(0, len(parts), _MEMBER_BLOCK)]
        rest = ""  # T_{k+1}: nothing after the last block
        for k in range(len(blocks) - 1, -1, -1):
            skip = f"|{rule_call(f'{prefix}.n{k + 1}')}" if k < len(blocks) - 1 else ""
            self.rules[f"{prefix}.n{k}"] = f"(?:{blocks[k]}){rest}{skip}"
            self.rules[f"{prefix}.t{k}"] = f"(?:{self.sep}(?:{blocks[k]}))?{rest}"
            rest = rule_call(f"{prefix}.t{k}")
        return rule_call(f"{prefix}.n0")
