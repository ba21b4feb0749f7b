"""The walk of a JSON Schema: one compilation's state, and the schema nodes it enters on the way to a value.

    schema node at a position
        │ compile: the level counted (MAX_SCHEMA_DEPTH), memoised per node; rule mode: a nested value is a rule
        ▼
    flatten: $ref / allOf / anyOf / oneOf / nullable / not / if / dependencies  ──►  disjunction of flat nodes
        │            (allOf and siblings are MERGED structurally by `flat_nodes.merge`, never concatenated)
        ▼
    compile_flat: one flat node's value kinds, given by `compiler.SchemaCompiler`

A recursive ``$ref`` is unrolled at most `_MAX_REF_UNROLL` times along one path (one pattern) or becomes a call of
its rule (rule mode). Open-ended values (``true``, ``{}``) are `any_value`.
"""

from __future__ import annotations

import itertools
import re
import urllib.parse
import warnings
from typing import Any

from constrained.dialect.json_lexemes import FLEXIBLE_WS, SCALAR, STRING
from constrained.dialect.writer import Pattern, alt
from constrained.errors import GrammarTooLargeError, InvalidSchemaError, UnknownKeywordWarning, UnsupportedSchemaError
from constrained.frontends.json_schema import rewrites
from constrained.frontends.json_schema.depth import MAX_SCHEMA_DEPTH, too_deep
from constrained.frontends.json_schema.flat_nodes import merge, normalize, provably_disjoint
from constrained.frontends.json_schema.policy import MAX_PATTERN_CHARS, PatternApproximates, Whitespace
from constrained.rules import call as rule_call
from constrained.frontends.json_schema.vocabulary import (
    INTERNAL_KEYWORDS,
    REWRITTEN_KEYWORDS,
    RULE_REF,
    SUPPORTED_KEYWORDS,
    UNSUPPORTED_KEYWORDS,
    is_annotation,
)

__all__ = ["Flat", "SchemaWalk"]

_MAX_REF_UNROLL = 3
"""How many times one ``$ref`` may be entered along a single path (recursion unrolling)."""
_MAX_ALTERNATIVES = 256
"""Most flat alternatives a node may expand into (anyOf × allOf products)."""
_MAX_RULE_ALTERNATIVES = 16_384
"""Rule mode's most flat alternatives per node (each compiles on its own; nested values are rules). A ``oneOf`` of
untyped object branches made exclusive (each branch and the negations of the others, distributed) reaches 6,048
(Github_hard---o17700) and 8,229 (o33131): 2-6 s to compile, the alternatives grouped by `choice`."""
_CHOICE_CHUNK = 32
"""Rule mode: alternatives per rule of a wider alternation (`SchemaWalk.choice`); 16-64 measured alike at 276 tools."""
_RULE_MIN_CHARS = 1_000
"""Rule mode: a nested value whose body is longer than this becomes a rule of its own (shorter ones stay inline)."""
_LEXEME_CALL = re.compile(r"\(\?&=(s\d+)\)")
"""A call of a string lexeme (`compiler.SchemaCompiler.string_value` names them ``s<N>``)."""

Flat = tuple[dict, str, tuple[str, ...]]
"""A flat node, the path it came from, and the trail of ``$ref`` targets (``|``: a container) that led to it."""

_BUILDING = object()
"""`SchemaWalk._negations`: the negation is being built."""


def within(base: dict, flat: dict) -> dict:
    """``flat`` met with ``base`` (the flat node as it stands beside its siblings); as it is where they cannot be
    merged, a node of no type where they are disjoint."""
    try:
        merged = merge(base, flat, "#")
    except UnsupportedSchemaError:
        return flat
    return {"type": []} if merged is None else merged


