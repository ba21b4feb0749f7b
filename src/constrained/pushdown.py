"""Pushdown grammars: rules whose bodies are byte DFAs that call other rules; the matcher keeps a stack.

One regular language per document hits a wall on big schemas (state budgets), shared ``$ref``s (copied per use),
recursion (unrolled to a fixed depth) and many tools (one envelope DFA). Here a grammar is a set of RULES, each a
pattern of our dialect compiled by the native DFA compiler, in which ``(?&=NAME)`` calls rule NAME. All rule DFAs
are laid side by side in one table; a call is a move (push the continuation, enter the callee's start state), and
reaching an accepting state of a called rule allows a return (pop). Recursion is unbounded: depth is the token
budget's business, not the compiler's.

    Rules {name: body} ──compile_class_form──► table T [states, classes] (all rules, one numbering), read through
                                               symbol → class (256 + specials): never expanded by symbol
                                               calls[state] = ((callee start, continuation), ...)
                                               boundary[state]: the state can call or return
    configuration = (state, stack of continuation states);  a matcher holds a set of them (ambiguity is allowed)
    mask(config)  = inside(state)         kernel walk of the whole trie in T (cached per state): tokens that stay
                                          in the rule, plus the trie nodes where the walk sits on a boundary
                  ∪ through the exits     each exit's subtree walked again from every call/return move there
                                          (cached per (state, node)), with the live stack deciding where returns go

Budget-aware closing: UB(state) is the token count of the canonical shortest completion of the state's rule,
tokenized piecewise (each piece between calls and returns separately, so one token never spans a rule boundary
and the bound holds after every token); UB(configuration) = UB(state) + UB of every continuation on the stack.
A budgeted matcher allows a token only if 1 + UB(next) fits, so a document always completes.
Left recursion (a rule reaching itself before consuming a byte) is refused; so is a rule that cannot finish.

Guarded calls (`constrained.rules`: ``once``, ``needs``, ``room``, ``bound``) hold what no rule set of polynomial
size can: an object's members in any order, each at most once (``schema_to_rules(property_order="any")``).

An activation's markers are one stack entry, a negative int (``~bits``, bit K for marker K) on top of the stack
under the continuations of the calls it makes; it goes with the activation when it returns. A rule making `once`
calls is never inlined, so its markers are its own. Budget bounds read them (`_frame_bound`): a state with a
``bound`` call owes the calls of its chain whose marker is not in yet (each call of the chain carries the marker of
the member it stands for); a state whose calls are guarded owes its cheapest call still allowed, plus what its
continuation owes with that call's marker in.
"""

from __future__ import annotations

import array
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

import numpy as np

from constrained import _kernel, fsm
from constrained.errors import EmptyLanguageError, GrammarError, IncompatibleVocabularyError
from constrained.fsm import DEAD
from constrained.index import TERMINAL, UNREACHABLE, StateMask, TokenIndex, bounds_after, budget_levels
from constrained.matcher import PushdownMatcher
from constrained.pushdown_masks import (
    DONE, FAMILY_CAPACITY, CallMoves, Config, ConfigMask, Family, bounded_put, exit_groups, family_buffers,
    root_children, split_markers, subtree_deepest,
)
from constrained.rules import BOUND, CALL_PREFIX, NEEDS, ONCE, Guard, RuleSet, call, parse_guard
from constrained.rules import callee as rule_callee
from constrained.shortcut import string_body_shortcut
from constrained.trie import token_trie
from constrained.vocabulary import Vocabulary

__all__ = ["PushdownGrammar", "PushdownMatcher"]
_WHOLE_TRIE = np.zeros(1, dtype=np.int32)
"""`_kernel.walk_rule` roots: the trie's root, so every token."""
_HOP_SYMBOL, _HOP_CALL = 1, 2
"""Kinds of a state's canonical shortest-completion move (kernel `shortest_completions`)."""
_REACH_CAP = 1024
"""Bytes-to-boundary beyond this are not told apart (longer than any token)."""


