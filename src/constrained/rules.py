"""Rule sets: named bodies of the dialect that call each other; the one writer and reader of the call syntax.

A rule body is a pattern of the engine's dialect in which ``(?&=NAME)`` calls rule NAME (a special terminal whose
name starts with `CALL_PREFIX`). Every front end (JSON Schema, GBNF, the agent's tool-call envelopes) writes calls
with `call` and every reader takes them apart with `callee` and `parse_guard`: the syntax lives here only.

A call may carry a guard after ``|`` (what no rule set of polynomial size can hold: an object's members in any
order, each at most once):

    (?&=NAME|once=K)     adds marker K to the activation's markers; refused while K is in them already
    (?&=NAME|needs=K,..) allowed only once every listed marker is in (the closing brace, after the required members)
    (?&=NAME|room=K,..)  allowed while some listed marker is out (a separator, while a member is left to follow)
    (?&=NAME|bound)      never taken: a chain of calls the budget counts on instead of a `needs` call, which the
                         shortest-completion search does not see (it would close before the required members)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from constrained.errors import GrammarError

__all__ = ["BOUND", "CALL_PREFIX", "GUARD_SEPARATOR", "NEEDS", "ONCE", "ROOM", "Guard", "RulePattern", "RuleSet",
           "call", "callee", "parse_guard"]

CALL_PREFIX = "="
"""A special-terminal name starting with this is a rule call: ``(?&=value)`` calls rule ``value``."""
GUARD_SEPARATOR = "|"
ONCE, NEEDS, ROOM, BOUND = 1, 2, 3, 4
"""Guard kinds (see the module docstring)."""
_KINDS = {"once": ONCE, "needs": NEEDS, "room": ROOM}
Guard = tuple[int, int]
"""(kind, markers as bits: the `once` call's own, or the ones a `needs` or `room` call names)."""
_CALL = re.compile(r"\(\?&=([^)]*)\)")


def call(name: str, guard: str = "") -> str:
    """The pattern text that calls rule ``name``, with a guard (``once=K``, ``needs=K,...``, ``room=K,...``,
    ``bound``: see the module docstring) or none."""
    if not name or ")" in name or GUARD_SEPARATOR in name:
        raise GrammarError(f"invalid rule name {name!r}: it must be non-empty and contain no ')' or '|'")
    if guard:
        parse_guard(guard, name)
        return f"(?&{CALL_PREFIX}{name}{GUARD_SEPARATOR}{guard})"
    return f"(?&{CALL_PREFIX}{name})"


def parse_guard(text: str, name: str) -> Guard:
    """A call's guard text as (kind, marker bits); GrammarError names the call when malformed."""
    if text == "bound":
        return BOUND, 0
    kind, _, value = text.partition("=")
    markers = value.split(",")
    if kind in _KINDS and all(m.isascii() and m.isdigit() for m in markers) and (kind != "once" or len(markers) == 1):
        return _KINDS[kind], sum({1 << int(m) for m in markers})
    raise GrammarError(f"the call of {name!r} has a malformed guard {text!r} (once=K, needs=K,..., room=K,... or "
                       "bound)")


def callee(special: str) -> tuple[str, str]:
    """(rule name, guard text) of a call's special name (``=NAME`` or ``=NAME|GUARD``)."""
    name, _, guard = special[len(CALL_PREFIX):].partition(GUARD_SEPARATOR)
    return name, guard


def rename_calls(body: str, names: Mapping[str, str]) -> str:
    """``body`` with every call of a rule in ``names`` calling its new name instead (guards kept)."""
    def one(match: re.Match[str]) -> str:
        name, guard = callee(CALL_PREFIX + match.group(1))
        return call(names.get(name, name), guard)

    return _CALL.sub(one, body)


@dataclass(frozen=True)
class RuleSet:
    """Rules (name → body) and the rule a document starts in: what `constrained.compile_rules` compiles."""

    rules: Mapping[str, str]
    start: str

    def __post_init__(self) -> None:
        if self.start not in self.rules:
            raise GrammarError(f"the start rule {self.start!r} is not among the rules")

    def namespaced(self, prefix: str) -> RuleSet:
        """The same rules under content-addressed names (``<prefix>.<sha12>.<name>``), so two different rule sets
        never share a name when they are joined."""
        digest = hashlib.sha256(json.dumps([self.start, sorted(self.rules.items())]).encode()).hexdigest()[:12]
        names = {name: f"{prefix}.{digest}.{name}" for name in self.rules}
        return RuleSet({names[name]: rename_calls(body, names) for name, body in self.rules.items()},
                       names[self.start])

    def fingerprint(self, vocab_fingerprint: str, *, allow_special: bool) -> str:
        """sha256 hex of the rules, start, special policy and vocabulary: a compiled rule set's identity."""
        head = f"ember.rules.v1\0{self.start}\0{int(allow_special)}\0{vocab_fingerprint}"
        text = head + "".join(f"\0{name}\0{body}" for name, body in self.rules.items())
        return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


class RulePattern(str):
    """A pattern that calls rules: the text (a call of the start rule), plus the bodies of the rules it calls
    (``rules``, content-addressed names: see `RuleSet.namespaced`), so a pattern can travel where patterns go (a
    codec's final-answer pattern) and still be compiled with its rules."""

    rules: dict[str, str]

    def __new__(cls, rules: Mapping[str, str], start: str, *, prefix: str) -> RulePattern:
        named = RuleSet(rules, start).namespaced(prefix)
        text = super().__new__(cls, call(named.start))
        text.rules = dict(named.rules)
        return text
