"""ECMA-262 ``pattern`` → a dialect pattern over the JSON-encoded body of a string.

Owns `json_string_body_pattern`: an ECMA-262 ``pattern`` (JSON Schema search semantics) rewritten as a dialect
pattern over the *JSON-encoded* body of a string, so that a schema's string constraint can be enforced on the bytes
the model writes between the quotes; and the pieces the schema compiler shares with it: `json_char_pattern` (the
JSON encodings of one scalar of a set; its class text is `writer.class_text`).

Imports only `constrained.errors` and the other dialect modules.
"""

from __future__ import annotations

from constrained.dialect.nodes import (
    ANY_SCALAR,
    Alternation,
    CharSet,
    Concat,
    Empty,
    Node,
    Range,
    Repeat,
    intersect_ranges,
    normalize_ranges,
    subtract_ranges,
)
from constrained.dialect.parser import parse_ecma
from constrained.dialect.writer import class_text
from constrained.errors import RegexSyntaxError, UnsupportedSchemaError

__all__ = ["json_string_body_pattern", "json_char_pattern", "NO_BODY"]

_JSON_SHORT = {0x22: '"', 0x5C: "\\\\", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
"""Characters json.dumps escapes with a backslash and one letter, and that letter as a class member."""
_JSON_ESCAPED = normalize_ranges([(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])


def json_char_pattern(ranges: tuple[Range, ...]) -> tuple[str, bool]:
    """A dialect fragment matching json.dumps(ensure_ascii=False)'s encoding of any one scalar in ``ranges``,
    and whether a quantifier binds to it as a whole."""
    alternatives: list[tuple[str, bool]] = []
    plain = subtract_ranges(ranges, _JSON_ESCAPED)
    if plain:
        alternatives.append((class_text(plain), True))
    escaped = [cp for lo, hi in intersect_ranges(ranges, _JSON_ESCAPED) for cp in range(lo, hi + 1)]
    short = [_JSON_SHORT[cp] for cp in escaped if cp in _JSON_SHORT]
    if len(short) == 1:
        alternatives.append(("\\\\" + short[0], False))
    elif short:
        alternatives.append(("\\\\[" + "".join(short) + "]", False))
    unicode_escaped = [cp for cp in escaped if cp not in _JSON_SHORT]
    if unicode_escaped:
        by_high: dict[int, list[int]] = {}
        for cp in unicode_escaped:
            by_high.setdefault(cp >> 4, []).append(cp & 0xF)
        hex_alts = []
        for high, lows in by_high.items():
            hex_alts.append(f"{high:x}" + _hex_digit_class(lows))
        hex_text = hex_alts[0] if len(hex_alts) == 1 else "(?:" + "|".join(hex_alts) + ")"
        alternatives.append(("\\\\u00" + hex_text, False))
    if not alternatives:
        return "[^\\x00-\\U0010ffff]", True  # the empty set: matches nothing (valid Python re too)
    if len(alternatives) == 1:
        return alternatives[0]
    return "(?:" + "|".join(text for text, _ in alternatives) + ")", True


def _hex_digit_class(values: list[int]) -> str:
    """Lowercase hex digits with the given values, as one literal or a class (ranges never span 9→a)."""
    if len(values) == 1:
        return f"{values[0]:x}"
    runs: list[Range] = []
    for lo, hi in normalize_ranges([(v, v) for v in values]):
        runs.extend([(lo, min(hi, 9)), (max(lo, 10), hi)] if lo <= 9 < hi else [(lo, hi)])
    return "[" + "".join(f"{lo:x}" if lo == hi else f"{lo:x}-{hi:x}" for lo, hi in runs) + "]"


NO_BODY = json_char_pattern(())[0]
"""What `json_string_body_pattern` gives for a pattern no string matches (``a^b``): a class of no character."""


def _json_node_pattern(node: Node) -> tuple[str, bool]:
    """The node's translation and whether a quantifier binds to it as a whole."""
    if isinstance(node, Empty):
        return "", False
    if isinstance(node, CharSet):
        return json_char_pattern(node.ranges)
    if isinstance(node, Concat):
        return "".join(_json_node_pattern(item)[0] for item in node.items), False
    if isinstance(node, Alternation):
        return "(?:" + "|".join(_json_node_pattern(item)[0] for item in node.items) + ")", True
    if isinstance(node, Repeat):
        inner, unit = _json_node_pattern(node.item)
        if not unit:
            inner = f"(?:{inner})"
        if node.max is None:
            suffix = {0: "*", 1: "+"}.get(node.min, f"{{{node.min},}}")
        elif node.min == node.max:
            suffix = f"{{{node.min}}}"
        elif (node.min, node.max) == (0, 1):
            suffix = "?"
        else:
            suffix = f"{{{node.min},{node.max}}}"
        return inner + suffix, False
    raise AssertionError(f"unexpected node {node!r}")  # Special cannot occur: parsed with allow_special=False


def json_string_body_pattern(ecma_pattern: str, *, wide: bool = False) -> str:
    """A dialect pattern over the JSON-encoded body of every string matching an ECMA-262 ``pattern``.

    JSON Schema's ``pattern`` has search semantics: a side without ``^``/``$`` admits any prefix/suffix; anchors
    may stand anywhere (``^`` holds only at the string's start, ``$`` only at its end, `resolve_anchors`). The body
    is the text between the quotes as ``json.dumps(value, ensure_ascii=False)`` writes it (``"``→``\\"``,
    ``\\``→``\\\\``, ``\\b \\f \\n \\r \\t``, other controls ``\\u00xx``), so a mask built from the result admits
    exactly the canonical encodings of matching strings. ECMA meanings are used for ``.`` (no line terminators),
    ``\\d``/``\\w`` (ASCII) and ``\\s`` (intersected with Python's, so jsonschema's ``re.search`` agrees).
    With ``wide``, every such choice takes the union of the ECMA and Python meanings instead (and ``$`` also
    admits Python's final newline): a superset of what either engine matches, whose complement no engine matches.

    Raises:
        UnsupportedSchemaError: (path ``""``, keyword ``"pattern"``) for anything that cannot be enforced:
            lookarounds, backreferences, word boundaries, flags, ``[]``, a quantifier on an anchor, ...
    """
    try:
        branches = parse_ecma(ecma_pattern, wide=wide)
    except RegexSyntaxError as exc:
        raise UnsupportedSchemaError("", "pattern", f"{exc.detail} at position {exc.position} "
                                     f"in {ecma_pattern!r}") from exc
    any_char = json_char_pattern(ANY_SCALAR)[0] + "*"
    alternatives = []
    for branch in branches:
        body = _json_node_pattern(branch.node)[0]
        if not branch.anchored_start:
            body = any_char + body
        if not branch.anchored_end:
            body = body + any_char
        elif wide:
            body = body + "(?:\\\\n)?"  # Python's $ also matches before a final newline
        alternatives.append(body)
    if not alternatives:  # every path needs a '^' after consumed input or the like: no string matches
        return NO_BODY
    return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"
