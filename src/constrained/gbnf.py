"""llama.cpp GBNF grammars: text → AST (`parse_gbnf`) → rules of our dialect (`gbnf_to_rules`) → pushdown grammar.

The parser follows llama.cpp's own (``src/llama-grammar.cpp`` as vendored by llama-cpp-python 0.3.36: ``parse_space``,
``parse_name``, ``parse_char``, ``parse_sequence``, ``parse_alternates``, ``parse_rule``) step by step, so a text
parses here exactly when it parses there, with the same meaning:

    rule      ::= name ws? "::=" space alternates (newline | end)      name: [a-zA-Z0-9-]+
    alternates::= sequence ("|" space sequence)*                       (a newline may follow "|")
    sequence  ::= (item repetition*)*                                  newlines only inside ( ... )
    item      ::= "literal" | [class] | [^class] | . | name | ( alternates ) | <[id]> | <text> | !<...>
    repetition::= * | + | ? | {m} | {m,} | {m,n}                       (spaces allowed inside the braces)
    char      ::= any code point | \\xHH | \\uHHHH | \\UHHHHHHHH | \\t \\n \\r \\\\ \\" \\[ \\] \\-
    comments  # ... to the end of the line, wherever space is allowed

Meaning, as llama.cpp's matcher gives it: terminals are Unicode code points, the model's bytes decoded as UTF-8;
``.`` is any code point (newline included); ``[^...]`` any code point outside the set; a repetition applies to
the whole preceding item (``"ab"*`` repeats ``ab``); an empty literal ``""`` or empty class ``[]`` matches the
empty string; a rule defined twice keeps its last definition; ``root`` is the start rule. llama.cpp's limits
are kept: a repetition count above 2000 is an error (a maximum above 2000 means "no maximum"), and so is a
repetition whose rule expansion would exceed 2000 rules. Two deliberate differences: ``{m,n}`` with ``n < m``
is refused (llama.cpp loops there until memory runs out), and so are groups nested deeper than `MAX_NESTING`
(256) parentheses (llama.cpp recurses on, to its stack's end).

Translation (`gbnf_to_rules`) maps every rule reachable from the start to one body of our regex dialect, with
``(?&=NAME)`` calling rule NAME; groups and repetitions stay inline as ``(?:...)`` and quantifiers, up to
`_HOIST_DEPTH` levels (a deeper one becomes a rule ``<rule>.gN`` of its own, as in llama.cpp). Terminals
are valid UTF-8 only: surrogates and values above U+10FFFF match nothing, and U+0000 matches nothing either
(llama.cpp reads token text as C strings and never matches a NUL). Token references (``<[id]>``, ``<text>``) are
translated only when they name a special token of the vocabulary (to ``(?&TEXT)``); a negated token (``!<...>``)
or a reference to an ordinary token is refused with a `GbnfSyntaxError` at its position.

    GBNF text ──parse_gbnf──► GbnfGrammar (Rule → Alternatives → Sequence → items)
              ──gbnf_to_rules──► {name: body pattern}, start ──pushdown.compile_rules──► PushdownGrammar

`constrained.compile_gbnf` does all three (through `gbnf_rule_set`). Left recursion is refused by `compile_rules`
(llama.cpp refuses it too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, Union

from constrained.dialect.writer import class_text
from constrained.errors import GbnfSyntaxError

from constrained.rules import RuleSet
from constrained.rules import call as call_rule

if TYPE_CHECKING:
    from constrained.vocabulary import Vocabulary

__all__ = [
    "MAX_REPETITION",
    "AnyChar",
    "CharClass",
    "Literal",
    "RuleRef",
    "TokenRef",
    "Repeat",
    "Sequence",
    "Alternatives",
    "Rule",
    "GbnfGrammar",
    "parse_gbnf",
    "gbnf_to_rules",
    "gbnf_rule_set",
]

MAX_REPETITION = 2000
"""llama.cpp's ``MAX_REPETITION_THRESHOLD``: the largest repetition count and the largest rule expansion."""
MAX_NESTING = 256
"""Deepest parenthesised group nesting parsed (`GbnfSyntaxError` at the ``(`` past it). llama.cpp has no such
limit; ours keeps the recursive-descent parser (two frames a level) far from Python's recursion limit. Grammars
nest a handful of groups: depth belongs in rules, which may call each other to any depth."""
_HOIST_DEPTH = 32
"""Translation: a group or repetition this many levels deep inside one body becomes a rule of its own (named
``<rule>.gN``, called where it stood), as llama.cpp makes every group a rule. Bodies stay far inside the regex
dialect's group nesting limit (100), and translating one stays shallow."""

