"""How a pattern, a rule set or a schema becomes a grammar, for callers that build bigger grammars from schemas.

The rule is one: a language is one DFA when one DFA holds it exactly and within its budgets, else rules (a
pushdown grammar: recursion, open-ended values, sizes past the DFA's budgets). `constrained.compile_json_schema`
applies it to a whole document (with its caches); here it is applied to a schema embedded in a bigger pattern (a
tool's arguments inside a call envelope, an answer inside a turn) and to a pattern that may call rules. The agent
and the server ask here, through the package's public names, and never choose themselves.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from constrained.automata.dfa import compile_dfa
from constrained.errors import ConstrainedError, GrammarTooLargeError
from constrained.frontends.json_schema.policy import PatternApproximates, Whitespace
from constrained.gbnf import gbnf_rule_set
from constrained.grammar import CompiledGrammar, compile_regex, compile_rules
from constrained.pushdown import PushdownGrammar
from constrained.rules import RulePattern, RuleSet
from constrained.vocabulary import Vocabulary

__all__ = ["CompiledGrammar", "check_pattern", "compile_assembled", "compile_gbnf", "compile_grammar", "schema_pattern",
           "schema_refusal"]


def schema_pattern(schema: Any, *, whitespace: Whitespace = "compact", exact: bool = True,
                   rule_prefix: str | None = None) -> str:
    """The schema as a pattern to embed in a bigger one.

    Without ``rule_prefix``: its one-DFA pattern when that holds it (``exact``: exactly; else a recursion may be
    unrolled to a fixed depth), else (``exact`` only) a `RulePattern` calling its rules, named ``answer.*``. With
    ``rule_prefix``: always a `RulePattern` whose rules are named under it, for a grammar that is rules anyway. A
    `RulePattern` compiles with `compile_grammar`, its rules joined with the embedding pattern's."""
    from constrained.frontends.json_schema.translate import schema_to_pattern, schema_to_rules

    if rule_prefix is None:
        try:
            return schema_to_pattern(schema, whitespace=whitespace, exact=exact)
        except (PatternApproximates, GrammarTooLargeError):
            if not exact:
                raise
            rule_prefix = "answer"
    return RulePattern(*schema_to_rules(schema, whitespace=whitespace), prefix=rule_prefix)


def schema_refusal(schema: Any, *, whitespace: Whitespace = "compact") -> ConstrainedError | None:
    """Why no grammar can hold ``schema`` exactly (an unsupported keyword, an unknown ``format``, an unsatisfiable
    schema, one too large even for rules), or None when one can. No vocabulary is needed: the front end decides.
    Unknown keys are annotations here, warned about by the real compile."""
    from constrained.frontends.json_schema.translate import schema_to_pattern, schema_to_rules

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                schema_to_pattern(schema, whitespace=whitespace)
            except (GrammarTooLargeError, PatternApproximates):  # the real compile takes rules
                schema_to_rules(schema, whitespace=whitespace)
    except ConstrainedError as error:
        return error
    return None


def compile_grammar(source: str | RuleSet, vocab: Vocabulary, *, allow_special: bool = False) -> CompiledGrammar:
    """A pattern (one DFA; a `RulePattern` compiles with its rules) or a `RuleSet` (a pushdown grammar) over
    ``vocab``. A plain pattern too big for one DFA raises `GrammarTooLargeError`: its caller knows how to say it
    as rules."""
    if isinstance(source, RuleSet):
        return compile_rules(source.rules, source.start, vocab, allow_special=allow_special)
    if isinstance(source, RulePattern):
        return compile_rules({"start": str(source), **source.rules}, "start", vocab, allow_special=allow_special)
    return compile_regex(source, vocab, allow_special=allow_special)


def compile_assembled(build: Callable[[dict[str, str] | None], str], vocab: Vocabulary, *,
                      rules: Mapping[str, str] | None = None, allow_special: bool = False) -> CompiledGrammar:
    """A grammar the caller assembles around embedded schemas (a turn of tool calls), compiled by the one rule:
    ``build(None)`` (a plain pattern, schemas embedded as one-DFA patterns) as one DFA when it fits, else
    ``build(rules)``: the start rule's body, the dict it is given filled with the rules it calls, compiled as a
    pushdown grammar. ``rules``: rules the grammar needs anyway (a `RulePattern`'s), so it is rules from the start."""
    if not rules:
        try:
            return compile_grammar(build(None), vocab, allow_special=allow_special)
        except GrammarTooLargeError:
            pass
    filled = dict(rules or {})
    start = build(filled)
    return compile_grammar(RuleSet({"start": start, **filled}, "start"), vocab, allow_special=allow_special)


def check_pattern(pattern: str) -> None:
    """Raise the engine's error (`RegexSyntaxError`, `GrammarTooLargeError`, ...) when ``pattern`` cannot compile to
    one DFA; nothing else happens (no vocabulary, no cache)."""
    compile_dfa(pattern)


def compile_gbnf(text: str, vocab: Vocabulary, *, start: str = "root") -> PushdownGrammar:
    """Compile a llama.cpp GBNF grammar over ``vocab`` (`constrained.gbnf.gbnf_rule_set`, then its rules).

    Raises:
        GbnfSyntaxError: the text is no GBNF llama.cpp would parse, has no ``start`` rule, or names a token
            that is not a special token of ``vocab``.
        GrammarError: left recursion (llama.cpp refuses it too), a rule that can never finish.
    """
    rule_set, uses_tokens = gbnf_rule_set(text, vocab, start=start)
    return compile_rules(rule_set.rules, rule_set.start, vocab, allow_special=uses_tokens)
