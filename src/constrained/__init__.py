"""Constrained decoding for llama.cpp models: a grammar decides which tokens the model may emit next.

Knows nothing of tools or sessions, and of chat templates only what `generate` needs: the GGUF's own template,
rendered the way llama-cpp-python renders it. Layers, each importing only from those below (docs/architecture.md;
tests/test_layers.py checks it)::

    runtime     processor (LogitsProcessor), serving (RequestGrammar), decoding (decode), batching
                (BatchedModel, Slot), structured (generate) over llama (LlamaModel) and sampling
    compile     how an embedded schema or a pattern compiles: one DFA when it holds the language exactly and
                fits, else rules (schema_pattern, schema_refusal, compile_grammar, compile_assembled, compile_gbnf)
    grammar     Grammar (one DFA + TokenIndex) | pushdown (PushdownGrammar): CompiledGrammar; the caches
    matcher     Cursor → Matcher, PushdownMatcher (budget-aware closing, masks, rollback)
    masks       index (TokenIndex), shortcut (string bodies), pushdown_masks
    frontends   json_schema (schema → pattern or RuleSet), gbnf (GBNF → RuleSet)
    rules       RuleSet, RulePattern, the call syntax
    automata    byte DFAs (compile_dfa, operations)       tokens: vocabulary (Vocabulary), trie (TokenTrie)
    dialect     the pattern language: nodes, parser, writer (escape_literal), json_string, json_lexemes
    errors      typed errors; the native extensions _kernel, _fsm, _pattern

No submodule shares a name with a public function: ``constrained.generate`` is the function (module
``constrained.structured``), ``constrained.decode`` the loop (module ``constrained.decoding``).

Errors are typed (`errors`): an unsupported schema keyword raises `UnsupportedSchemaError(path, keyword)`,
a mask failure raises `MaskError`; generation never continues unconstrained.
"""

from importlib.metadata import PackageNotFoundError, version

from constrained.batching import BatchDecodeError, BatchedModel, PrefixStore, Slot
from constrained.compile import (CompiledGrammar, check_pattern, compile_assembled, compile_gbnf, compile_grammar,
                                 schema_pattern, schema_refusal)
from constrained.decoding import CancelSignal, DecodeResult, DecodeTimings, FinishReason, decode
from constrained.dialect.writer import escape_literal
from constrained.errors import (BudgetTooSmallError, ConstrainedError, EmptyLanguageError, GbnfSyntaxError,
                                GrammarError, GrammarTooLargeError, IncompatibleVocabularyError, InvalidSchemaError, MaskError,
                                RegexSyntaxError, UnknownKeywordWarning, UnsupportedSchemaError)
from constrained.grammar import Grammar, compile_json_schema, compile_regex, compile_rules
from constrained.llama import LlamaModel
from constrained.processor import LogitsProcessor
from constrained.matcher import Matcher, PushdownMatcher
from constrained.pushdown import PushdownGrammar
from constrained.rules import RulePattern, RuleSet
from constrained.rules import call as call_rule
from constrained.sampling import Sampler, SamplingParams
from constrained.structured import ChatTemplateError, GenerationError, generate, render_chat_prompt
from constrained.vocabulary import Vocabulary

try:
    __version__ = version("ember")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0+unknown"

__all__ = [
    "BatchDecodeError",
    "BatchedModel",
    "BudgetTooSmallError",
    "CancelSignal",
    "ChatTemplateError",
    "CompiledGrammar",
    "ConstrainedError",
    "DecodeResult",
    "DecodeTimings",
    "EmptyLanguageError",
    "FinishReason",
    "GbnfSyntaxError",
    "GenerationError",
    "Grammar",
    "GrammarError",
    "GrammarTooLargeError",
    "IncompatibleVocabularyError",
    "InvalidSchemaError",
    "LlamaModel",
    "LogitsProcessor",
    "MaskError",
    "Matcher",
    "PrefixStore",
    "PushdownGrammar",
    "PushdownMatcher",
    "RegexSyntaxError",
    "RulePattern",
    "RuleSet",
    "Sampler",
    "SamplingParams",
    "Slot",
    "UnknownKeywordWarning",
    "UnsupportedSchemaError",
    "Vocabulary",
    "__version__",
    "call_rule",
    "check_pattern",
    "compile_assembled",
    "compile_gbnf",
    "compile_grammar",
    "compile_json_schema",
    "compile_regex",
    "compile_rules",
    "decode",
    "escape_literal",
    "generate",
    "render_chat_prompt",
    "schema_pattern",
    "schema_refusal",
]