_MAX_SCALAR = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)

# ---------------------------------------------------------------------------------------------------------- AST


@dataclass(frozen=True, slots=True)
class Literal:
    """A quoted string: its code points one after the other (at least one)."""

    chars: tuple[int, ...]
    """Code points as written (escapes resolved); may include values that are no Unicode scalar."""


@dataclass(frozen=True, slots=True)
class CharClass:
    """``[...]`` or ``[^...]``: one code point from (or outside) a set of inclusive ranges."""

    ranges: tuple[tuple[int, int], ...]
    """``(low, high)`` as written, in order; a single character is ``(c, c)``; ``low > high`` matches nothing."""
    negated: bool = False
    """``[^...]``: any code point outside the ranges."""


@dataclass(frozen=True, slots=True)
class AnyChar:
    """``.``: any one code point."""


@dataclass(frozen=True, slots=True)
class RuleRef:
    """A reference to a rule by name."""

    name: str
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class TokenRef:
    """``<[id]>``, ``<text>`` or their negation ``!<...>``: one token of the vocabulary."""

    token_id: int | None
    """The id of ``<[id]>``; ``None`` for ``<text>``."""
    text: str | None
    """The whole ``<text>`` (angle brackets included); ``None`` for ``<[id]>``."""
    negated: bool
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Repeat:
    """``item`` between ``min`` and ``max`` times (``max=None``: no maximum)."""

    item: Item
    min: int
    max: int | None


@dataclass(frozen=True, slots=True)
class Sequence:
    """Items one after the other (none: the empty string)."""

    items: tuple[Item, ...]


@dataclass(frozen=True, slots=True)
class Alternatives:
    """One of several sequences (a rule body or a parenthesized group)."""

    options: tuple[Sequence, ...]
    """At least one."""


Item = Union[Literal, CharClass, AnyChar, RuleRef, TokenRef, Repeat, Alternatives]
"""One element of a sequence; a group is an `Alternatives`."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``name ::= body`` definition."""

    name: str
    body: Alternatives
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class GbnfGrammar:
    """A parsed GBNF text: its rules by name (a name defined twice keeps its last definition, as in llama.cpp)."""

    rules: Mapping[str, Rule]


# ------------------------------------------------------------------------------------------------------- parser


def _is_word_char(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c == "-"


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}


