"""Array values: prefix items, items, counts, ``contains`` witnesses and ``uniqueItems`` over a finite item language.

    element i: prefixItems[i] (else items), between minItems and maxItems
    contains C (minContains k; ALL_CONTAINS: more schemas, one witness each): the elements left to right, some of
        them witnesses (element ∧ C); the state is the witnesses counted so far. Past the prefix and minItems with no
        maxItems the rest is position-free: (sep items)* (sep witness rest)?
    maxContains m: the other elements are element ∧ ¬C (`rewrites.negate`), at most m witnesses
    uniqueItems: rule mode; each value of a finite item language is one rule called ``once=K`` (its spellings, 1
        and 1.0, under one marker), as `compiler.SchemaCompiler.any_order_object` calls members

Every alternative is written out: an array whose alternatives pass `_MAX_ARRAY_CHARS` is refused.
"""

from __future__ import annotations

import itertools
from typing import Any

from constrained.dialect.writer import Pattern, alt, cat, rep
from constrained.errors import InvalidSchemaError, UnsupportedSchemaError
from constrained.frontends.json_schema import rewrites
from constrained.frontends.json_schema.flat_nodes import conj, value_key
from constrained.frontends.json_schema.numbers import integer_bounds
from constrained.frontends.json_schema.policy import PatternApproximates
from constrained.frontends.json_schema.vocabulary import ALL_CONTAINS, CONTAINS_FROM, TYPES
from constrained.frontends.json_schema.walk import SchemaWalk
from constrained.rules import call as rule_call

__all__ = ["ArrayValues", "MAX_UNIQUE_VALUES"]

_MAX_ARRAY_CHARS = 200_000
"""Most pattern characters the written-out alternatives of one array may take."""
_MAX_CONTAINS = 4
"""Most distinct ``contains`` schemas on one array (a witness may serve any subset of them)."""

MAX_UNIQUE_VALUES = 64
"""Most distinct values an item language may have under ``uniqueItems`` (one guard marker each)."""
_INTEGER_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
"""The keywords an integer item range may have under ``uniqueItems`` (integer-valued bounds only)."""

Counts = tuple[int, ...]


def _count(flat: dict, key: str, path: str, default: int | None) -> int | None:
    value = flat.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidSchemaError(path, f"{key} must be a non-negative integer")
    return value


