"""The dialect's text form: pattern text → `Node` (`parse`), and the ``(?@...)`` automaton text both ways.

Owns the one dialect every grammar is written in (schema output, codec grammars, user regexes): a subset of
Python ``re`` syntax, interpreted over Unicode text, always full-match. What it accepts:

    literals · escapes \\ \\. \\* \\+ \\? \\( \\) \\[ \\] \\{ \\} \\| \\^ \\$ \\- \\/ \\" \\n \\r \\t \\f \\v
    \\xHH \\uHHHH \\UHHHHHHHH (and any other escaped non-alphanumeric character, as in Python) ·
    classes [...] [^...] with ranges and \\d \\w \\s \\D \\W \\S (ASCII meanings) · . (any scalar but \\n) ·
    * + ? {n} {n,} {n,m} {,m} (lazy ? suffix: same language) · ( ) (?: ) (?P<name> ) · | ·
    ^ only at the very start, $ only at the very end (no-ops; in ECMA mode anywhere, see below) ·
    (?&NAME) one special-token terminal, only with allow_special=True ·
    (?@ROW;ROW;...) an explicit byte automaton (`Automaton`; what the schema compiler embeds for intersections
    and complements): row i is state i (state 0 starts), ``!`` first if it accepts, then its edges ``LO>T`` or
    ``LO-HI>T`` joined by ``,`` (two lowercase hex digits per byte, T in decimal), sorted by byte, disjoint,
    adjacent ranges with one target merged. Only that canonical form (what `automaton_text` prints) parses.
    Such patterns are not Python ``re`` syntax.

What it refuses, with a `RegexSyntaxError` naming the feature: lookarounds, backreferences, inline flags,
atomic groups, possessive quantifiers, conditionals, word boundaries and anchors other than a leading ``^`` /
trailing ``$``, unknown letter escapes, groups nested deeper than `MAX_NESTING`, and code points that are not
Unicode scalar values (surrogates).

    pattern text ──parse──► Node (see `constrained.dialect.nodes`)

The same recursive descent, in its ECMA mode, reads the ECMA-262 patterns of JSON Schema (`parse_ecma`, for
`constrained.dialect.json_string`); there ``^`` and ``$`` may stand anywhere (not under a quantifier of their own)
and are resolved exactly into anchored top-level branches (`constrained.dialect.anchors`).

Parsed groups and classes are cached by exact text (module-wide, bounded, see `cached_group`): schema patterns
repeat the same sub-patterns dozens of times, and identical groups then share one node (ASTs are immutable). The
cache changes no AST and no error; `clear_caches` empties it.

Imports only `constrained.errors` and the other dialect modules.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass

from constrained.dialect.anchors import END, START, resolve_anchors
from constrained.dialect.classes import DOT, ECMA_DOT, shorthand_ranges
from constrained.dialect.nodes import (
    MAX_SCALAR,
    SURROGATES,
    Alternation,
    Automaton,
    CharSet,
    Concat,
    Empty,
    Node,
    Range,
    Repeat,
    Special,
    negate_ranges,
    normalize_ranges,
    utf8_sequences,
)
from constrained.errors import RegexSyntaxError

__all__ = [
    "MAX_NESTING",
    "Branch",
    "parse",
    "parse_ecma",
    "clear_caches",
    "cached_group",
    "GroupEntry",
    "automaton_text",
]

MAX_NESTING = 100
"""Deepest group nesting the parser accepts (keeps every recursive pass far from Python's recursion limit); ECMA
patterns get 4 levels less (their JSON-body translation adds a few)."""


# ------------------------------------------------------------------------------------------------------- parser

_SIMPLE_ESCAPES = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B}
_ANCHOR_ESCAPES = {"b": "word boundary \\b", "B": "non-word-boundary \\B", "A": "anchor \\A", "Z": "anchor \\Z",
                   "z": "anchor \\z", "G": "anchor \\G"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Branch:
    """One top-level alternative with the anchors written around it (what `parse_ecma` returns)."""

    node: Node
    anchored_start: bool
    """Whether a ``^`` opens it."""
    anchored_end: bool
    """Whether a ``$`` closes it."""


class _Parser:
    """Recursive descent over the dialect (or, with ``ecma``, over the ECMA-262 subset `json_string_body_pattern`
    accepts: ``(?<name>…)`` groups, ``\\0``, UTF-16 surrogate pairs, ECMA ``.``/``\\s``, ``^``/``$`` anywhere as
    `START`/`END` markers that `parse_ecma` resolves)."""

    def __init__(self, pattern: str, *, allow_special: bool, ecma: bool, wide: bool = False) -> None:
        self.pattern = pattern
        self.pos = 0
        self.allow_special = allow_special
        self.ecma = ecma
        self.wide = wide
        """ECMA only: the union of the ECMA and Python meanings instead of their intersection (see
        `shorthand_ranges`)."""
        self.cache_mode = "wide" if wide else ecma
        """The dialect part of the class and group cache keys."""
        self.depth = 0
        self.negated_class = False
        """Whether the class being parsed is ``[^...]`` (ECMA ``\\s``/``\\S`` then take the other meaning)."""
        self.deepest = 0
        """Deepest group nesting reached so far inside the group being parsed (cached with it: `cached_group`)."""

    # -- helpers

    def error(self, detail: str, position: int | None = None) -> RegexSyntaxError:
        return RegexSyntaxError(self.pattern, self.pos if position is None else position, detail)

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.pattern[i] if i < len(self.pattern) else ""

    def at_end(self) -> bool:
        return self.pos >= len(self.pattern)

    # -- grammar

    def parse_top(self) -> list[Branch]:
        branches = [self.parse_top_branch(first=True)]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.parse_top_branch(first=False))
        if not self.at_end():  # only an unmatched ')' stops a top-level branch early
            raise self.error("unbalanced parenthesis ')'")
        return branches

    def parse_top_branch(self, *, first: bool) -> Branch:
        start = False
        if self.peek() == "^" and not self.ecma:  # ECMA: a `START` marker, resolved by `parse_ecma`
            if not (first and self.pos == 0):
                raise self.error("anchor '^' is only supported at the very start of the pattern")
            start = True
            self.pos += 1
        node, end = self.parse_sequence(top=True)
        return Branch(node=node, anchored_start=start, anchored_end=end)

    def parse_alternation(self) -> Node:
        items = [self.parse_sequence(top=False)[0]]
        while self.pattern.startswith("|", self.pos):
            self.pos += 1
            items.append(self.parse_sequence(top=False)[0])
        return _alternation(items)

    def parse_sequence(self, *, top: bool) -> tuple[Node, bool]:
        """Items up to ``|``, ``)`` or the end; returns the node and whether a trailing ``$`` closed it."""
        items: list[Node] = []
        pattern = self.pattern
        n = len(pattern)
        while self.pos < n:
            c = pattern[self.pos]
            if c in "|)":
                break
            if c in "^$" and self.ecma:
                self.pos += 1
                if self.pos < n and pattern[self.pos] in _QUANTIFIER_STARTS and (
                        pattern[self.pos] != "{" or self.scan_braces() is not None):
                    raise self.error("nothing to repeat (a quantifier on an anchor)")
                items.append(START if c == "^" else END)
                continue
            if c == "$":
                nxt = self.peek(1)
                if top and (nxt == "" or (self.ecma and nxt == "|")):
                    self.pos += 1
                    return _concat(items), True
                raise self.error("anchor '$' is only supported at the very end of the pattern")
            if c == "^":
                raise self.error("anchor '^' is only supported at the very start of the pattern")
            run = _PLAIN_RUN.match(pattern, self.pos)
            if run is not None:  # the common case: plain literals; a quantifier binds to the last one alone
                end = run.end()
                if end < n and pattern[end] in _QUANTIFIER_STARTS:
                    end -= 1
                if end > self.pos:
                    items.extend(map(_literal_node, map(ord, pattern[self.pos : end])))
                    self.pos = end
                    continue
            atom_pos = self.pos
            atom = self.parse_atom()
            if atom is None:  # a '{' that is not a quantifier is a literal
                atom = _literal(ord("{"))
                self.pos += 1
            if self.pos < n and pattern[self.pos] in _QUANTIFIER_STARTS:
                atom = self.parse_quantifiers(atom, atom_pos)
            items.append(atom)
        return _concat(items), False

    def parse_quantifiers(self, atom: Node, atom_pos: int) -> Node:
        quantified = False
        while True:
            start = self.pos
            bounds = self.parse_quantifier()
            if bounds is None:
                return atom
            if quantified:
                raise self.error("multiple repeat (quantifier on a quantifier)", start)
            lo, hi = bounds
            if hi is not None and lo > hi:
                raise self.error(f"min repeat {lo} greater than max repeat {hi}", start)
            if self.peek() == "?":
                self.pos += 1  # lazy: same language
            elif self.peek() == "+":
                raise self.error("possessive quantifiers are not supported")
            atom = _repeat(atom, lo, hi)
            quantified = True

    def parse_quantifier(self) -> tuple[int, int | None] | None:
        c = self.peek()
        if c == "*":
            self.pos += 1
            return 0, None
        if c == "+":
            self.pos += 1
            return 1, None
        if c == "?":
            self.pos += 1
            return 0, 1
        if c == "{":
            braces = self.scan_braces()
            if braces is not None:
                self.pos, lo, hi = braces
                return lo, hi
        return None

    def scan_braces(self) -> tuple[int, int, int | None] | None:
        """``{n}``, ``{n,}``, ``{n,m}`` (and ``{,m}`` outside ECMA mode) at pos: (end, min, max), else None."""
        p = self.pattern
        i = self.pos + 1
        j = i
        while j < len(p) and p[j].isascii() and p[j].isdigit():
            j += 1
        lo_text = p[i:j]
        if j < len(p) and p[j] == "}":
            if not lo_text:
                return None
            return j + 1, int(lo_text), int(lo_text)
        if j >= len(p) or p[j] != ",":
            return None
        if not lo_text and self.ecma:
            return None
        k = j + 1
        while k < len(p) and p[k].isascii() and p[k].isdigit():
            k += 1
        if k >= len(p) or p[k] != "}":
            return None
        hi_text = p[j + 1 : k]
        return k + 1, int(lo_text or "0"), (int(hi_text) if hi_text else None)

    def parse_atom(self) -> Node | None:
        c = self.pattern[self.pos]  # parse_sequence calls it inside the pattern only
        if c == "(":
            return self.parse_group()
        if c == "[":
            span = _CLASS_SPAN.match(self.pattern, self.pos)
            end = -1 if span is None else span.end()
            key = (self.pattern[self.pos : end], self.cache_mode)
            ranges = _CLASS_CACHE.get(key) if end > 0 else None
            if ranges is None:
                ranges = self.parse_class()
                if end > 0 and self.pos == end and len(_CLASS_CACHE) < 4096:
                    _CLASS_CACHE[key] = ranges
            else:
                self.pos = end
            return CharSet(ranges=ranges)
        if c == ".":
            self.pos += 1
            return CharSet(ranges=ECMA_DOT if self.ecma and not self.wide else DOT)
        if c == "\\":
            return self.parse_escape()
        if c in "*+?":
            raise self.error("nothing to repeat")
        if c == "{":
            if self.scan_braces() is not None:
                raise self.error("nothing to repeat")
            return None
        self.pos += 1
        return _literal(ord(c), self, self.pos - 1)

    def parse_group(self) -> Node:
        open_pos = self.pos
        limit = MAX_NESTING - 4 if self.ecma else MAX_NESTING  # the JSON-body translation adds a few levels
        short_end, cached = cached_group(self.pattern, open_pos, self.cache_mode, self.allow_special)
        if cached is not None and self.depth + cached[1] <= limit:
            node, levels, text_length = cached
            self.pos = open_pos + text_length
            self.deepest = max(self.deepest, self.depth + levels)
            return node
        self.pos += 1
        if self.peek() == "?":
            kind = self.peek(1)
            if kind == ":":
                self.pos += 2
            elif kind == "P" and self.peek(2) == "<":
                self.pos += 3
                self.parse_group_name(open_pos)
            elif kind == "<" and self.peek(2) not in "=!" and self.ecma:
                self.pos += 2
                self.parse_group_name(open_pos)
            elif kind == "&":
                return self.parse_special(open_pos)
            elif kind == "@" and not self.ecma:
                return self.parse_automaton(open_pos)
            else:
                raise self.error(_unsupported_group(self.pattern, open_pos), open_pos)
        self.depth += 1
        if self.depth > limit:
            raise self.error(f"groups nested deeper than {limit}", open_pos)
        outer_deepest = self.deepest
        self.deepest = self.depth
        node = self.parse_alternation()
        levels = self.deepest - self.depth + 1  # this group and the deepest chain of groups inside it
        self.depth -= 1
        self.deepest = max(outer_deepest, self.deepest)
        if self.peek() != ")":
            raise self.error("missing ')': unterminated group", open_pos)
        self.pos += 1
        _remember_group(self.pattern, open_pos, self.pos, short_end, self.cache_mode, self.allow_special, node, levels)
        return node

    def parse_group_name(self, open_pos: int) -> None:
        end = self.pattern.find(">", self.pos)
        if end < 0:
            raise self.error("unterminated group name", open_pos)
        name = self.pattern[self.pos : end]
        if not name.isidentifier():
            raise self.error(f"bad group name {name!r}", self.pos)
        self.pos = end + 1

    def parse_special(self, open_pos: int) -> Node:
        if not self.allow_special:
            raise self.error("special-token terminals (?&NAME) are not allowed in this pattern", open_pos)
        end = self.pattern.find(")", self.pos + 2)
        if end < 0:
            raise self.error("unterminated special-token terminal (?&NAME)", open_pos)
        name = self.pattern[self.pos + 2 : end]
        if not name:
            raise self.error("empty special-token name in (?&)", open_pos)
        self.pos = end + 1
        return Special(name=name)

    def parse_automaton(self, open_pos: int) -> Node:
        end = self.pattern.find(")", open_pos)
        if end < 0:
            raise self.error("unterminated automaton (?@...)", open_pos)
        node = _automaton_from_text(self.pattern[open_pos + 3 : end])
        if node is None:
            raise self.error("automaton (?@...) not in its canonical form", open_pos)
        self.pos = end + 1
        return node

    def parse_escape(self) -> Node:
        start = self.pos
        self.pos += 1
        if self.at_end():
            raise self.error("trailing backslash", start)
        c = self.peek()
        if c in "dDwWsS":
            self.pos += 1
            return CharSet(ranges=shorthand_ranges(c, self.ecma, self.wide))
        if c in _ANCHOR_ESCAPES:
            raise self.error(f"{_ANCHOR_ESCAPES[c]} is not supported", start)
        cp = self.escape_code_point(start, in_class=False)
        if self.ecma and 0xD800 <= cp <= 0xDBFF and self.pattern.startswith("\\u", self.pos):
            saved = self.pos
            self.pos += 1
            low = self.escape_code_point(saved, in_class=False)
            if 0xDC00 <= low <= 0xDFFF:
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
            else:
                self.pos = saved
        return _literal(cp, self, start)

    def escape_code_point(self, start: int, *, in_class: bool) -> int:
        """The code point of a character escape (pos is just past the backslash)."""
        c = self.peek()
        self.pos += 1
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        if c == "b" and in_class:
            return 0x08
        if c in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[c]
            if c == "U" and self.ecma:
                raise self.error("escape \\U is not ECMA-262", start)
            digits = self.pattern[self.pos : self.pos + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"escape \\{c} needs exactly {width} hex digits", start)
            self.pos += width
            cp = int(digits, 16)
            if cp > MAX_SCALAR:
                raise self.error(f"escape \\{c}{digits} is beyond U+10FFFF", start)
            return cp
        if c == "0" and self.ecma and not self.peek().isdigit():
            return 0
        if c.isascii() and c.isdigit():
            raise self.error("backreferences and octal escapes are not supported", start)
        if c.isascii() and c.isalpha():
            if c in _ANCHOR_ESCAPES:
                raise self.error(f"{_ANCHOR_ESCAPES[c]} is not supported", start)
            raise self.error(f"unsupported escape \\{c}", start)
        return ord(c)

    def parse_class(self) -> tuple[Range, ...]:
        open_pos = self.pos
        self.pos += 1
        negate = False
        if self.peek() == "^":
            negate = True
            self.pos += 1
        self.negated_class = negate
        ranges: list[Range] = []
        first = True
        while True:
            if self.at_end():
                raise self.error("unterminated character class", open_pos)
            c = self.peek()
            if c == "]" and first and self.ecma:
                raise self.error("empty ECMA class [] / [^] is not supported", open_pos)
            if c == "]" and not first:
                self.pos += 1
                break
            first = False
            item_pos = self.pos
            lo = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                hi_pos = self.pos
                hi = self.class_atom()
                if isinstance(lo, tuple) or isinstance(hi, tuple):
                    raise self.error("bad character range (a class shorthand cannot be a range end)", item_pos)
                if lo > hi:
                    raise self.error(f"bad character range {chr(lo)!r}-{chr(hi)!r}", item_pos)
                _check_scalar(lo, self, item_pos)
                _check_scalar(hi, self, hi_pos)
                ranges.append((lo, hi))
            elif isinstance(lo, tuple):
                ranges.extend(lo)
            else:
                _check_scalar(lo, self, item_pos)
                ranges.append((lo, lo))
        result = normalize_ranges(ranges)
        return negate_ranges(result) if negate else result

    def class_atom(self) -> int | tuple[Range, ...]:
        c = self.peek()
        if c != "\\":
            self.pos += 1
            return ord(c)
        start = self.pos
        self.pos += 1
        if self.at_end():
            raise self.error("trailing backslash", start)
        c = self.peek()
        if c in "dDwWsS":
            self.pos += 1
            # [^...] negates: the other meaning (exact, for the narrow side's complement)
            return shorthand_ranges(c, self.ecma, self.wide != self.negated_class, exact=self.negated_class)
        cp = self.escape_code_point(start, in_class=True)
        if self.ecma and 0xD800 <= cp <= 0xDFFF:
            raise self.error("UTF-16 surrogate escapes inside a class are not supported", start)
        return cp


_SPECIAL_CHARS = frozenset("\\[](){}|*+?.^$")
_QUANTIFIER_STARTS = frozenset("*+?{")
_PLAIN_RUN = re.compile(r"[^\\\[\](){}|*+?.^$\ud800-\udfff]+")
"""A run of characters that are literals by themselves (not `_SPECIAL_CHARS`, not surrogates)."""
_CLASS_TEXT = r"\[\^?+\]?+(?:[^\]\\]++|\\[\s\S])*+\]"
"""A class as written: ``[``, an optional ``^``, a leading ``]`` taken literally, up to the first unescaped ``]``."""
_CLASS_SPAN = re.compile(_CLASS_TEXT)
_CLASS_CACHE: dict[tuple[str, bool | str], tuple[Range, ...]] = {}
"""Parsed classes by source text (and dialect): schema patterns repeat the same few classes many times."""

GroupEntry = tuple[Node, int, int]
"""A parsed group: (node, nesting levels it spans, length of its text)."""
_SHORT_GROUPS: dict[tuple[str, bool | str, bool], GroupEntry] = {}
"""Parsed groups of at most `_GROUP_WINDOW` characters by exact text (and ``ecma``, ``allow_special``)."""
_LONG_GROUPS: dict[tuple[str, bool | str, bool], list[tuple[str, GroupEntry]]] = {}
"""Longer parsed groups (text, entry) by the `_GROUP_WINDOW` characters they start with (and the flags)."""
_GROUP_WINDOW = 64
_LONG_CANDIDATES = 16
"""Most groups kept per `_LONG_GROUPS` key (the oldest goes first)."""
_GROUP_CACHE_CHARS = 2_000_000
"""Budget on the summed text of the cached groups (both tables start over when it is reached)."""
_GROUP_CACHE_MAX_TEXT = 100_000
"""Groups with longer text are not stored (one such group would crowd out the rest)."""
_group_cache_chars = 0
_group_cache_lock = threading.Lock()

_GROUP_ATOM = r"[^\\\[()]++|\\[\s\S]|" + _CLASS_TEXT + r"|\(\?&[^)]*+\)"  # text, escape, class, (?&NAME)
_SHORT_GROUP = re.compile(
    functools.reduce(lambda inner, _: rf"\((?:{_GROUP_ATOM}|{inner})*+\)", range(3), rf"\((?:{_GROUP_ATOM})*+\)")
)
"""A group with at most four levels of nesting (matched inside a window: linear, possessive)."""


def cached_group(pattern: str, open_pos: int, ecma: bool | str, allow_special: bool) -> tuple[int, GroupEntry | None]:
    """Where the group opened at ``pattern[open_pos]`` probably ends if it is short (else -1), and its cache entry.

    Parsed groups are cached by exact text: schema patterns repeat the same groups (whitespace, string bodies,
    any-value, formats) dozens of times per pattern and across schemas. Sound because a successful group parse
    reads no character outside its own text (``(`` to the matching ``)``) and its node depends on nothing else
    (positions only appear in errors): an entry whose text starts at ``open_pos`` is exactly what parsing there
    would give. The nesting levels keep the depth limit exact (the caller parses again a hit that would exceed
    it, and fails as it always did); only successes are stored, so every error comes from the ordinary parse.
    The probable end only picks the key; it needs no scan of the pattern beyond the window. Readers take no lock:
    entries are immutable and any entry found is sound.
    (Public so that tests can replace it: the parser looks it up here on every group, and with a stub returning
    ``(-1, None)`` parses every group from its text.)
    """
    match = _SHORT_GROUP.match(pattern, open_pos, open_pos + _GROUP_WINDOW)
    if match is not None:
        end = match.end()
        return end, _SHORT_GROUPS.get((pattern[open_pos:end], ecma, allow_special))
    candidates = _LONG_GROUPS.get((pattern[open_pos : open_pos + _GROUP_WINDOW], ecma, allow_special))
    if candidates:
        for text, entry in candidates:
            if pattern.startswith(text, open_pos):
                return -1, entry
    return -1, None


def _remember_group(
    pattern: str, open_pos: int, end: int, short_end: int, ecma: bool | str, allow_special: bool, node: Node,
    levels: int,
) -> None:
    """Cache a successfully parsed group under the key `cached_group` looks it up by."""
    global _group_cache_chars
    size = end - open_pos
    if size > _GROUP_CACHE_MAX_TEXT or (short_end >= 0 and short_end != end):
        return
    entry = (node, levels, size)
    with _group_cache_lock:
        if _group_cache_chars + size > _GROUP_CACHE_CHARS:
            _SHORT_GROUPS.clear()
            _LONG_GROUPS.clear()
            _group_cache_chars = 0
        if short_end >= 0:
            _SHORT_GROUPS[(pattern[open_pos:end], ecma, allow_special)] = entry
        else:
            prefix = pattern[open_pos : open_pos + _GROUP_WINDOW]
            candidates = _LONG_GROUPS.setdefault((prefix, ecma, allow_special), [])
            if len(candidates) >= _LONG_CANDIDATES:
                _group_cache_chars -= len(candidates.pop(0)[0])
            candidates.append((pattern[open_pos:end], entry))
        _group_cache_chars += size


def clear_caches() -> None:
    """Forget every parsed class and group and every class's UTF-8 sequences (benchmarks of cold compilation;
    tests of the caches)."""
    global _group_cache_chars
    with _group_cache_lock:
        _SHORT_GROUPS.clear()
        _LONG_GROUPS.clear()
        _group_cache_chars = 0
    _CLASS_CACHE.clear()
    utf8_sequences.cache_clear()


@functools.lru_cache(maxsize=1024)
def _literal_node(cp: int) -> CharSet:
    return CharSet(ranges=((cp, cp),))


def _unsupported_group(pattern: str, pos: int) -> str:
    rest = pattern[pos : pos + 4]
    if rest.startswith(("(?=", "(?!")):
        return "lookahead is not supported"
    if rest.startswith(("(?<=", "(?<!")):
        return "lookbehind is not supported"
    if rest.startswith("(?P="):
        return "backreferences are not supported"
    if rest.startswith("(?#"):
        return "comments (?#...) are not supported"
    if rest.startswith("(?>"):
        return "atomic groups are not supported"
    if rest.startswith("(?("):
        return "conditional groups are not supported"
    if rest.startswith("(?<"):
        return "named groups are written (?P<name>...) in this dialect"
    return "inline flags and other (?...) extensions are not supported"


def _check_scalar(cp: int, parser: _Parser, pos: int) -> None:
    if SURROGATES[0] <= cp <= SURROGATES[1]:
        raise parser.error(f"U+{cp:04X} is a surrogate, not a Unicode scalar value", pos)


def _literal(cp: int, parser: _Parser | None = None, pos: int = 0) -> CharSet:
    if parser is not None:
        _check_scalar(cp, parser, pos)
    return CharSet(ranges=((cp, cp),))


def _concat(items: list[Node]) -> Node:
    flat: list[Node] = []
    for item in items:
        if isinstance(item, Concat):
            flat.extend(item.items)
        elif not isinstance(item, Empty):
            flat.append(item)
    if not flat:
        return Empty()
    return flat[0] if len(flat) == 1 else Concat(items=tuple(flat))


def _alternation(items: list[Node]) -> Node:
    return items[0] if len(items) == 1 else Alternation(items=tuple(items))


def _repeat(item: Node, lo: int, hi: int | None) -> Node:
    """A repetition, with nested quantifiers folded where the language allows (``(x?){n,m}`` = ``x{0,m}``,
    ``(x*){n,m}`` = ``x*``, ``(x+){n,m}`` = ``x{n,}``, ``(x{0|1,m})?`` = ``x{0,m}``): the unfolded forms make
    subset construction quadratic for no reason."""
    if lo == hi == 1:
        return item
    if hi == 0 or isinstance(item, Empty):
        return Empty()
    if isinstance(item, Repeat):
        inner = item
        if (inner.min, inner.max) == (0, 1):
            return _repeat(inner.item, 0, hi)
        if inner.max is None and inner.min <= 1:
            return _repeat(inner.item, inner.min * lo, None)
        if (lo, hi) == (0, 1) and inner.min <= 1:
            return _repeat(inner.item, 0, inner.max)
    return Repeat(item=item, min=lo, max=hi)


def parse(pattern: str, *, allow_special: bool = False) -> Node:
    """Parse a dialect pattern into its AST (full-match semantics: ``^``/``$`` are dropped).

    Raises:
        RegexSyntaxError: syntax the dialect does not have, with the position and the feature named.
    """
    branches = _Parser(pattern, allow_special=allow_special, ecma=False).parse_top()
    return _alternation([b.node for b in branches])


def parse_ecma(pattern: str, *, wide: bool = False) -> list[Branch]:
    """Parse an ECMA-262 pattern (the subset JSON Schema's ``pattern`` may use here) into its top-level branches.

    ECMA meanings are used for ``.``, ``\\d``/``\\w`` and ``\\s`` (what ECMA and Python's ``re`` both match, or
    with ``wide`` what either matches, see `constrained.dialect.classes`). ``^``/``$`` may stand anywhere: the
    result has at most one branch per combination of anchors its paths passed (none when no string can match).

    Raises:
        RegexSyntaxError: syntax outside that subset (lookarounds, backreferences, ``[]``, ...).
    """
    parsed = _Parser(pattern, allow_special=False, ecma=True, wide=wide).parse_top()
    keyed = resolve_anchors(_alternation([b.node for b in parsed]), wide=wide)
    return [Branch(node=node, anchored_start=start, anchored_end=end) for (start, end), node in keyed.items()]


# -------------------------------------------------------------------------------------------- automaton text

_AUTOMATON_EDGE = re.compile(r"([0-9a-f]{2})(?:-([0-9a-f]{2}))?>(0|[1-9][0-9]*)")


@functools.lru_cache(maxsize=256)
def _automaton_from_text(body: str) -> Automaton | None:
    """The automaton of a ``(?@...)`` body, or None unless the body is exactly its canonical text."""
    rows = body.split(";")
    accepting: list[int] = []
    edges: list[tuple[int, int, int, int]] = []
    for state, row in enumerate(rows):
        if row.startswith("!"):
            accepting.append(state)
            row = row[1:]
        if not row:
            continue
        previous = None
        for item in row.split(","):
            match = _AUTOMATON_EDGE.fullmatch(item)
            if match is None:
                return None
            lo = int(match[1], 16)
            hi = lo if match[2] is None else int(match[2], 16)
            target = int(match[3])
            if hi < lo or target >= len(rows) or (previous is not None and lo <= previous[2]):
                return None
            previous = (state, lo, hi, target)
            edges.append(previous)
    node = Automaton(n_states=len(rows), accepting=tuple(accepting), edges=tuple(edges))
    try:
        return node if automaton_text(node) == f"(?@{body})" else None
    except ValueError:  # unmerged adjacent ranges
        return None


def automaton_text(node: Automaton) -> str:
    """The canonical ``(?@...)`` text of an automaton (the only form `parse` reads back)."""
    rows: list[list[str]] = [[] for _ in range(node.n_states)]
    for state in node.accepting:
        rows[state].append("!")
    last: list[tuple[int, int] | None] = [None] * node.n_states
    for source, lo, hi, target in node.edges:
        previous = last[source]
        if previous is not None and (lo <= previous[0] or (lo == previous[0] + 1 and target == previous[1])):
            raise ValueError("automaton edges must be sorted, disjoint and merged")
        last[source] = (hi, target)
        edge = f"{lo:02x}>{target}" if lo == hi else f"{lo:02x}-{hi:02x}>{target}"
        row = rows[source]
        row.append(edge if not row or row == ["!"] else "," + edge)
    return "(?@" + ";".join("".join(row) for row in rows) + ")"
