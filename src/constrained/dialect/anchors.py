"""ECMA anchors anywhere in a pattern: ``^`` and ``$`` inside groups, alternations and quantifiers, resolved exactly.

Owns `resolve_anchors`: the ECMA parser reads ``^`` as `START` and ``$`` as `END` (marker nodes that match the
empty string at a position), and this module rewrites such a node into at most four anchor-free nodes, keyed by
which anchors their paths passed. The rule it keeps (ECMA-262, no multiline flag): ``^`` holds only at position 0
of the string and ``$`` only at its end; so a path through the pattern that passes a ``^`` matches only if
everything it consumed before it is empty and the match starts at 0, and one that passes a ``$`` only if
everything after it is empty and the match ends at the string's end. A branch where ``^`` follows consumed input
therefore matches nothing. The keys say which of those two conditions the caller (the search) must add.

    node with START/END ──resolve_anchors──► {(starts, ends): anchor-free node}

With ``wide`` (the superset of what ECMA or Python ``re`` match) a ``$`` may also be followed by a final newline.

Imports only the other dialect modules.
"""

from __future__ import annotations

from constrained.dialect.nodes import Alternation, Automaton, CharSet, Concat, Empty, Node, Repeat, Special

__all__ = ["START", "END", "Keyed", "resolve_anchors", "nullable", "matches_newline"]

START = Special(name="^")
"""The ``^`` marker (only the ECMA parser makes it: its patterns have no special-token terminals)."""
END = Special(name="$")
"""The ``$`` marker."""

Key = tuple[bool, bool]
Keyed = dict[Key, Node]
"""Anchor-free nodes by (a ``^`` was passed, a ``$`` was passed); a missing key matches nothing."""

_NEWLINE = CharSet(ranges=((0x0A, 0x0A),))


def nullable(node: Node) -> bool:
    """Whether an anchor-free node matches the empty string."""
    if isinstance(node, Empty):
        return True
    if isinstance(node, (CharSet, Special)):
        return False
    if isinstance(node, Concat):
        return all(nullable(item) for item in node.items)
    if isinstance(node, Alternation):
        return any(nullable(item) for item in node.items)
    if isinstance(node, Repeat):
        return node.min == 0 or nullable(node.item)
    return 0 in node.accepting


def matches_newline(node: Node) -> bool:
    """Whether an anchor-free node matches the one-character string ``"\\n"``."""
    if isinstance(node, CharSet):
        return any(lo <= 0x0A <= hi for lo, hi in node.ranges)
    if isinstance(node, (Empty, Special)):
        return False
    if isinstance(node, Concat):
        return any(matches_newline(item) and all(nullable(o) for o in node.items if o is not item)
                   for item in node.items)
    if isinstance(node, Alternation):
        return any(matches_newline(item) for item in node.items)
    if isinstance(node, Repeat):
        return node.max != 0 and matches_newline(node.item) and (node.min <= 1 or nullable(node.item))
    assert isinstance(node, Automaton)
    targets = [t for s, lo, hi, t in node.edges if s == 0 and lo <= 0x0A <= hi]
    return bool(targets) and targets[0] in node.accepting


def _union(nodes: list[Node]) -> Node:
    unique: list[Node] = []
    for n in nodes:
        if n not in unique:
            unique.append(n)
    return unique[0] if len(unique) == 1 else Alternation(items=tuple(unique))


def _concat(nodes: list[Node]) -> Node:
    flat: list[Node] = []
    for n in nodes:
        if isinstance(n, Concat):
            flat.extend(n.items)
        elif not isinstance(n, Empty):
            flat.append(n)
    if not flat:
        return Empty()
    return flat[0] if len(flat) == 1 else Concat(items=tuple(flat))


def _repeat(node: Node | None, lo: int, hi: int | None) -> Node | None:
    """``node{lo,hi}`` (None: nothing; a missing node repeated zero times is the empty string)."""
    if hi is not None and (hi < lo or hi < 0):
        return None
    lo = max(lo, 0)
    if node is None:
        return Empty() if lo == 0 else None
    if hi == 0 or isinstance(node, Empty):
        return Empty()
    if lo == hi == 1:
        return node
    return Repeat(item=node, min=lo, max=hi)


def _minus(bound: int | None, by: int) -> int | None:
    return None if bound is None else bound - by