class PushdownGrammar:
    """A compiled rule set over one vocabulary: immutable and shared; per-sequence state lives in the matcher."""

    def __init__(self, rules: Mapping[str, str], start: str, vocab: Vocabulary, *, allow_special: bool,
                 stored: tuple[Mapping[str, Any], Mapping[str, np.ndarray]] | None = None) -> None:
        """Compile ``rules``; or, given ``stored`` (what `stored()` returned for the same rules, read back from
        the disk cache), adopt its tables after checking every range the kernels trust (ValueError: another
        grammar's, or corrupt)."""
        self.rules = dict(rules)
        """Rule name → body pattern, as given."""
        self.start = start
        """The start rule."""
        self.vocabulary = vocab
        """The vocabulary masks are computed over."""
        self.allow_special = allow_special
        """Whether rule bodies may name special tokens with ``(?&NAME)``."""
        self.fingerprint = RuleSet(self.rules, start).fingerprint(vocab.fingerprint, allow_special=allow_special)
        """sha256 hex of the rules, start, special policy and vocabulary."""
        if stored is None:
            self._shortest(*self._layout(self.rules, start))
        else:
            self._adopt(*stored)
        classes, symbol_class = (np.ascontiguousarray(part, dtype=np.int32) for part in self._table)
        table_dfa = fsm.DFA.from_classes(symbol_class, classes, accepting=self._top_accept,
                                         distance=np.zeros(self.n_states, dtype=np.int32),
                                         special_names=self.special_names)  # fmt: skip
        self._table: fsm.ClassTable = table_dfa.table
        """The rules' table (the inside DFA's, what the kernels walk) in its class form: never expanded by symbol
        (40k states x 257 symbols for 276 tools; a small grammar's 2 MB were a third of its first mask)."""
        self._refuse_left_recursion()
        self.trie = token_trie(vocab)
        self.eos_ids = frozenset(vocab.eos_token_ids)
        """The vocabulary's end-of-sequence token ids."""
        self._index = TokenIndex(table_dfa, vocab, preflight=False, table_checked=True, bits_only=True)
        """Inside masks: the plain index over the whole table (its string-body shortcut, specials, EOS at the end
        of the start rule); calls and returns are this module's business. The table is in range by construction
        or checked by `_adopt`."""
        self._lock = threading.Lock()
        self.saver: Callable[[PushdownGrammar], None] | None = None
        """What `save` calls: set by `grammar.compile_rules` where a disk cache is on (this module knows no paths)."""
        self._buffers: tuple[np.ndarray, ...] | None = None
        self._inside: dict[int, tuple[StateMask, list[tuple[int, np.ndarray]]]] = {}
        self._subtree: dict[tuple[int, bytes], tuple[bytes, StateMask, list[tuple[int, np.ndarray]]]] = {}
        self._masks: dict[frozenset[Config], ConfigMask] = {}
        self._moves: dict[Config, tuple[tuple[Config, ...], tuple[Config, ...]]] = {}
        """Configuration at an exit → where its calls and returns lead (states that read nothing left out), and the
        configurations whose member families are taken whole (`_closure`)."""
        self._families: dict[int, tuple[tuple[int, tuple[int, ...], int], ...] | None] = {}
        self._family_walks: dict[tuple[int, bytes | None], Family] = {}
        self._family_buffers: tuple[np.ndarray, ...] | None = None
        self._silent: dict[int, bool] = {}
        self._ub = np.full(self.n_states, -1, dtype=np.int64)
        self._ub_stacks: dict[tuple[int, ...], int] = {(): 0}
        self._levels: dict[Any, np.ndarray] = {}
        self._restricted: dict[tuple[Any, int], StateMask] = {}
        self._forced: dict[frozenset[Config], bytes] = {}
        self.initial: frozenset[Config] = frozenset({(self._starts[self._start_rule], ())})
        """The configuration set at the start of a document."""

    # -- construction ----------------------------------------------------------------------------------------------

    def _layout(self, rules: Mapping[str, str], start: str
                ) -> tuple[np.ndarray, tuple[np.ndarray, ...], tuple[np.ndarray, np.ndarray]]:
        """Compile every body and lay the DFAs side by side (`_table`, by combined symbol class); calls go to a side
        table. Returns each class's first symbol (its column c is that symbol's column), every call move as arrays
        (call states, callees' starts, continuations, guards) and the table's predecessors (CSR, what the graph
        searches scan)."""
        if start not in rules:
            raise GrammarError(f"the start rule {start!r} is not defined")
        for name in rules:
            call(name)  # validates the name
        forms: dict[str, fsm.ClassForm] = {}
        for name, body in rules.items():
            try:
                forms[name] = fsm.compile_class_form(body, allow_special=True)
            except EmptyLanguageError:
                raise GrammarError(f"rule {name!r} matches nothing") from None
        callees = {s: rule_callee(s) for form in forms.values() for s in form.special_names
                   if s.startswith(CALL_PREFIX)}
        undefined = sorted({name for name, _ in callees.values()} - set(rules))
        if undefined:
            raise GrammarError(f"rules call undefined rules {undefined}")
        self._start_rule = start
        if any(name == start for name, _ in callees.values()):
            self._start_rule = "\0start"  # the start rule must never be on a stack: EOS is allowed only at its end
            forms = {self._start_rule: fsm.compile_class_form(call(start), allow_special=True), **forms}
        specials: dict[str, int] = {}
        for name, form in forms.items():
            for symbol in form.special_names:
                if symbol not in callees:
                    if not self.allow_special:
                        raise GrammarError(f"rule {name!r} names the special token {symbol!r}; pass allow_special=True")
                    specials.setdefault(symbol, len(specials))
        self.special_names = tuple(specials)
        """Special tokens the rules name; symbol ``256 + i`` is ``special_names[i]``."""
        self._width = 256 + len(specials)
        self._starts = {}
        total = 0
        for name, form in forms.items():  # each rule's initial state is its first
            self._starts[name] = total
            total += form.n_states
        self.n_states = total
        """States of all rules together."""
        call_index: dict[str, int] = {}  # a call's special name → its place in call_callee and call_guard
        call_callee: list[int] = []
        call_guard: list[int] = []
        guard_ids: dict[str, int] = {}
        self._guard_kinds: list[Guard] = []
        blocks = []
        for form in forms.values():
            columns = array.array("i")  # each special symbol's column in the table, or -1 - its call's index
            for symbol in form.special_names:
                if symbol in specials:
                    columns.append(256 + specials[symbol])
                    continue
                if symbol not in call_index:
                    name, guard = callees[symbol]
                    if guard and guard not in guard_ids:
                        self._guard_kinds.append(parse_guard(guard, name))  # a malformed guard is named with its call
                        guard_ids[guard] = len(guard_ids)
                    call_index[symbol] = len(call_callee)
                    call_callee.append(self._starts[name])
                    call_guard.append(guard_ids[guard] if guard else -1)
                columns.append(-1 - call_index[symbol])
            blocks.append((form.n_states, form.class_table, form.symbol_class, form.accepting, columns))
        (symbol_class, first_symbols, by_class, rule_accept, call_src, which, call_cont,
         pred_start, pred) = _kernel.lay_out_rules(blocks, self._width)
        self.guards = tuple(guard_ids)
        """The guard texts the rules' calls carry; a call move's guard is an index into them, -1 for none."""
        which = np.frombuffer(which, dtype=np.int32)
        call_moves = (np.frombuffer(call_src, dtype=np.int32), np.asarray(call_callee, dtype=np.int32)[which],
                      np.frombuffer(call_cont, dtype=np.int32), np.asarray(call_guard, dtype=np.int32)[which])
        self._rule_accept = np.frombuffer(rule_accept, dtype=np.bool_)
        self._top_accept = np.zeros(total, dtype=bool)
        top, top_form = self._starts[self._start_rule], forms[self._start_rule]
        self._top_accept[top:top + top_form.n_states] = np.frombuffer(top_form.accepting, dtype=np.bool_)
        self._table = fsm.ClassTable(np.frombuffer(by_class, dtype=np.int32).reshape(total, -1),  # `_shortest` cuts it
                                     np.frombuffer(symbol_class, dtype=np.int32))  # fmt: skip
        return (np.frombuffer(first_symbols, dtype=np.int32), call_moves,
                (np.frombuffer(pred_start, dtype=np.int32), np.frombuffer(pred, dtype=np.int32)))

    def _shortest(self, first_symbols: np.ndarray, call_moves: tuple[np.ndarray, ...],
                  predecessors: tuple[np.ndarray, np.ndarray]) -> None:
        """Shortest completion of every state within its rule (bytes and specials weigh 1, a call the callee's
        shortest document): Knuth's generalisation of Dijkstra, since a call's weight is itself a distance (kernel
        `shortest_completions`). It sees no `needs` call (a `bound` call stands for it). States that cannot finish
        are cut off (their edges and calls removed); the start must finish."""
        n, by_class = self.n_states, self._table.classes
        call_src, call_callee, call_cont = call_moves[:3]
        if self._guard_kinds:
            seen = np.asarray([kind != NEEDS for kind, _ in self._guard_kinds] + [True], dtype=bool)
            searched = seen[call_moves[3]]  # guard -1 (none) reads the last entry
            call_src, call_callee, call_cont = (part[searched] for part in call_moves[:3])
        dist = np.empty(n, dtype=np.int64)
        final = np.empty(n, dtype=np.uint8)
        hop_kind = np.empty(n, dtype=np.uint8)
        hop_a = np.empty(n, dtype=np.int32)
        hop_b = np.empty(n, dtype=np.int32)
        _kernel.shortest_completions(*predecessors, self._rule_accept.astype(np.uint8), call_src, call_callee,
                                     call_cont, UNREACHABLE, dist, final, hop_kind, hop_a, hop_b)  # fmt: skip
        by_symbol = np.flatnonzero(hop_kind == _HOP_SYMBOL).astype(np.int32)
        if by_symbol.shape[0]:  # the smallest symbol into the chosen target (canonical), all states at once: the
            # first class into it (classes are numbered by their first symbol), then that class's first symbol
            first_class = np.empty(by_symbol.shape[0], dtype=np.int32)
            _kernel.first_class_into(by_class, by_symbol, hop_a[by_symbol], first_class)
            hop_a[by_symbol] = first_symbols[first_class]
        start = self._starts[self._start_rule]
        if not final[start]:
            raise EmptyLanguageError(f"rules starting at {self.start!r} (no finite document)")
        finished = final.astype(bool)
        kept = finished[call_moves[0]] & finished[call_moves[1]] & finished[call_moves[2]]
        self._call_moves = tuple(part[kept] for part in call_moves)
        """Every call move kept (call states, callees' starts, continuations, guards): what `_link_moves` reads."""
        self._boundary = self._boundary_of(self._call_moves[0])
        self._reach = np.empty(n, dtype=np.int32)  # before the cut: reach errs low, safely
        _kernel.bytes_to_boundary(*predecessors, self._boundary, _REACH_CAP, self._reach)
        if not finished.all():
            by_class[~finished] = DEAD
            by_class[~finished[by_class] & (by_class != DEAD)] = DEAD  # DEAD (-1) indexes the last state: masked
        self._dist = dist
        self._hop_kind, self._hop_a, self._hop_b = hop_kind, hop_a, hop_b
        """The canonical shortest completion, one move per state: `_HOP_SYMBOL` (hop_a = the symbol) or
        `_HOP_CALL` (hop_a = the callee's start, hop_b = the continuation); 0 at an accepting state."""
        self._link_moves()

    def _boundary_of(self, call_states: np.ndarray) -> np.ndarray:
        """uint8 [n_states]: 1 where a state can call (one of ``call_states``) or return (a rule may end there)."""
        boundary = self._rule_accept.astype(np.uint8)
        boundary[call_states] = 1
        return boundary

    def _link_moves(self) -> None:
        """The side tables the matcher reads, from the kept call moves and the cut table."""
        src, callee, cont, guard = self._call_moves
        bound = np.zeros(0, dtype=np.int64)
        if self._guard_kinds:  # `bound` calls are never taken: they only shape the shortest completions
            kinds = np.asarray([kind for kind, _ in self._guard_kinds] + [0], dtype=np.int32)[guard]
            bound = np.flatnonzero(kinds == BOUND)
            taken = kinds != BOUND
            src, callee, cont, guard = src[taken], callee[taken], cont[taken], guard[taken]
        calling = np.zeros(self.n_states, dtype=bool)
        calling[src] = True
        tail = (self._rule_accept[cont] & ~self._top_accept[cont] & ~calling[cont]
                & (self._table.classes[cont] == DEAD).all(axis=1))  # fmt: skip
        self._pushes = CallMoves(src, callee, cont, tail, guard, self._guard_kinds)
        """Call state → its unguarded moves as stack pushes, built on first lookup; guarded ones in ``.guarded``
        (`CallMoves`)."""
        every = self._call_moves
        self._bound_calls = {int(every[0][i]): (int(every[1][i]), int(every[2][i])) for i in bound.tolist()}
        """State → (callee, continuation) of its `bound` call: the states whose bound `_owed` works out."""
        self._owed_cache: dict[int, tuple[tuple[int, int], ...]] = {}
        self._frame_bounds: dict[tuple[int, int], int] = {}
        self._accepting = self._rule_accept.tobytes()
        """`_rule_accept` as bytes: what `closure` reads a state at a time (a byte is cheaper to index)."""
        self._allowed_moves: dict[tuple[int, int], tuple[tuple[int, tuple[int, ...], int], ...]] = {}
        self._symbol_hop = np.where((self._hop_kind == _HOP_SYMBOL) & (self._dist > 0), self._hop_a,
                                    -1).astype(np.int32)  # fmt: skip
        """The symbol hop alone (-1 where the completion calls or the rule may end): what `state_bound` follows."""

    def stored(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(header, arrays): everything compiling the rules produced, for the disk cache (`_adopt` reads it)."""
        header = {"fingerprint": self.fingerprint, "start": self.start, "allow_special": self.allow_special,
                  "rules": list(self.rules.items()), "n_states": self.n_states,
                  "special_names": list(self.special_names), "start_rule": self._start_rule,
                  "starts": self._starts, "guards": list(self.guards)}  # fmt: skip
        arrays = {"symbol_class": self._table.symbol_class, "by_class": self._table.classes,
                  "rule_accept": self._rule_accept.astype(np.uint8), "top_accept": self._top_accept.astype(np.uint8),
                  "call_src": self._call_moves[0], "call_callee": self._call_moves[1], "call_cont": self._call_moves[2],
                  "call_guard": self._call_moves[3],
                  "dist": self._dist, "hop_kind": self._hop_kind, "hop_a": self._hop_a, "hop_b": self._hop_b,
                  "reach": self._reach}  # fmt: skip
        dtypes = {"dist": np.int64, "hop_kind": np.uint8, "rule_accept": np.uint8, "top_accept": np.uint8}
        return header, {name: np.ascontiguousarray(array, dtype=dtypes.get(name, np.int32))
                        for name, array in arrays.items()}  # fmt: skip

    def _adopt(self, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Take a stored compilation after checking it is this grammar's and that every index is in range. The
        table is stored in its class form, the form the kernels read."""
        def fail(what: str) -> NoReturn:
            raise ValueError(f"stored rule set: {what}")

        if (header.get("fingerprint"), header.get("start"), header.get("allow_special")) != (
                self.fingerprint, self.start, self.allow_special):
            fail("another grammar")
        n, names, starts = header["n_states"], header["special_names"], header["starts"]
        if type(n) is not int or n <= 0 or not all(isinstance(v, str) for v in names) or not isinstance(starts, dict):
            fail("malformed header")
        width = 256 + len(names)
        symbol_class, by_class = arrays["symbol_class"], arrays["by_class"]
        if symbol_class.shape != (width,) or by_class.ndim != 2 or by_class.shape[0] != n:
            fail("table shapes")
        numbered = np.maximum.accumulate(symbol_class)  # each class first appears as the next new maximum
        if symbol_class[0] != 0 or symbol_class.min() < 0 or (np.diff(numbered) > 1).any() or (
                numbered[-1] != by_class.shape[1] - 1):
            fail("symbol classes not numbered in order of first symbol")
        if not DEAD <= by_class.min() <= by_class.max() < n:
            fail("table targets out of range")
        per_state = ("rule_accept", "top_accept", "dist", "hop_kind", "hop_a", "hop_b", "reach")
        if any(arrays[name].shape != (n,) for name in per_state):
            fail("per-state shapes")
        moves = tuple(arrays[name] for name in ("call_src", "call_callee", "call_cont", "call_guard"))
        guards = header.get("guards")
        if not isinstance(guards, list) or not all(isinstance(g, str) for g in guards):
            fail("malformed header")
        try:
            self.guards, self._guard_kinds = tuple(guards), [parse_guard(g, "?") for g in guards]
        except GrammarError:
            fail("malformed call guards")
        if moves[0].ndim != 1 or any(m.shape != moves[0].shape for m in moves) or any(
                m.size and not 0 <= m.min() <= m.max() < n for m in moves[:3]) or (
                moves[3].size and not -1 <= moves[3].min() <= moves[3].max() < len(guards)):
            fail("call moves out of range")
        kind, hop_a, hop_b = arrays["hop_kind"], arrays["hop_a"], arrays["hop_b"]
        by_symbol, by_call = kind == _HOP_SYMBOL, kind == _HOP_CALL
        if (kind > _HOP_CALL).any() or ((hop_a < 0) | (hop_a >= width))[by_symbol].any() or (
                ((hop_a < 0) | (hop_a >= n) | (hop_b < 0) | (hop_b >= n))[by_call].any()):
            fail("completion moves out of range")
        if arrays["dist"].min() < 0 or arrays["reach"].min() < 0 or arrays["rule_accept"].max() > 1 or (
                arrays["top_accept"].max() > 1):
            fail("per-state values out of range")
        if header["start_rule"] not in starts or not all(type(v) is int and 0 <= v < n for v in starts.values()):
            fail("rule starts out of range")
        self.n_states, self.special_names, self._width = n, tuple(names), width
        self._start_rule, self._starts = header["start_rule"], dict(starts)
        self._table = fsm.ClassTable(by_class, symbol_class)
        self._rule_accept = arrays["rule_accept"].astype(bool)
        self._top_accept = arrays["top_accept"].astype(bool)
        self._call_moves = moves
        self._dist, self._hop_kind, self._hop_a, self._hop_b = arrays["dist"], kind, hop_a, hop_b
        self._reach = arrays["reach"]
        self._boundary = self._boundary_of(moves[0])
        self._link_moves()

    def _refuse_left_recursion(self) -> None:
        """A rule that can reach a call of itself without consuming a byte would push forever."""
        edges: dict[int, set[int]] = {}
        for start in self._starts.values():
            seen, todo = {start}, [start]
            while todo:
                state = todo.pop()
                for callee, cont in self._pushes.calls(state):
                    edges.setdefault(start, set()).add(callee)
                    if self._dist[callee] == 0 and cont not in seen:  # a nullable callee: cont is reached for free
                        seen.add(cont)
                        todo.append(cont)
        names = {state: name for name, state in self._starts.items()}
        visiting: dict[int, int] = {}  # 1: on the current path, 2: done
        for root in self._starts.values():  # depth first, with an explicit stack: a chain of 10,000 rules is fine
            if root in visiting:
                continue
            visiting[root] = 1
            path, pending = [root], [iter(edges.get(root, ()))]
            while pending:
                next_callee = next(pending[-1], None)
                if next_callee is None:
                    visiting[path.pop()] = 2
                    pending.pop()
                elif visiting.get(next_callee) == 1:
                    cycle = path[path.index(next_callee):] + [next_callee]
                    raise GrammarError("left recursion: " + " -> ".join(names[r] for r in cycle))
                elif next_callee not in visiting:
                    visiting[next_callee] = 1
                    path.append(next_callee)
                    pending.append(iter(edges.get(next_callee, ())))

    # -- the public surface ----------------------------------------------------------------------------------------

    def matcher(self, max_tokens: int | None = None) -> PushdownMatcher:
        """A fresh cursor at the start of the grammar (raises `BudgetTooSmallError` below the shortest document)."""
        return PushdownMatcher(self, max_tokens)

    def precompute(self) -> None:
        """Nothing to precompute ahead: a pushdown grammar's masks depend on the stack and are computed lazily."""

    def save(self) -> None:
        """Write the rule set's tables (and the schema aliases naming it) to the disk cache if not written yet;
        called explicitly or at interpreter exit. Its masks depend on the stack and are computed in each process."""
        if self.saver is not None:
            self.saver(self)

    def accepts(self, data: bytes) -> bool:
        """Whether ``data`` (bytes only, no special tokens) is a complete document of the grammar."""
        configs: Iterable[Config] = self.initial
        for byte in data:
            configs = self.step(configs, byte)
            if not configs:
                return False
        return any(self._top_accept[state] for state, _ in self.closure(configs))

    def __repr__(self) -> str:
        return (f"PushdownGrammar(fingerprint={self.fingerprint[:12]}…, rules={len(self.rules)}, "
                f"n_states={self.n_states}, vocabulary={self.vocabulary.name or '?'})")  # fmt: skip

    # -- configurations --------------------------------------------------------------------------------------------

    def closure(self, configs: Iterable[Config]) -> tuple[Config, ...]:
        """Every configuration reachable without consuming a symbol (calls entered, finished rules returned)."""
        return self._closure(configs, False)[0]

    def _closure(self, configs: Iterable[Config], defer: bool) -> tuple[tuple[Config, ...], tuple[Config, ...]]:
        """`closure`; with ``defer``, the `once` calls of a state whose members start with bytes are not entered:
        that configuration is listed second, for the mask to take its members as one family (`Family`)."""
        deferred = []
        seen = dict.fromkeys(configs)
        todo = list(seen)
        pushes, accept, guarded = self._pushes, self._accepting, self._pushes.guarded
        while todo:
            state, stack = todo.pop()
            for callee, push in pushes[state]:
                moved = (callee, stack + push)
                if moved not in seen:
                    seen[moved] = None
                    todo.append(moved)
            if state in guarded:
                markers, base = split_markers(stack)
                family = defer and self._family_of(state) is not None
                if family:
                    deferred.append((state, stack))
                for callee, push, bits in self._allowed(state, markers):
                    if family and bits:
                        continue
                    moved = (callee, base + (~bits, *push) if bits else stack + push)
                    if moved not in seen:
                        seen[moved] = None
                        todo.append(moved)
            if stack and accept[state]:
                below = len(stack) - 2 if stack[-1] < 0 else len(stack) - 1  # the activation's markers go with it
                if below >= 0:
                    moved = (stack[below], stack[:below])
                    if moved not in seen:
                        seen[moved] = None
                        todo.append(moved)
        return tuple(seen), tuple(deferred)

    def step(self, configs: Iterable[Config], symbol: int) -> frozenset[Config]:
        """The configurations after one byte (or special symbol 256+i) from ``configs``."""
        out = set()
        for state, stack in self.closure(configs):
            if state >= 0:
                target = self._table.at(state, symbol)
                if target >= 0:
                    out.add((target, stack))
        return frozenset(out)

    def is_accepting(self, configs: frozenset[Config]) -> bool:
        return configs == DONE or any(self._top_accept[state] for state, _ in self.closure(configs))

    # -- masks -----------------------------------------------------------------------------------------------------

    def _walk_buffers(self) -> tuple[np.ndarray, ...]:
        if self._buffers is None:
            trie = self.trie
            self._buffers = (
                np.empty(trie.n_tokens, dtype=np.int32), np.empty(trie.n_tokens, dtype=np.int32),
                np.empty(trie.n_nodes, dtype=np.int32), np.empty(trie.n_nodes, dtype=np.int32),
                np.full(trie.vocab_size, -1, dtype=np.int32),
            )  # fmt: skip
        return self._buffers

    def _walk(self, state: int, roots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids, next states, exit nodes, exit states) of the trie below ``roots`` (disjoint subtrees, ascending)
        walked from ``state``."""
        trie = self.trie
        with self._lock:
            ids, nexts, exit_nodes, exit_states, scratch = self._walk_buffers()
            count, n_exits = _kernel.walk_rule(
                *self._table, state, self._boundary, roots, trie.native, ids, nexts, exit_nodes, exit_states, scratch,
            )  # fmt: skip
            return ids[:count].copy(), nexts[:count].copy(), exit_nodes[:n_exits].copy(), exit_states[:n_exits].copy()

    def _inside_of(self, state: int) -> tuple[StateMask, list[tuple[int, np.ndarray]]]:
        """(mask of the tokens that stay in the rule, specials and EOS included; its exits, grouped by
        `exit_groups`)."""
        inside = self._inside.get(state)
        if inside is None:
            if self._is_silent(state):  # only calls or returns leave
                inside = (self._empty(), self._groups(*self._exits(state)))
            elif self._index.plan(state) is None:  # a plain walk: its exits come with it, in the same pass
                ids, nexts, exit_nodes, exit_states = self._walk(state, _WHOLE_TRIE)
                ids, nexts, _ = self._index.with_extras(state, ids, nexts)
                inside = (StateMask(ids, nexts, self.trie.vocab_size), self._groups(exit_nodes, exit_states))
            else:
                try:
                    mask = self._index.state_mask(state)
                except IncompatibleVocabularyError:  # no token spells a byte here: calls and returns may still
                    mask = self._empty()
                inside = (mask, self._groups(*self._exits(state)))
            self._inside = bounded_put(self._inside, state, inside)
        return inside

    def _empty(self) -> StateMask:
        return StateMask(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), self.trie.vocab_size)

    def _exits(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """The trie nodes (and states) where the walk from ``state`` sits on a boundary with bytes to go. Subtrees
        whose tokens are too short to reach a boundary are skipped. In a string-like state (the shortcut's plan: a
        string body, counted or not, embedded at the state, or at the state most of its bytes lead to) whose body
        image holds no boundary, a token can only get to one after the body ends: below the first bytes where the
        state and the template disagree, walked whole, and below the template's exits everywhere else."""
        trie = self.trie
        plan = self._index.plan(state)
        if plan is not None and not self._boundary[plan.embedding].any():
            template = int(plan.embedding[0])
            disagree = self._table.row(state) != self._table.row(template)
            roots = trie.root_child[np.flatnonzero(disagree)]
            roots = np.sort(roots[roots >= 0]).astype(np.int32)
            shortcut = string_body_shortcut(trie)
            assert shortcut is not None  # a plan comes from this trie's shortcut (the index's trie is the same one)
            agree = ~disagree[shortcut.exit_first_byte[plan.exits]]
            starts = np.concatenate([roots, plan.exit_nodes[agree]]).astype(np.int32)
            start_states = np.concatenate([np.full(roots.shape[0], state, dtype=np.int32),
                                           plan.embedding[plan.exit_state[agree]]]).astype(np.int32)  # fmt: skip
        else:
            starts = root_children(trie)
            start_states = np.full(starts.shape[0], state, dtype=np.int32)
        with self._lock:
            _, _, out_nodes, out_states, _ = self._walk_buffers()
            n_exits = _kernel.rule_exits(
                *self._table, self._boundary, self._reach, starts, np.ascontiguousarray(start_states),
                trie.native, subtree_deepest(trie), out_nodes, out_states,
            )  # fmt: skip
            return out_nodes[:n_exits].copy(), out_states[:n_exits].copy()

    def _is_silent(self, state: int) -> bool:
        """Whether no byte or special token moves from ``state`` (it only calls, returns or ends the document)."""
        silent = self._silent.get(state)
        if silent is None:  # read in the class form: every class is some symbol's, and DEAD is the least entry
            moves = int(self._table.classes[state].max(initial=DEAD)) != DEAD
            silent = self._silent[state] = not self._top_accept[state] and not moves
        return silent

    def _subtree_of(self, state: int, roots: np.ndarray) -> tuple[bytes, StateMask, list[tuple[int, np.ndarray]]]:
        """(the roots as a key, mask of the tokens below ``roots`` walked from ``state``, its exits grouped);
        cached."""
        key = (state, roots.tobytes())
        walked = self._subtree.get(key)
        if walked is None:
            ids, nexts, exit_nodes, exit_states = self._walk(state, roots)
            walked = (key[1], StateMask(ids, nexts, self.trie.vocab_size), self._groups(exit_nodes, exit_states))
            self._subtree = bounded_put(self._subtree, key, walked)
        return walked

    def mask(self, configs: frozenset[Config]) -> ConfigMask:
        """What ``configs`` allows next (cached per configuration set)."""
        mask = self._masks.get(configs)
        if mask is None:
            mask = self._compute_mask(configs)
            self._masks = bounded_put(self._masks, configs, mask)
        return mask

    def _compute_mask(self, configs: frozenset[Config]) -> ConfigMask:
        parts: list[tuple[Any, StateMask, tuple[int, ...]]] = []
        families: list[tuple[Family, tuple[int, ...], int]] = []
        if configs != DONE:
            plain, deferred = self._closure(configs, True)
            for state, stack in plain:
                inside, groups = self._inside_of(state)
                if len(inside):
                    parts.append((state, inside, stack))
                self._through(groups, stack, parts, families)
            for state, stack in deferred:
                self._take_family(self._family_walk(state, None), stack, parts, families)
        return ConfigMask(self, parts, families)

    def _family_of(self, state: int) -> tuple[tuple[int, tuple[int, ...], int], ...] | None:
        """The `once` calls of ``state`` as (callee's start, continuations pushed, marker bit), when every callee
        starts with bytes (no call, no return, no guard at its start): then a mask takes them as one family."""
        if state not in self._families:
            members = tuple((callee, push, bits) for callee, push, kind, bits in self._pushes.guarded[state]
                            if kind == ONCE)  # fmt: skip
            plain = all(not self._pushes[callee] and callee not in self._pushes.guarded and not self._accepting[callee]
                        for callee, _, _ in members)  # fmt: skip
            self._families[state] = members if members and plain else None
        return self._families[state]

    def _family_walk(self, state: int, roots: np.ndarray | None) -> Family:
        """The walks of a family's members (`_family_of`) from their starts: over the whole trie (``roots`` None:
        their inside masks) or below ``roots``; cached. One pass of the trie for them all, unless the rules name
        special tokens (which only the inside masks add)."""
        key = (state, None if roots is None else roots.tobytes())
        walk = self._family_walks.get(key)
        if walk is None:
            family = self._family_of(state)
            assert family is not None  # only states `_closure` deferred, those with a family, are walked as one
            if roots is None and self.special_names:
                walk = Family.of_masks([(bit, push, callee, *self._inside_of(callee)) for callee, push, bit in family],
                                        self.trie.vocab_size)  # fmt: skip
            else:
                walk = self._walk_family(family, _WHOLE_TRIE if roots is None else roots)
            self._family_walks = bounded_put(self._family_walks, key, walk)
        return walk

    def _walk_family(self, family: tuple[tuple[int, tuple[int, ...], int], ...], roots: np.ndarray) -> Family:
        """A family's members walked below ``roots`` in one pass of the trie (kernel `walk_family`): the members
        with a token or an exit there (part keys (callee, roots) as `_subtree_of`'s)."""
        trie = self.trie
        starts = np.asarray([callee for callee, _, _ in family], dtype=np.int32)
        with self._lock:
            buffers = self._family_buffers or family_buffers(*FAMILY_CAPACITY)
            while True:
                count, n_exits = _kernel.walk_family(
                    *self._table, starts, self._boundary, roots, trie.native, *buffers,
                )  # fmt: skip
                room, exit_room = buffers[0].shape[0], buffers[3].shape[0]
                if count <= room and n_exits <= exit_room:
                    break
                buffers = family_buffers(max(count, room), max(n_exits, exit_room))
            self._family_buffers = buffers
            owners, ids, nexts = (buffer[:count] for buffer in buffers[:3])
            order = np.lexsort((ids, owners))  # copies: the buffers are the next walk's
            owners, ids, nexts = owners[order], ids[order], nexts[order]
            exits = zip(*(buffer[:n_exits].tolist() for buffer in buffers[3:]))
        exits_of: dict[int, tuple[list[int], list[int]]] = {}
        for owner, node, state in exits:  # a few: keys that end within a token
            nodes, states = exits_of.setdefault(owner, ([], []))
            nodes.append(node)
            states.append(state)
        counts = np.bincount(owners, minlength=len(family))
        present = np.flatnonzero(counts)
        if exits_of:
            present = np.union1d(present, list(exits_of))
        rkey = roots.tobytes()
        members = []
        for index in present.tolist():
            callee, push, bit = family[index]
            deeper = []
            if index in exits_of:
                nodes, states = exits_of[index]
                deeper = self._groups(np.asarray(nodes, dtype=np.int32), np.asarray(states, dtype=np.int32))
            members.append((bit, push, (callee, rkey), deeper))
        place = np.zeros(len(family), dtype=np.int64)
        place[present] = np.arange(present.shape[0])
        return Family(members, ids, nexts, place[owners], counts[present], trie.vocab_size)

    def _take_family(self, walk: Family, stack: tuple[int, ...], parts: list, families: list) -> None:
        """A family's members not in the activation's markers yet: one part of the mask for their tokens, and the
        walks past their exits as usual."""
        if not walk.members:
            return
        markers, base = split_markers(stack)
        if len(walk.union(markers)):
            families.append((walk, base, markers))
        for bit, push, _, deeper in walk.members:
            if deeper and not bit & markers:
                self._through(deeper, base + (~(markers | bit), *push), parts, families)

    def _groups(self, nodes: np.ndarray, states: np.ndarray) -> list[tuple[int, np.ndarray]]:
        return exit_groups(nodes, states, self.trie.node_end) if nodes.shape[0] else []

    def _through(self, groups: list[tuple[int, np.ndarray]], stack: tuple[int, ...], parts: list,
                 families: list) -> None:
        """The tokens below exits (``groups``: `exit_groups`, (state, roots)) that go on past a call or return at
        the state reached there: exits that share a state share its moves, and their disjoint subtrees one walk
        per move (a string value's ~100 exits — a quote and more punctuation — are one part, not one each). Parts
        are keyed (state, roots) for their cached walks and bounds."""
        subtree = self._subtree
        for state, roots in groups:
            here = (state, stack)
            moves = self._moves.get(here)
            if moves is None:  # exits of one mask often return to one configuration: its moves once
                plain, deferred = self._closure((here,), True)
                moves = (tuple(moved for moved in plain if moved != here and not self._is_silent(moved[0])), deferred)
                self._moves = bounded_put(self._moves, here, moves)
            rkey = roots.tobytes()
            for state_there, stack_there in moves[1]:
                self._take_family(self._family_walk(state_there, roots), stack_there, parts, families)
            for moved_state, moved_stack in moves[0]:
                walked = subtree.get((moved_state, rkey))
                key, below, deeper = self._subtree_of(moved_state, roots) if walked is None else walked
                if len(below):
                    parts.append(((moved_state, key), below, moved_stack))
                if deeper:
                    self._through(deeper, moved_stack, parts, families)

    # -- budget ----------------------------------------------------------------------------------------------------

    def upper_bound(self, configs: Iterable[Config]) -> int:
        """Fewest tokens known to finish from the best of ``configs`` (0 once accepted)."""
        best = UNREACHABLE
        for state, stack in configs:
            if state == TERMINAL:
                return 0
            best = min(best, self._frame_bound(state, stack) + self.stack_bound(stack))
        return int(best)

    def budget_cut(self, key: Any, mask: StateMask, limit: int) -> int | None:
        """The bound a part's tokens are cut to when the bound they leave may be at most ``limit``: the highest of
        its budget levels (`index.budget_levels`) within it, -1 below them all; None when every token fits.
        ``key``: the part's state, or (state, roots) for a walk below exits."""
        levels = self._levels.get(key)
        if levels is None:
            levels = budget_levels(mask, self._bounds_of)
            self._levels = bounded_put(self._levels, key, levels)
        level = int(np.searchsorted(levels, limit, side="right"))
        return None if level == levels.shape[0] else int(levels[level - 1]) if level else -1

    def restricted(self, key: Any, mask: StateMask, cut: int) -> StateMask:
        """A part's mask cut to a budget level (cached per part and cut)."""
        restricted = self._restricted.get((key, cut))
        if restricted is None:
            restricted = mask.restricted(self._bounds_of, cut)
            self._restricted = bounded_put(self._restricted, (key, cut), restricted)
        return restricted

    def _bounds_of(self, next_states: np.ndarray) -> np.ndarray:
        live = next_states[next_states >= 0]
        missing = live[self._ub[live] < 0]
        if missing.shape[0]:  # a part's tokens reach hundreds of states: their bounds in one call
            self._fill_bounds(np.unique(missing).astype(np.int32))
        return bounds_after(next_states, self._ub, self.state_bound)

    def stack_bound(self, stack: tuple[int, ...]) -> int:
        bound = self._ub_stacks.get(stack)
        if bound is None:
            top, below = stack[-1], stack[:-1]
            bound = self.stack_bound(below) + (0 if top < 0 else self._frame_bound(top, below))
            self._ub_stacks = bounded_put(self._ub_stacks, stack, bound)
        return bound

    def _allowed(self, state: int, markers: int) -> tuple[tuple[int, tuple[int, ...], int], ...]:
        """The guarded moves of ``state`` an activation with ``markers`` (bits) may take: (callee's start,
        continuations pushed, the markers after a `once` call or 0); cached."""
        key = (state, markers)
        moves = self._allowed_moves.get(key)
        if moves is None:
            allowed = []
            for callee, push, kind, bits in self._pushes.guarded[state]:
                if kind == ONCE:
                    if not markers & bits:
                        allowed.append((callee, push, markers | bits))
                elif (bits & ~markers == 0) == (kind == NEEDS):  # needs: all in; room: some out
                    allowed.append((callee, push, 0))
            moves = tuple(allowed)
            self._allowed_moves = bounded_put(self._allowed_moves, key, moves)
        return moves

    def _frame_bound(self, state: int, below: tuple[int, ...]) -> int:
        """UB of ``state`` in its activation, whose markers are on top of ``below`` (see the module docstring)."""
        return self._marked_bound(state, split_markers(below)[0])

    def _marked_bound(self, state: int, markers: int) -> int:
        """UB of ``state`` given its activation's markers (cached where they matter)."""
        if state not in self._bound_calls and state not in self._pushes.guarded:
            return self.state_bound(state)
        key = (state, markers)
        bound = self._frame_bounds.get(key)
        if bound is None:
            self._frame_bounds[key] = UNREACHABLE  # a cycle back here (none in the rules we write) adds nothing
            if state in self._bound_calls:
                bound = sum(ub for marker, ub in self._owed(state) if not marker & markers)
            else:  # every way on is a call: the cheapest one allowed, then what its continuation owes
                bound = UNREACHABLE
                plain = [(callee, push, 0) for callee, push in self._pushes[state]]
                for callee, push, marked in plain + list(self._allowed(state, markers)):
                    after = self._marked_bound(push[0], marked or markers) if push else 0  # or a tail call
                    bound = min(bound, self.state_bound(callee) + after)
            self._frame_bounds = bounded_put(self._frame_bounds, key, bound)
        return bound

    def _owed(self, state: int) -> tuple[tuple[int, int], ...]:
        """(marker or 0, UB) of each piece of the state's `bound` completion: the calls of its chain of calls,
        each under the marker its guard names (0 for none), then the chain's end and the continuation."""
        owed = self._owed_cache.get(state)
        if owed is None:
            callee, cont = self._bound_calls[state]
            pieces, here = [], callee
            while self._hop_kind[here] == _HOP_CALL:  # the chain's canonical completion is its calls, in order
                member = int(self._hop_a[here])
                marker = next((bits for c, _, _, bits in self._pushes.guarded.get(here, ()) if c == member), 0)
                pieces.append((marker, self.state_bound(member)))
                here = int(self._hop_b[here])
            pieces.append((0, self.state_bound(here) + self.state_bound(cont)))
            owed = self._owed_cache[state] = tuple(pieces)
        return owed

    def state_bound(self, state: int) -> int:
        """UB(state): tokens of the canonical shortest completion of the state's rule, tokenized piecewise (the
        kernel fills it for every state on the way)."""
        if self._ub[state] < 0:
            self._fill_bounds(np.asarray([state], dtype=np.int32))
        return int(self._ub[state])

    def _fill_bounds(self, states: np.ndarray) -> None:
        """Work out UB for ``states`` (int32) in one kernel call, on the class form (no rule's rows needed)."""
        trie = self.trie
        _kernel.completion_bounds(
            *self._table, self._symbol_hop, self._dist,
            self._rule_accept, self._hop_a, self._hop_b,
            trie.native, self._ub, states,
        )  # fmt: skip

    # -- forced continuation ---------------------------------------------------------------------------------------

    def forced_bytes(self, configs: frozenset[Config]) -> bytes:
        """The bytes every continuation from ``configs`` starts with (stops at a choice, acceptance, a special)."""
        forced = self._forced.get(configs)
        if forced is None:
            out = bytearray()
            current: Iterable[Config] = configs
            while len(out) < 4096:
                closed = self.closure(current)
                if any(state == TERMINAL or self._top_accept[state] for state, _ in closed):
                    break
                live: set[int] = set()
                for state, _ in closed:
                    live.update(np.flatnonzero(self._table.row(state, self._width) != DEAD).tolist())
                    if len(live) > 1:
                        break
                if len(live) != 1 or (symbol := live.pop()) >= 256:
                    break
                out.append(symbol)
                current = self.step(closed, symbol)
            forced = bytes(out)
            self._forced = bounded_put(self._forced, configs, forced)
        return forced