class SchemaWalk:
    """One compilation: the root (for $ref), the whitespace policy, the depth limits, and the walk through schema
    nodes; a subclass (`compiler.SchemaCompiler`) gives `compile_flat`, the patterns of one flat node's values."""

    def __init__(self, root: Any, whitespace: Whitespace, max_depth: int, any_value_depth: int,
                 unknown_keywords: str = "warn") -> None:
        self.root = root
        self.unknown_keywords = unknown_keywords
        self.ws = FLEXIBLE_WS if whitespace == "flexible" else ""
        self.sep = ", " if whitespace == "spaced" else f"{self.ws},{self.ws}"
        self.colon = ": " if whitespace == "spaced" else f"{self.ws}:{self.ws}"
        self.max_depth = max_depth
        self.any_value_depth = any_value_depth
        self._any_cache: dict[int, str] = {}
        self._cache: dict[tuple, tuple[Any, Pattern]] = {}
        self._cached_chars = 0
        self.rules: dict[str, str] | None = None
        """Rule mode (`schema_to_rules`): nested values become rules of a pushdown grammar; None for one pattern."""
        self.exact = False
        """Raise `PatternApproximates` where one pattern would only approximate (the caller then compiles rules)."""
        self._rule_names: dict[int, str] = {}
        self._rule_results: dict[int, Pattern] = {}
        self._in_progress: set[int] = set()
        self._recursive: set[int] = set()
        self._kept: list[Any] = []
        self._negation_refs: dict[str, dict] = {}
        """``not(<pointer>)`` → the one ``{"$ref": "not(<pointer>)"}`` node the walk made for it (`negation_ref`):
        only that node may name the negation (`ref_of`)."""
        self._negations: dict[str, Any] = {}
        """``not(<pointer>)`` → the negation of the node the pointer names, once built (`_BUILDING` meanwhile)."""
        self.lexeme_extra: dict[str, int] = {}
        """Rule mode: lexeme call name → how much longer the text gets with the lexeme inline (written by
        `compiler.SchemaCompiler.string_value`, read by `inline_length`)."""
        self.fine = False
        """Rule mode, ``schema_to_rules(fine=True)``: every nested value a rule, counting past 256 characters,
        optional members chained (`subsequence_rules`), extra keys as an automaton."""
        self.any_order = False
        """Rule mode, ``schema_to_rules(property_order="any")``: members in any order (`any_order_object`)."""
        self.level = 0
        """Values and subschemas entered along the path being compiled (`compile` and `flatten` calls open),
        ``$ref`` hops included: refused past `MAX_SCHEMA_DEPTH` (`enter`; the document's own depth was checked
        before, a ``$ref`` chain adds levels)."""

    # -- entry: a schema node at a position -------------------------------------------------------------------------

    def compile(self, node: Any, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        """Pattern of `node` at container depth `depth` (containers already open around it), one `level` deeper."""
        self.enter(path, trail)
        try:
            return self.compile_level(node, path, depth, trail)
        finally:
            self.level -= 1

    def enter(self, path: str, trail: tuple[str, ...]) -> None:
        """One level deeper (`compile` into a nested value, `flatten` into a subschema), refused past the limit. A
        value's own `flatten` is one level below its `compile`: a document of MAX_SCHEMA_DEPTH containers reaches
        MAX_SCHEMA_DEPTH + 1."""
        if self.level > MAX_SCHEMA_DEPTH:
            through_ref = any(target != "|" for target in trail) or "/$defs/" in path or "/definitions/" in path
            raise too_deep(path, "levels (values and subschemas entered along this path, $ref hops included)",
                           "$ref" if through_ref else None)  # fmt: skip
        self.level += 1

    def compile_level(self, node: Any, path: str, depth: int, trail: tuple[str, ...]) -> Pattern:
        """`compile` of one node, its level counted."""
        if node is True or node == {}:
            return self.any_value(depth, self.any_value_depth, path)
        if self.rules is not None and depth > 0:
            return self.compile_rule(node, path, trail)
        key = (id(node), depth, trail)
        if key not in self._cache:  # the node is kept alive in the entry, so its id stays unique
            flats = self.flatten(node, path, trail)
            pattern = self.choice([self.compile_flat(flat, fpath, depth, ftrail, node)
                                   for flat, fpath, ftrail in flats])
            self._cache[key] = (node, pattern)
            self._cached_chars += len(pattern or "")
            if self._cached_chars > 4 * MAX_PATTERN_CHARS:
                raise GrammarTooLargeError("regex_length", MAX_PATTERN_CHARS, f"while compiling {path}")
        return self._cache[key][1]

    def compile_rule(self, node: Any, path: str, trail: tuple[str, ...]) -> Pattern:
        """Rule mode: a nested value compiled once per schema node; a call of its rule when the node is recursive
        or its body big, else the body inline (small values keep masks inside one rule)."""
        node, path = self.referent(node, path)
        key = id(node)
        if key in self._rule_results:
            return self._rule_results[key]
        name = self._rule_names.setdefault(key, f"v{len(self._rule_names)}")
        if key in self._in_progress:
            self._recursive.add(key)
            return rule_call(name)
        self._in_progress.add(key)
        self._kept.append(node)  # ids stay unique while the compilation runs
        try:
            flats = self.flatten(node, path, trail)
            body = self.choice([self.compile_flat(flat, fpath, 1, ftrail, node) for flat, fpath, ftrail in flats])
        finally:
            self._in_progress.discard(key)
        assert self.rules is not None
        if body is None:
            if key in self._recursive:
                raise InvalidSchemaError(path, "a recursive schema with no finite instance")
            result: Pattern = None
        elif key in self._recursive or self.inline_length(body) > (0 if self.fine else _RULE_MIN_CHARS):
            self.rules[name] = body
            result = rule_call(name)
        else:
            result = body
        self._rule_results[key] = result
        return result

    def choice(self, alternatives: list[Pattern]) -> Pattern:
        """The alternation of a node's flat alternatives. Rule mode splits a wide one (an envelope over hundreds of
        tools) into rules of `_CHOICE_CHUNK` alternatives, sorted so that alternatives sharing a prefix share a
        rule: one rule calling a different rule from each alternative is a DFA with a column per call, and its
        compile time and size grew with calls x states (276 tools: 10.6k states x 298 columns, a tenth of the
        cold compile). After a few bytes one chunk is left, so a mask walks one configuration again."""
        if self.rules is None or len(alternatives) <= _CHOICE_CHUNK:
            return alt(alternatives)
        distinct = [p for p in dict.fromkeys(alternatives) if p is not None]
        if len(distinct) <= _CHOICE_CHUNK:
            return alt(distinct)
        ordered = sorted(distinct)
        calls = []
        for start in range(0, len(ordered), _CHOICE_CHUNK):
            name = f"choice{len(self.rules)}"
            chunk = alt(ordered[start:start + _CHOICE_CHUNK])
            assert chunk is not None, "a chunk of distinct patterns"
            self.rules[name] = chunk
            calls.append(rule_call(name))
        return alt(calls)

    def referent(self, node: Any, path: str) -> tuple[Any, str]:
        """The node (and its path) a bare ``$ref`` (beside annotations only) stands for, through chains of them:
        one rule per schema node however many references reach it, so recursion through different references is
        found at once instead of being unrolled (and cut) along the way."""
        seen: set[int] = set()
        while (isinstance(node, dict) and isinstance(node.get("$ref"), str) and id(node) not in seen
               and all(k == "$ref" or is_annotation(k, v) for k, v in node.items())):  # fmt: skip
            seen.add(id(node))
            target = self.local_ref(self.ref_of(node, path), path)
            node, path = self.pointer(target, path), target
        return node, path

    def any_value(self, depth: int, budget: int, path: str) -> str:
        """Any JSON value nesting at most min(budget, max_depth - depth) containers (rule mode: any JSON value at
        all, through a recursive rule)."""
        if self.rules is not None:
            if "any" not in self.rules:
                self.rules["any"] = ""  # reserved while its body is built
                inner = rule_call("any")
                pair = f"{STRING}{self.colon}{inner}"
                arr = self.container(r"\[", r"\]", f"{inner}(?:{self.sep}{inner})*", True)
                obj = self.container(r"\{", r"\}", f"{pair}(?:{self.sep}{pair})*", True)
                self.rules["any"] = f"(?:{SCALAR[3:-1]}|{arr}|{obj})"
            return rule_call("any")
        if self.exact:
            raise PatternApproximates(path, "true", "an open-ended value: one pattern can only bound its depth")
        levels = max(0, min(budget, self.max_depth - depth))
        if levels not in self._any_cache:
            if levels == 0:
                self._any_cache[0] = SCALAR
            else:
                inner = self.any_value(self.max_depth - levels + 1, levels - 1, path)
                pair = f"{STRING}{self.colon}{inner}"
                arr = rf"\[{self.ws}(?:{inner}(?:{self.sep}{inner})*{self.ws})?\]"
                obj = rf"\{{{self.ws}(?:{pair}(?:{self.sep}{pair})*{self.ws})?\}}"
                self._any_cache[levels] = f"(?:{SCALAR[3:-1]}|{arr}|{obj})"
        return self._any_cache[levels]

    # -- combinators → disjunction of flat nodes --------------------------------------------------------------------

    def flatten(self, node: Any, path: str, trail: tuple[str, ...]) -> list[Flat]:
        """Eliminate $ref/allOf/anyOf/oneOf/nullable at this level: a list of merged flat nodes. One level deeper
        (`level`): every subschema the walk enters comes through here."""
        self.enter(path, trail)
        try:
            return self.flatten_level(node, path, trail)
        finally:
            self.level -= 1

    def flatten_level(self, node: Any, path: str, trail: tuple[str, ...]) -> list[Flat]:
        """`flatten` of one node, its level counted."""
        if node is True:
            return [({}, path, trail)]
        if node is False:
            return []
        if not isinstance(node, dict):
            raise InvalidSchemaError(path, f"a schema must be an object or a boolean, not {type(node).__name__}")
        has_enum = "enum" in node or "const" in node
        base: dict = {}
        for key, value in node.items():
            if is_annotation(key, value):
                continue
            if key in ("$ref", "allOf", "anyOf", "oneOf", "nullable"):
                continue
            if key in REWRITTEN_KEYWORDS and not has_enum:
                continue  # becomes allOf members below (rewrites.conjuncts)
            if key in SUPPORTED_KEYWORDS or key in INTERNAL_KEYWORDS or (has_enum and key in UNSUPPORTED_KEYWORDS):
                base[key] = value
            elif key in UNSUPPORTED_KEYWORDS:
                raise UnsupportedSchemaError(path, key, "a regular pattern cannot enforce it")
            elif self.unknown_keywords == "error":
                raise UnsupportedSchemaError(path, key, "unknown keyword (refused: unknown_keywords='error')")
            else:
                warnings.warn(f"ignoring {key!r} at {path}: not a JSON Schema keyword, so an annotation that "
                              f"constrains nothing (pass unknown_keywords='error' to refuse it)",
                              UnknownKeywordWarning, stacklevel=2)
        conjuncts: list[list[Flat]] = [[(normalize(base, path, self.unknown_keywords), path, trail)]]
        if "$ref" in node:
            conjuncts.append(self.follow(self.ref_of(node, path), path, trail))
        if "allOf" in node:
            for i, member in enumerate(self.schema_list(node, "allOf", path)):
                conjuncts.append(self.flatten(member, f"{path}/allOf/{i}", trail))
        for key in ("anyOf", "oneOf"):
            if key in node:
                branches = [self.flatten(m, f"{path}/{key}/{i}", trail) for i, m in enumerate(self.schema_list(node, key, path))]
                if key == "oneOf":
                    base = conjuncts[0][0][0]
                    overlapping = self.overlapping(branches, base)
                    if any(overlapping):  # exactly one: each branch minus the branches it may overlap
                        members = self.schema_list(node, key, path)
                        resolve = self.refs(path)
                        contexts = [[within(base, f) for f, _, _ in branch] for branch in branches]
                        exclusive = rewrites.exclusive_branches(members, overlapping, path, resolve, contexts)
                        branches = [self.flatten(m, f"{path}/{key}/{i}", trail) for i, m in enumerate(exclusive)]
                conjuncts.append([flat for branch in branches for flat in branch])
        if not has_enum:
            for sub, sub_path in rewrites.conjuncts(node, path, self.refs(path)):
                conjuncts.append(self.flatten(sub, sub_path, trail))
        if self.rules is not None:
            conjuncts = self.inline_calls(conjuncts)
        out: list[Flat] = []
        for merged, combo in self.satisfiable_combinations(conjuncts, path):
            real = [c for c in combo if c[0]]
            where = real[0][1] if len(real) == 1 else path
            out.append((merged, where, max((c[2] for c in combo), key=len)))
        if node.get("nullable") is True:
            out.append(({"type": ["null"]}, path, trail))
        return out

    def satisfiable_combinations(self, conjuncts: list[list[Flat]], path: str) -> list[tuple[dict, list[Flat]]]:
        """One flat node of each conjunct, merged, in product order, the unsatisfiable combinations dropped as soon
        as their first members contradict (the product of a oneOf made exclusive is astronomically large, its
        satisfiable part small); refused when more than the limit remain after a conjunct."""
        limit = _MAX_ALTERNATIVES if self.rules is None else _MAX_RULE_ALTERNATIVES
        partial: list[tuple[dict, list[Flat]]] = [({}, [])]
        for conjunct in conjuncts:
            partial = [(merged, [*combo, flat]) for so_far, combo in partial for flat in conjunct
                       if (merged := merge(so_far, flat[0], path)) is not None]
            if len(partial) > limit:
                if self.rules is None:  # one pattern's wall: rule mode compiles each alternative on its own
                    raise GrammarTooLargeError("alternatives", _MAX_ALTERNATIVES, f"anyOf at {path}")
                raise UnsupportedSchemaError(path, "anyOf", f"expands into more than {_MAX_RULE_ALTERNATIVES} "
                                             f"alternatives")  # fmt: skip
        return partial

    def inline_calls(self, conjuncts: list[list[Flat]]) -> list[list[Flat]]:
        """A recursive reference that meets sibling keywords cannot stay a rule call (a call is not intersected):
        it is expanded here, one more level each time round, and refused where recursion would go on."""
        if sum(any(flat for flat, _, _ in conjunct) for conjunct in conjuncts) < 2:
            return conjuncts
        out = []
        for conjunct in conjuncts:
            while any(RULE_REF in flat for flat, _, _ in conjunct):
                expanded = []
                for flat, fpath, ftrail in conjunct:
                    target = flat.get(RULE_REF)
                    if target is None:
                        expanded.append((flat, fpath, ftrail))
                    elif ftrail.count(target) >= _MAX_REF_UNROLL:
                        raise UnsupportedSchemaError(fpath, "$ref", f"{target} recurses under sibling keywords")
                    else:
                        expanded.extend(self.flatten(self.pointer(target, fpath), target, ftrail + (target,)))
                conjunct = expanded
            out.append(conjunct)
        return out

    def schema_list(self, node: dict, key: str, path: str) -> list:
        """The members of a combinator (refused unless a non-empty array)."""
        value = node[key]
        if not isinstance(value, list) or not value:
            raise InvalidSchemaError(f"{path}/{key}", f"{key} must be a non-empty array of schemas")
        return value

    def follow(self, ref: Any, path: str, trail: tuple[str, ...]) -> list[Flat]:
        """Resolve a local $ref and flatten its target. Recursion: in rule mode a call of the target's rule (a
        `RULE_REF` flat); one pattern unrolls it a bounded number of times."""
        if not isinstance(ref, str):
            raise InvalidSchemaError(path, "$ref must be a string")
        target_path = self.local_ref(ref, path)
        since_container = trail[len(trail) - list(reversed(trail)).index("|"):] if "|" in trail else trail
        if target_path in since_container:
            raise UnsupportedSchemaError(path, "$ref", f"{ref} refers to itself without nesting a container")
        if self.rules is not None and target_path in trail:  # recursion: a call of the target's rule
            return [({RULE_REF: target_path}, path, trail)]
        if trail.count(target_path) >= _MAX_REF_UNROLL:
            if self.exact:
                raise PatternApproximates(path, "$ref", f"{ref} is recursive: one pattern can only unroll it")
            return []  # recursion unrolled far enough: this branch is cut
        return self.flatten(self.pointer(target_path, path), target_path, trail + (target_path,))

    def local_ref(self, ref: str, path: str) -> str:
        """The JSON pointer a ``$ref`` names in this document (the root's ``$id`` stripped), or refused; or a
        negation `negation_ref` named."""
        if ref in self._negation_refs:
            return ref
        base = self.root.get("$id") or self.root.get("id") if isinstance(self.root, dict) else None
        if isinstance(base, str) and base and ref.startswith(base.split("#")[0]) and "#" in ref:
            ref = ref[ref.index("#"):]
        if ref == "#" or ref.startswith("#/"):
            return urllib.parse.unquote(ref)
        raise UnsupportedSchemaError(path, "$ref", f"only local JSON-pointer references are supported, not {ref!r}")

    def pointer(self, target: str, path: str) -> Any:
        """The node a JSON pointer leads to from the root, or refused as dangling; or a negation's schema."""
        if target in self._negation_refs:
            built = self._negations.get(target)
            if built is _BUILDING:
                raise UnsupportedSchemaError(path, "not", f"{target} is needed while it is being built")
            if built is None:
                self._negations[target] = _BUILDING
                try:
                    built = rewrites.negate(self.pointer(target[len("not("):-1], path), target, self.refs(target))
                finally:
                    self._negations[target] = built  # None again if it was refused
            return built
        node = self.root
        for token in target[2:].split("/") if target != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise InvalidSchemaError(path, f"$ref {target} does not resolve")
        return node

    def overlapping(self, branches: list[list[Flat]], base: dict) -> list[set[int]]:
        """For each oneOf branch, the other branches it is not provably disjoint from (exclusivity must be
        enforced against them: `rewrites.exclusive_branches`). Judged within ``base`` (the node's own keywords,
        which every branch meets: a sibling ``type: object`` leaves the branches only objects to share)."""
        resolve = self.refs("#")
        out: list[set[int]] = [set() for _ in branches]
        for (i, bi), (j, bj) in itertools.combinations(enumerate(branches), 2):
            if not all(provably_disjoint(within(base, f), within(base, g), resolve) for f, _, _ in bi for g, _, _ in bj):
                out[i].add(j)
                out[j].add(i)
        return out

    def refs(self, path: str) -> rewrites.Refs:
        """The ``$ref`` targets a rewrite at ``path`` reads (under ``not``, in a negated oneOf branch)."""
        return _Refs(self, path)

    def negation_ref(self, ref: Any, path: str) -> dict:
        """A reference to the negation of a ``$ref``'s target, named ``not(<pointer>)``, which `local_ref` and
        `pointer` then read (built once per target, recursion a call of its rule as for any ``$ref``)."""
        if not isinstance(ref, str):
            raise InvalidSchemaError(path, "$ref must be a string")
        name = f"not({self.local_ref(ref, path)})"
        return self._negation_refs.setdefault(name, {"$ref": name})

    def ref_of(self, node: dict, path: str) -> Any:
        """A schema node's ``$ref``; a negation's name only where the walk made the node (in a user's schema that
        text is no local reference, and is refused as one)."""
        ref = node["$ref"]
        if isinstance(ref, str) and ref in self._negation_refs and self._negation_refs[ref] is not node:
            raise UnsupportedSchemaError(path, "$ref", f"only local JSON-pointer references are supported, not {ref!r}")
        return ref

    # -- helpers of the value kinds ---------------------------------------------------------------------------------

    def inline_length(self, body: str) -> int:
        """The length ``body`` has with its lexeme calls inline, as if they had never been calls (what decides
        whether a value is big)."""
        extra = self.lexeme_extra
        return len(body) + sum(extra[name] for name in _LEXEME_CALL.findall(body)) if extra else len(body)

    def container(self, open_: str, close: str, body: Pattern, can_be_empty: bool) -> Pattern:
        """A container (``open_``/``close`` escaped brackets) around ``body`` (None: nothing inside; the container is
        the empty one if it may be empty, else None), spaced in the whitespace policy."""
        if body is None:
            return f"{open_}{self.ws}{close}" if can_be_empty else None
        if can_be_empty:  # the whitespace right before the body, where `hoist_whitespace` looks for it
            return f"{open_}(?:{self.ws}{close}|{self.ws}{body}{self.ws}{close})"
        return f"{open_}{self.ws}{body}{self.ws}{close}"

    def compile_flat(self, flat: dict, path: str, depth: int, trail: tuple[str, ...], original: Any) -> Pattern:
        """Pattern of one flat node at container depth `depth` (``original``: the schema node it came from): the
        value kinds, which a subclass gives (`compiler.SchemaCompiler`)."""
        raise NotImplementedError


class _Refs:
    """`rewrites.Refs` of one walk, errors naming ``path``."""

    def __init__(self, walk: SchemaWalk, path: str) -> None:
        self.walk, self.path = walk, path

    def __call__(self, ref: Any) -> Any:
        if not isinstance(ref, str):
            raise InvalidSchemaError(self.path, "$ref must be a string")
        return self.walk.pointer(self.walk.local_ref(ref, self.path), self.path)

    def negation(self, ref: Any) -> dict:
        return self.walk.negation_ref(ref, self.path)