class _Resolver:
    def __init__(self, wide: bool) -> None:
        self.wide = wide
        self.memo: dict[int, tuple[Node, Keyed]] = {}
        self.anchored: dict[int, tuple[Node, bool]] = {}

    def has_anchor(self, node: Node) -> bool:
        """Whether a marker occurs in the node (memoized by identity: parsed groups are shared)."""
        hit = self.anchored.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        if isinstance(node, Special):
            found = node == START or node == END
        elif isinstance(node, (Concat, Alternation)):
            found = any(self.has_anchor(item) for item in node.items)
        elif isinstance(node, Repeat):
            found = self.has_anchor(node.item)
        else:
            found = False
        self.anchored[id(node)] = (node, found)
        return found

    def empty_before_start(self, node: Node) -> Node | None:
        """The part of ``node`` that may come before a ``^``: the empty string, if it matches it."""
        return Empty() if nullable(node) else None

    def empty_after_end(self, node: Node) -> Node | None:
        """The part of ``node`` that may come after a ``$``: the empty string (wide: or a final newline)."""
        options: list[Node] = [Empty()] if nullable(node) else []
        if self.wide and matches_newline(node):
            options.append(_NEWLINE)
        return _union(options) if options else None

    def resolve(self, node: Node) -> Keyed:
        hit = self.memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        result = self.compute(node) if self.has_anchor(node) else {(False, False): node}
        self.memo[id(node)] = (node, result)
        return result

    def compute(self, node: Node) -> Keyed:
        if node is START or node == START:
            return {(True, False): Empty()}
        if node is END or node == END:
            return {(False, True): Empty()}
        if isinstance(node, Concat):
            acc: Keyed = {(False, False): Empty()}
            run: list[Node] = []  # anchor-free items since the last anchored one, concatenated at once
            for item in node.items:
                if not self.has_anchor(item):
                    run.append(item)
                    continue
                if run:
                    acc = self.concat(acc, {(False, False): _concat(run)})
                    run = []
                acc = self.concat(acc, self.resolve(item))
                if not acc:
                    return acc
            return self.concat(acc, {(False, False): _concat(run)}) if run else acc
        if isinstance(node, Alternation):
            parts: dict[Key, list[Node]] = {}
            for item in node.items:
                for key, n in self.resolve(item).items():
                    parts.setdefault(key, []).append(n)
            return {key: _union(ns) for key, ns in parts.items()}
        if isinstance(node, Repeat):
            return self.repeat(self.resolve(node.item), node.min, node.max)
        return {(False, False): node}

    def concat(self, left: Keyed, right: Keyed) -> Keyed:
        """Paths of ``left`` then ``right``: a ``^`` on the right needs the left part empty, a ``$`` on the left
        needs the right part empty (or, wide, a final newline)."""
        parts: dict[Key, list[Node]] = {}
        for (ls, le), x in left.items():
            for (rs, re_), y in right.items():
                a = self.empty_before_start(x) if rs else x
                b = self.empty_after_end(y) if le else y
                if a is None or b is None:
                    continue
                parts.setdefault((ls or rs, le or re_), []).append(_concat([a, b]))
        return {key: _union(ns) for key, ns in parts.items()}

    def repeat(self, m: Keyed, lo: int, hi: int | None) -> Keyed:
        """Paths of ``lo..hi`` iterations. Iterations before the last one passing a ``^`` consume nothing, as do
        those after the first one passing a ``$``; in between only anchor-free iterations (key (False, False))."""
        if set(m) <= {(False, False)}:
            plain = _repeat(m.get((False, False)), lo, hi)
            return {} if plain is None else {(False, False): plain}
        m00, m10, m01, m11 = (m.get(k) for k in ((False, False), (True, False), (False, True), (True, True)))
        z = {k for k, n in m.items() if nullable(n)}
        pad_pre = bool(z & {(False, False), (True, False)})
        pad_post = bool(z & {(False, False), (False, True)})
        out: dict[Key, list[Node]] = {}

        def add(key: Key, *pieces: Node | None) -> None:
            if all(p is not None for p in pieces):
                out.setdefault(key, []).append(_concat([p for p in pieces if p is not None]))

        add((False, False), _repeat(m00, lo, hi))
        can_one = hi is None or hi >= 1
        can_two = hi is None or hi >= 2
        if m10 is not None and can_one:
            add((True, False), m10, _repeat(m00, 0 if pad_pre else lo - 1, _minus(hi, 1)))
        if m01 is not None and can_one:
            add((False, True), _repeat(m00, 0 if pad_post else lo - 1, _minus(hi, 1)), m01)
        if m10 is not None and m01 is not None and can_two:
            add((True, True), m10, _repeat(m00, 0 if pad_pre or pad_post else lo - 2, _minus(hi, 2)), m01)
        if m11 is not None and can_one and (lo <= 1 or pad_pre or pad_post):
            add((True, True), m11)
        both_empty = ((True, True) in z and (hi is None or max(lo, 1) <= hi)) or (
            {(True, False), (False, True)} <= z and (hi is None or max(lo, 2) <= hi))
        if both_empty:
            add((True, True), Empty())
        return {key: _union(ns) for key, ns in out.items()}


def resolve_anchors(node: Node, *, wide: bool = False) -> Keyed:
    """The node's paths as anchor-free nodes keyed by (passed a ``^``, passed a ``$``), exactly: a string ``w``
    is matched by a path of ``node`` starting at position ``p`` of a string ``s`` iff ``w`` is in the node of the
    path's key, and ``p == 0`` if it passed a ``^``, and ``w`` ends ``s`` if it passed a ``$``. Keys whose
    language is empty are left out (where that is visible without an automaton)."""
    return _Resolver(wide).resolve(node)
