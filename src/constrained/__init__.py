"""Constrained decoding for llama.cpp models: a grammar decides which tokens the model may emit next.

Knows nothing of tools or sessions, and of chat templates only what `generate` needs: the GGUF's own template,
rendered the way llama-cpp-python renders it. The data path, one module per arrow::

    GGUF ──vocabulary──► Vocabulary (exact token bytes, EOS, specials)
    JSON Schema ──schema──► pattern ──regex──► AST ──fsm──► byte DFA ─┐
                                                                     ├─index──► per-state token masks (C kernel,
    Vocabulary ──────────────────────────────────────────────────────┘            lazy, cached in memory + disk)
    JSON Schema ──schema──► rules (when one DFA cannot hold it: recursion, size) ──pushdown──► PushdownGrammar
    (either way its depth first: schema_depth refuses one past MAX_SCHEMA_DEPTH before any recursive walk)
    GBNF text ──gbnf──► rules ──pushdown──► PushdownGrammar (compile_gbnf: llama.cpp's grammar format)
    PushdownGrammar (rules calling rules; compile_rules) ──► PushdownMatcher (the Matcher interface, with a stack)
    Grammar (grammar: DFA + index, immutable) ──► Matcher (matcher: one sequence, budget-aware closing)
    Matcher ──► LogitsProcessor (processor: llama-cpp-python hook; completion_kwargs() gives create_completion
                the processor's own budget)  or  decode (decoding: the own loop over LlamaModel (llama) with
                Sampler (sampling) and forced-token batching)
    several Matchers ──► BatchedModel (batching: one llama context, a Slot per sequence, one llama_batch per step
                for every active generation; decode(slot, ...) from several threads decodes them together)
    llama_cpp.Llama | LlamaModel + output type + chat messages | prompt ──► generate (structured: GGUF chat
                template, schema from pydantic / TypeAdapter / JSON Schema) ──► validated objects

No submodule shares a name with a public function: ``constrained.generate`` is the function (module
``constrained.structured``), ``constrained.decode`` the loop (module ``constrained.decoding``).

Errors are typed (`errors`): an unsupported schema keyword raises `UnsupportedSchemaError(path, keyword)`,
a mask failure raises `MaskError`; generation never continues unconstrained.
"""

from importlib.metadata import PackageNotFoundError, version

from constrained.batching import BatchDecodeError, BatchedModel, PrefixStore, Slot
from constrained.compile import (CompiledGrammar, check_pattern, compile_gbnf, compile_grammar, schema_pattern,
                                 schema_refusal)
from constrained.decoding import CancelSignal, DecodeResult, DecodeTimings, FinishReason, decode
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
    "compile_gbnf",
    "compile_grammar",
    "compile_json_schema",
    "compile_regex",
    "compile_rules",
    "decode",
    "generate",
    "render_chat_prompt",
    "schema_pattern",
    "schema_refusal",
]