class _Parser:
    """llama.cpp's recursive-descent parser over a Python string; positions are indices, '' is end of input."""

    def __init__(self, text: str) -> None:
        nul = text.find("\0")
        self.text = text
        if nul >= 0:
            self.fail(nul, "NUL character (llama.cpp reads the grammar as a C string and would stop here)")
        self.n = len(text)
        self.symbols: set[str] = set()
        """Symbol names, for llama.cpp's rule-count threshold (named rules and generated ones)."""
        self.generated = 0
        self.rules: dict[str, Rule] = {}
        self.refs: list[RuleRef] = []
        self.depth = 0
        """Parenthesised groups open around the current position (at most `MAX_NESTING`)."""

    # -- positions and errors

    def where(self, i: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, i) + 1
        return line, i - (self.text.rfind("\n", 0, i) + 1) + 1

    def fail(self, i: int, message: str) -> NoReturn:
        line, column = self.where(i)
        raise GbnfSyntaxError(line, column, message)

    def ch(self, i: int) -> str:
        return self.text[i] if i < self.n else ""

    def n_symbols(self) -> int:
        return len(self.symbols) + self.generated

    # -- lexical helpers (parse_space, parse_name, parse_int, parse_hex, parse_char)

    def space(self, i: int, newline_ok: bool) -> int:
        while True:
            c = self.ch(i)
            if c == "#":
                while i < self.n and self.text[i] not in "\r\n":
                    i += 1
            elif c in (" ", "\t") or (newline_ok and c in ("\r", "\n")):
                i += 1
            else:
                return i

    def name(self, i: int) -> int:
        j = i
        while _is_word_char(self.ch(j)):
            j += 1
        if j == i:
            self.fail(i, "expecting a name")
        return j

    def int_(self, i: int) -> int:
        j = i
        while _is_digit(self.ch(j)):
            j += 1
        if j == i:
            self.fail(i, "expecting an integer")
        return j

    def hex_(self, i: int, size: int, escape_at: int) -> tuple[int, int]:
        j = i
        while j < i + size and self.ch(j) in _HEX:
            j += 1
        if j != i + size:
            self.fail(escape_at, f"expecting {size} hex chars after \\{self.text[escape_at + 1]}")
        return int(self.text[i:j], 16), j

    def char(self, i: int) -> tuple[int, int]:
        c = self.ch(i)
        if c == "\\":
            e = self.ch(i + 1)
            if e in ("x", "u", "U"):
                return self.hex_(i + 2, {"x": 2, "u": 4, "U": 8}[e], i)
            if e in _SIMPLE_ESCAPES and e:
                return _SIMPLE_ESCAPES[e], i + 2
            self.fail(i, f"unknown escape \\{e}" if e else "unexpected end of input after \\")
        if not c:
            self.fail(i, "unexpected end of input")
        return ord(c), i + 1

    # -- grammar structure

    def parse(self) -> GbnfGrammar:
        i = self.space(0, True)
        if i >= self.n:
            self.fail(i, "empty grammar: no rule defined")
        while i < self.n:
            i = self.rule(i)
        for ref in self.refs:
            if ref.name not in self.rules:
                raise GbnfSyntaxError(ref.line, ref.column, f"undefined rule {ref.name!r}")
        return GbnfGrammar(rules=self.rules)

    def rule(self, i: int) -> int:
        name_end = self.name(i)
        name = self.text[i:name_end]
        self.symbols.add(name)
        pos = self.space(name_end, False)
        if self.text[pos:pos + 3] != "::=":
            self.fail(pos, "expecting ::=")
        pos = self.space(pos + 3, True)
        body, pos = self.alternates(pos, False)
        line, column = self.where(i)
        self.rules.pop(name, None)  # a redefinition replaces the rule (and moves it last)
        self.rules[name] = Rule(name=name, body=body, line=line, column=column)
        c = self.ch(pos)
        if c == "\r":
            pos += 2 if self.ch(pos + 1) == "\n" else 1
        elif c == "\n":
            pos += 1
        elif c:
            self.fail(pos, f"expecting newline or end, found {c!r}")
        return self.space(pos, True)

    def alternates(self, i: int, nested: bool) -> tuple[Alternatives, int]:
        seq, i = self.sequence(i, nested)
        options = [seq]
        while self.ch(i) == "|":
            i = self.space(i + 1, True)
            seq, i = self.sequence(i, nested)
            options.append(seq)
        return Alternatives(tuple(options)), i

    def sequence(self, i: int, nested: bool) -> tuple[Sequence, int]:
        items: list[Item] = []
        last: int | None = None
        """Index in items of the symbol a repetition applies to (None: nothing to repeat)."""
        n_prev = 1
        hi: int | None  # a repetition's maximum (None: unbounded)
        while i < self.n:
            c = self.text[i]
            start = i
            if c == '"':
                i += 1
                chars: list[int] = []
                while self.ch(i) != '"':
                    if i >= self.n:
                        self.fail(i, "unexpected end of input in a string literal")
                    value, i = self.char(i)
                    chars.append(value)
                i = self.space(i + 1, nested)
                n_prev = 1
                if chars:
                    items.append(Literal(tuple(chars)))
                    last = len(items) - 1
                else:
                    last = None
            elif c == "[":
                i += 1
                negated = self.ch(i) == "^"
                if negated:
                    i += 1
                ranges: list[tuple[int, int]] = []
                while self.ch(i) != "]":
                    if i >= self.n:
                        self.fail(i, "unexpected end of input in a character class")
                    low, i = self.char(i)
                    high = low
                    if self.ch(i) == "-" and self.ch(i + 1) != "]":
                        if i + 1 >= self.n:
                            self.fail(i + 1, "unexpected end of input in a character class")
                        high, i = self.char(i + 1)
                    ranges.append((low, high))
                i = self.space(i + 1, nested)
                n_prev = 1
                if ranges:
                    items.append(CharClass(tuple(ranges), negated))
                    last = len(items) - 1
                else:
                    last = None
            elif c in ("<", "!"):
                negated = c == "!"
                if negated:
                    i += 1
                token, i = self.token(i, start, negated)
                i = self.space(i, nested)
                items.append(token)
                last, n_prev = len(items) - 1, 1
            elif _is_word_char(c):
                end = self.name(i)
                name = self.text[i:end]
                self.symbols.add(name)
                line, column = self.where(i)
                ref = RuleRef(name, line, column)
                self.refs.append(ref)
                i = self.space(end, nested)
                items.append(ref)
                last, n_prev = len(items) - 1, 1
            elif c == "(":
                if self.depth >= MAX_NESTING:
                    self.fail(i, f"groups nested deeper than {MAX_NESTING} (MAX_NESTING); move the inner ones to "
                              f"rules of their own")  # fmt: skip
                i = self.space(i + 1, True)
                before = self.n_symbols()
                self.generated += 1
                self.depth += 1
                group, i = self.alternates(i, True)
                self.depth -= 1
                n_prev = max(1, self.n_symbols() - before)
                if self.ch(i) != ")":
                    self.fail(i, "expecting ')'")
                i = self.space(i + 1, nested)
                items.append(group)
                last = len(items) - 1
            elif c == ".":
                i = self.space(i + 1, nested)
                items.append(AnyChar())
                last, n_prev = len(items) - 1, 1
            elif c in ("*", "+", "?"):
                i = self.space(i + 1, nested)
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                last, n_prev = self.repeat(items, last, n_prev, lo, hi, start)
            elif c == "{":
                i = self.space(i + 1, nested)
                if not _is_digit(self.ch(i)):
                    self.fail(i, "expecting an integer after '{'")
                end = self.int_(i)
                lo = int(self.text[i:end])
                i = self.space(end, nested)
                if self.ch(i) == "}":
                    hi = lo
                    i = self.space(i + 1, nested)
                elif self.ch(i) == ",":
                    i = self.space(i + 1, nested)
                    hi = None
                    if _is_digit(self.ch(i)):
                        end = self.int_(i)
                        hi = int(self.text[i:end])
                        i = self.space(end, nested)
                    if self.ch(i) != "}":
                        self.fail(i, "expecting '}'")
                    i = self.space(i + 1, nested)
                else:
                    self.fail(i, "expecting ',' or '}'")
                if lo > MAX_REPETITION:
                    self.fail(start, f"repetition count {lo} exceeds llama.cpp's limit of {MAX_REPETITION}")
                if hi is not None and hi > MAX_REPETITION:
                    hi = None  # llama.cpp: a maximum above the threshold means no maximum
                if hi is not None and hi < lo:
                    self.fail(start, f"repetition maximum {hi} is below its minimum {lo}")
                last, n_prev = self.repeat(items, last, n_prev, lo, hi, start)
            else:
                break
        return Sequence(tuple(items)), i

    def repeat(self, items: list[Item], last: int | None, n_prev: int, lo: int, hi: int | None,
               at: int) -> tuple[int | None, int]:  # fmt: skip
        """llama.cpp's handle_repetitions: wrap the last symbol; the same rule-count threshold."""
        if last is None:
            self.fail(at, "expecting an item before the repetition operator")
        total = hi if hi is not None and hi > 0 else (lo if lo > 0 else 1)
        if n_prev * total > MAX_REPETITION:
            self.fail(at, f"repetition expands to more than llama.cpp's limit of {MAX_REPETITION} rules")
        self.generated += 1 if hi is None else hi - lo
        if hi == 0:  # x{0}: llama.cpp drops the item, and nothing is left to repeat
            del items[last:]
            return None, n_prev * total
        items[last:] = [Repeat(items[last], lo, hi)]
        return last, n_prev * total

    def token(self, i: int, start: int, negated: bool) -> tuple[TokenRef, int]:
        if self.ch(i) != "<":
            self.fail(i, "expecting '<' after '!'")
        line, column = self.where(start)
        j = i + 1
        if self.ch(j) == "[":
            j += 1
            end = self.int_(j)
            token_id = int(self.text[j:end])
            if token_id > 0xFFFFFFFF:
                self.fail(j, "token id is too big")
            if self.ch(end) != "]":
                self.fail(end, "expecting ']'")
            if self.ch(end + 1) != ">":
                self.fail(end + 1, "expecting '>'")
            return TokenRef(token_id, None, negated, line, column), end + 2
        while j < self.n and self.text[j] != ">":
            j += 1
        if j >= self.n:
            self.fail(j, "expecting '>'")
        return TokenRef(None, self.text[i:j + 1], negated, line, column), j + 1