class ArrayValues(SchemaWalk):
    """The walk with the array value kind; `compiler.SchemaCompiler` adds the others (and `literal`, `validator`)."""

    def literal(self, value: Any, path: str) -> str:
        raise NotImplementedError

    def validator(self) -> Any:
        raise NotImplementedError

    def too_deep(self, depth: int, path: str) -> bool:
        """Whether a container at ``depth`` is past ``max_depth`` (its branch is cut; exact mode raises)."""
        if depth > self.max_depth and self.exact:
            raise PatternApproximates(path, "type", f"containers nest deeper than max_depth={self.max_depth}")
        return depth > self.max_depth

    def compile_array(self, flat: dict, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        """An array value: its prefix items, then items, between ``minItems`` and ``maxItems``, with the ``contains``
        witnesses it owes, unique where ``uniqueItems`` says so."""
        if self.too_deep(depth, path):
            return None
        prefix = flat.get("prefixItems", [])
        if not isinstance(prefix, list):
            raise InvalidSchemaError(f"{path}/prefixItems", "prefixItems must be an array")
        lo, hi = flat.get("minItems", 0), flat.get("maxItems")
        items = flat.get("items", True)
        contains: list[tuple[Any, int]] = []
        most = None
        if flat.get(ALL_CONTAINS) and "contains" not in flat:  # only ever narrows: one element at least
            flat = {**flat, "contains": True}
        if "contains" in flat:
            least = _count(flat, "minContains", path, 1)
            most = _count(flat, "maxContains", path, None)
            assert least is not None
            if most is not None and least > most:
                return None
            contains = [(flat["contains"], least)] + [(c, 1) for c in flat.get(ALL_CONTAINS) or ()]
            if len(contains) > _MAX_CONTAINS:
                raise UnsupportedSchemaError(path, "contains", f"more than {_MAX_CONTAINS} contains schemas on one "
                                             "array")
            if CONTAINS_FROM in flat and (len(contains) > 1 or least != 1 or most is not None):
                raise UnsupportedSchemaError(path, "contains", "a negated items next to other contains keywords")
            if most is not None and len(contains) > 1:
                raise UnsupportedSchemaError(path, "maxContains", "maxContains next to other contains schemas")
            if most is None:
                contains = [(c, k) for c, k in contains if k > 0]
        if flat.get("uniqueItems") is True and (hi is None or hi > 1):
            if contains:
                raise UnsupportedSchemaError(path, "uniqueItems", "uniqueItems together with contains")
            return self.unique_array(flat, path, depth, trail)
        if most is None:
            return self.counted_array(prefix, items, True, contains, None, lo, hi, path, depth, trail,
                                      flat.get(CONTAINS_FROM, 0))
        other = rewrites.negate(flat["contains"], f"{path}/contains", self.refs(path))
        return self.counted_array(prefix, items, other, contains, most, lo, hi, path, depth, trail)

    def counted_array(self, prefix: list, items: Any, other: Any, contains: list[tuple[Any, int]], most: int | None,
                      lo: int, hi: int | None, path: str, depth: int, trail: tuple[str, ...],
                      first: int = 0) -> Pattern:
        """Elements under ``prefix``/``items`` and the counts, each ``contains`` schema satisfied by at least its
        count of elements from position ``first`` on (with ``most``: at most that many; the others are element ∧
        ``other``)."""
        slots: list[Pattern] = []
        for i, sub in enumerate(prefix):
            p = self.compile(conj(sub, other), f"{path}/prefixItems/{i}", depth, trail)
            if p is None and not contains:
                hi = i if hi is None else min(hi, i)
                break
            slots.append(p)  # None: only a witness stands here
        n_slots = len(slots)
        rest = self.compile(conj(items, other), f"{path}/items", depth, trail)
        if rest is None and not contains:
            hi = n_slots if hi is None else min(hi, n_slots)
        if hi is not None and lo > hi:
            return None
        need = tuple(k for _, k in contains)
        if hi == 0:
            return self.container(r"\[", r"\]", None, True) if not any(need) else None
        sep = self.sep
        free_from = max(n_slots, lo, 1, first)  # past it, with no maxItems, the position no longer matters
        witnesses: dict[tuple[int, frozenset[int]], Pattern] = {}
        memo: dict[tuple[int, Counts], Pattern] = {}
        size = [0]

        def witness(i: int, which: frozenset[int]) -> Pattern:
            """Element i as a witness of the contains schemas ``which``."""
            at = min(i, n_slots)
            if (at, which) not in witnesses:
                sub = prefix[i] if i < n_slots else items
                for k in sorted(which):
                    sub = conj(sub, contains[k][0])
                where = f"{path}/prefixItems/{i}" if i < n_slots else f"{path}/contains"
                witnesses[at, which] = self.compile(sub, where, depth, trail)
            return witnesses[at, which]

        def accepting(got: Counts) -> bool:
            return all(g >= n for g, n in zip(got, need))

        def choices(got: Counts) -> list[tuple[frozenset[int], Counts]]:
            """The witness roles the next element may take, and the counts after it."""
            if most is not None:
                return [(frozenset({0}), (got[0] + 1,))] if got[0] < most else []
            open_ = [k for k, (g, n) in enumerate(zip(got, need)) if g < n]
            return [(frozenset(s), tuple(g + (k in s) for k, g in enumerate(got)))
                    for r in range(1, len(open_) + 1) for s in itertools.combinations(open_, r)]

        def plain(i: int) -> Pattern:
            """Elements i.. that are no (further) witnesses (each but the first behind a separator)."""
            lead = sep if i else ""
            if i >= n_slots:
                least, room = max(0, max(lo, 1) - i), None if hi is None else hi - i
                if rest is None or room == 0:
                    return "" if least == 0 else None
                if i == 0:
                    return rest + rep(sep + rest, max(0, least - 1), None if room is None else room - 1)
                return rep(sep + rest, least, room)
            if hi is not None and i >= hi:
                return ""
            element = None if slots[i] is None else cat(lead + slots[i], plain(i + 1))  # type: ignore[operator]
            if i < max(lo, 1):
                return element
            return "" if element is None else f"(?:{element})?"

        def owed(i: int, got: Counts) -> Pattern:
            """Elements i.. after ``got`` witnesses of each contains schema."""
            if (accepting(got) if most is None else got[0] == most):
                return plain(i)
            moves = choices(got) if i >= first else []
            key = (i if hi is not None or i < free_from else free_from, got)
            if key in memo:
                return memo[key]
            lead = sep if i else ""
            ends = accepting(got) and i >= max(lo, 1)
            if hi is not None and i >= hi:
                result: Pattern = "" if ends else None
            elif hi is None and i >= free_from:
                loop = "" if rest is None else rep(sep + rest, 0, None)
                after = alt([cat(lead, witness(i, s), owed(i + 1, later)) for s, later in moves])
                result = (loop + (f"(?:{after})?" if ends else after) if after is not None
                          else loop if ends else None)
            else:
                here = slots[i] if i < n_slots else rest
                parts = [None if here is None else cat(lead, here, owed(i + 1, got))]
                parts += [cat(lead, witness(i, s), owed(i + 1, later)) for s, later in moves]
                result = alt(parts)
                if ends:
                    result = "" if result is None else f"(?:{result})?"
            size[0] += len(result or "")
            if size[0] > _MAX_ARRAY_CHARS:
                raise UnsupportedSchemaError(path, "contains", "the alternatives of where the contains witnesses "
                                             "stand would explode (smaller counts fit)")
            memo[key] = result
            return result

        start = tuple(0 for _ in contains)
        return self.container(r"\[", r"\]", owed(0, start), lo == 0 and accepting(start))

    def unique_array(self, flat: dict, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        """``uniqueItems``: rule mode, over a finite item language of at most `MAX_UNIQUE_VALUES` values. Each value
        is one rule (one spelling per value: 1 and 1.0 are one value) called ``once=K``; the separator has room
        while a value is left; ``minItems``/``maxItems`` count the calls; the bracket closes through a call."""
        if flat.get("prefixItems"):
            raise UnsupportedSchemaError(path, "uniqueItems", "uniqueItems next to prefixItems")
        values = self.finite_values(flat.get("items", True), path, trail)  # refused first: the reason
        if self.rules is None:
            raise PatternApproximates(path, "uniqueItems", "unique items need the guarded calls of a pushdown grammar "
                                      "(schema_to_rules)")
        lo, hi = flat.get("minItems", 0), flat.get("maxItems")
        hi = len(values) if hi is None else min(hi, len(values))
        if lo > hi:
            return None
        if hi == 0:
            return self.container(r"\[", r"\]", None, True)
        ws = self.ws
        name = f"array{len(self.rules)}"
        lead, separator_body = (ws, f"{ws},") if self.sep == f"{ws},{ws}" else ("", self.sep)
        self.rules.setdefault("arr.s", separator_body)
        self.rules.setdefault("arr.c", rf"{ws}\]")
        calls = []
        for k, value in enumerate(values):
            self.rules[f"{name}.v{k}"] = lead + self.literal(value, path)
            calls.append(rule_call(f"{name}.v{k}", f"once={k}"))
        member = f"(?:{'|'.join(calls)})"
        separator = rule_call("arr.s", f"room={','.join(map(str, range(len(values))))}")
        close = rule_call("arr.c")  # a call, not bytes: where a guarded call may be taken, every way on is a call
        body = member + rep(separator + member, max(lo - 1, 0), hi - 1) + close  # (the budget's bound reads them)
        self.rules[name] = rf"\[(?:{close}|{body})" if lo == 0 else rf"\[{body}"
        return rule_call(name)

    def finite_values(self, items: Any, path: str, trail: tuple[str, ...]) -> list[Any]:
        """The values of a finite item language (enum/const, null, boolean, an integer range), distinct as JSON
        Schema compares them, each one the item schema accepts; refused otherwise (at the array's ``path``)."""
        candidates: list[Any] = []
        for flat, fpath, _ in self.flatten(items, f"{path}/items", trail):
            if "enum" in flat:
                candidates.extend(flat["enum"])
                continue
            for t in flat.get("type", TYPES):
                if t == "null":
                    candidates.append(None)
                elif t == "boolean":
                    candidates.extend([True, False])
                elif t == "integer" and set(flat) - {"type"} <= _INTEGER_KEYS:
                    lo, hi = integer_bounds(flat, fpath)
                    if lo is None or hi is None or hi - lo >= MAX_UNIQUE_VALUES:
                        raise UnsupportedSchemaError(path, "uniqueItems", "uniqueness of items over an unbounded "
                                                     "or wide number range is not enforced (at most "
                                                     f"{MAX_UNIQUE_VALUES} values)")
                    candidates.extend(range(lo, hi + 1))
                else:
                    kind = {"string": "strings", "object": "objects", "array": "arrays"}.get(t, "numbers")
                    raise UnsupportedSchemaError(path, "uniqueItems", f"uniqueness of items over an infinite item "
                                                 f"language ({kind}) is not a context-free constraint")
        validator = self.validator().evolve(schema=items)
        distinct: dict[str, Any] = {}
        for value in candidates:
            if value_key(value) not in distinct:
                try:
                    keep = validator.is_valid(value)
                except Exception as exc:  # a malformed keyword breaks jsonschema
                    raise InvalidSchemaError(path, f"cannot evaluate the item values: {exc}") from None
                if keep:
                    distinct[value_key(value)] = value
        if len(distinct) > MAX_UNIQUE_VALUES:
            raise UnsupportedSchemaError(path, "uniqueItems", f"uniqueness over more than {MAX_UNIQUE_VALUES} item "
                                         "values (one guard marker each)")
        return list(distinct.values())