def parse_gbnf(text: str) -> GbnfGrammar:
    """Parse a GBNF grammar the way llama.cpp does.

    Raises:
        GbnfSyntaxError: the first error, with its 1-based line and column (columns count code points).
    """
    return _Parser(text).parse()


# -------------------------------------------------------------------------------------------------- translation


_NOTHING = "[^\\x00-\\U0010FFFF]"
"""A class with no member: matches nothing."""


def _scalar_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged ranges clipped to what a GBNF terminal can match here: U+0001..U+10FFFF minus surrogates."""
    out: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        for lo, hi in ((low, min(high, _SURROGATES[0] - 1)), (max(low, _SURROGATES[1] + 1), high)):
            lo, hi = max(lo, 1), min(hi, _MAX_SCALAR)
            if lo > hi:
                continue
            if out and lo <= out[-1][1] + 1:
                out[-1] = (out[-1][0], max(out[-1][1], hi))
            else:
                out.append((lo, hi))
    return out


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, next_low = [], 0
    for low, high in _scalar_ranges(ranges):
        if low > next_low:
            out.append((next_low, low - 1))
        next_low = high + 1
    if next_low <= _MAX_SCALAR:
        out.append((next_low, _MAX_SCALAR))
    return _scalar_ranges(out)


def _class_pattern(ranges: list[tuple[int, int]]) -> str:
    return class_text(ranges) if ranges else _NOTHING


class _Translator:
    def __init__(self, vocab: Vocabulary | None) -> None:
        self.vocab = vocab
        self.uses_tokens = False
        self.depth = 0
        """Groups open in the body being translated; at `_HOIST_DEPTH` the next one is hoisted."""
        self.rule = ""
        """The rule whose body is being translated (hoisted groups are named after it)."""
        self.hoisted: list[tuple[str, Alternatives | Repeat]] = []
        """Groups hoisted into rules of their own, not translated yet (`rules` translates them, one at a time)."""
        self.n_hoisted = 0

    def rules(self, grammar: GbnfGrammar, names: list[str]) -> dict[str, str]:
        """Every named rule's body, then the bodies of the groups hoisted out of them (a worklist: translating a
        10,000-level nesting stays `_HOIST_DEPTH` deep)."""
        out = {}
        for name in names:
            self.rule = name
            out[name] = self.alternatives(grammar.rules[name].body, nested=False)
        while self.hoisted:
            name, node = self.hoisted.pop()
            self.rule = name.partition(".")[0]
            out[name] = (self.alternatives(node, nested=False) if isinstance(node, Alternatives)
                         else self.item(node))  # fmt: skip
        return out

    def group(self, node: Alternatives | Repeat) -> str | None:
        """A call of a new rule for ``node`` when it would nest `_HOIST_DEPTH` groups deep, else None."""
        if self.depth < _HOIST_DEPTH:
            return None
        self.n_hoisted += 1
        name = f"{self.rule}.g{self.n_hoisted}"  # "." is no GBNF name character: never a user's rule
        self.hoisted.append((name, node))
        return call_rule(name)

    def alternatives(self, node: Alternatives, nested: bool) -> str:
        if nested and (call := self.group(node)) is not None:
            return call
        self.depth += nested
        texts = [self.sequence(option) for option in node.options]
        self.depth -= nested
        if len(texts) == 1:
            return f"(?:{texts[0]})" if nested and texts[0] else texts[0]
        body = "|".join(texts)
        return f"(?:{body})" if nested else body

    def sequence(self, node: Sequence) -> str:
        return "".join(self.item(item) for item in node.items)

    def item(self, node: Item) -> str:
        if isinstance(node, Literal):
            return "".join(_class_pattern(_scalar_ranges([(c, c)])) for c in node.chars)
        if isinstance(node, CharClass):
            ranges = list(node.ranges)
            return _class_pattern(_complement(ranges) if node.negated else _scalar_ranges(ranges))
        if isinstance(node, AnyChar):
            return _class_pattern(_scalar_ranges([(0, _MAX_SCALAR)]))
        if isinstance(node, RuleRef):
            return call_rule(node.name)
        if isinstance(node, TokenRef):
            return self.token(node)
        if isinstance(node, Alternatives):
            return self.alternatives(node, nested=True)
        if isinstance(node, Repeat):
            if (call := self.group(node)) is not None:
                return call
            self.depth += 1
            inner = f"(?:{self.item(node.item)})"
            self.depth -= 1
            if node.max is None:
                quantifier = "*" if node.min == 0 else "+" if node.min == 1 else f"{{{node.min},}}"
            elif node.min == node.max:
                quantifier = f"{{{node.min}}}"
            else:
                quantifier = "?" if (node.min, node.max) == (0, 1) else f"{{{node.min},{node.max}}}"
            return inner + quantifier
        raise TypeError(f"not a GBNF item: {node!r}")

    def token(self, node: TokenRef) -> str:
        shown = node.text if node.text is not None else f"<[{node.token_id}]>"
        if node.negated:
            raise GbnfSyntaxError(node.line, node.column, f"negated token !{shown} is not supported")
        if self.vocab is None:
            raise GbnfSyntaxError(node.line, node.column, f"token {shown} needs a vocabulary to resolve")
        by_name = self.vocab.special_ids_by_name
        if node.text is not None:
            name = node.text if node.text in by_name else None
        else:
            name = next((n for n, i in by_name.items() if i == node.token_id), None)
        if name is None or ")" in name:
            raise GbnfSyntaxError(node.line, node.column, f"token {shown} is not a special token of the "
                                  "vocabulary (only special tokens can be grammar terminals here)")  # fmt: skip
        self.uses_tokens = True
        return f"(?&{name})"


def _reachable(grammar: GbnfGrammar, start: str) -> list[str]:
    seen, todo = {start: None}, [start]
    while todo:
        stack: list[object] = [grammar.rules[todo.pop()].body]
        while stack:
            node = stack.pop()
            if isinstance(node, RuleRef):
                if node.name not in seen:
                    seen[node.name] = None
                    todo.append(node.name)
            elif isinstance(node, Alternatives):
                stack.extend(node.options)
            elif isinstance(node, Sequence):
                stack.extend(node.items)
            elif isinstance(node, Repeat):
                stack.append(node.item)
    return [name for name in grammar.rules if name in seen]


def _translate(grammar: GbnfGrammar, start: str, vocab: Vocabulary | None) -> tuple[dict[str, str], bool]:
    if start not in grammar.rules:
        raise GbnfSyntaxError(1, 1, f"the grammar has no rule named {start!r}")
    translator = _Translator(vocab)
    rules = translator.rules(grammar, _reachable(grammar, start))
    return rules, translator.uses_tokens


def gbnf_to_rules(grammar: GbnfGrammar, *, start: str = "root",
                  vocab: Vocabulary | None = None) -> tuple[dict[str, str], str]:  # fmt: skip
    """The rules reachable from ``start`` as bodies of our dialect (``(?&=NAME)`` calls), and the start rule.

    ``vocab`` resolves token references (special tokens only); without it a token reference is refused.

    Raises:
        GbnfSyntaxError: no rule named ``start``; an unsupported token reference (at its position).
    """
    rules, _ = _translate(grammar, start, vocab)
    return rules, start


def gbnf_rule_set(text: str, vocab: Vocabulary, *, start: str = "root") -> tuple[RuleSet, bool]:
    """The GBNF text as a rule set over ``vocab`` (token references resolved), and whether it names special tokens
    (what `constrained.compile_gbnf` compiles).

    Raises:
        GbnfSyntaxError: the text is no GBNF llama.cpp would parse, has no ``start`` rule, or names a token
            that is not a special token of ``vocab``.
    """
    rules, uses_tokens = _translate(parse_gbnf(text), start, vocab)
    return RuleSet(rules, start), uses_tokens
