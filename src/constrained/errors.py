"""Errors raised by the constrained-decoding engine.

Misuse and bad input raise; nothing here is an expected runtime outcome. One base class
(`ConstrainedError`), subclasses named for what went wrong and carrying typed fields, so callers
match on types and attributes, never on message text.
"""

from __future__ import annotations

__all__ = [
    "ConstrainedError",
    "UnsupportedSchemaError",
    "InvalidSchemaError",
    "RegexSyntaxError",
    "GrammarTooLargeError",
    "EmptyLanguageError",
    "IncompatibleVocabularyError",
    "BudgetTooSmallError",
    "GrammarError",
    "MaskError",
    "UnknownKeywordWarning",
    "GbnfSyntaxError",
]


class ConstrainedError(Exception):
    """Base class of every error the `constrained` package raises."""


class UnsupportedSchemaError(ConstrainedError, ValueError):
    """A JSON Schema keyword (or keyword value) that the compiler cannot enforce.

    Raised instead of silently dropping the keyword: an unenforced constraint is a lie about
    the output.
    """

    def __init__(self, path: str, keyword: str, detail: str = "") -> None:
        self.path = path
        """JSON Pointer to the schema node holding the keyword, e.g. ``"#/properties/tags"``."""
        self.keyword = keyword
        """The offending keyword, e.g. ``"uniqueItems"``."""
        self.detail = detail
        msg = f"unsupported JSON Schema keyword {keyword!r} at {path}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class InvalidSchemaError(ConstrainedError, ValueError):
    """The schema itself is not valid JSON Schema (wrong value type, dangling $ref, ...)."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"invalid JSON Schema at {path}: {detail}")


class RegexSyntaxError(ConstrainedError, ValueError):
    """A regular expression the engine's regex dialect cannot parse."""

    def __init__(self, pattern: str, position: int, detail: str) -> None:
        self.pattern = pattern
        self.position = position
        self.detail = detail
        excerpt = pattern if len(pattern) <= 80 else pattern[:77] + "..."
        super().__init__(f"regex syntax error at position {position}: {detail} (pattern {excerpt!r})")


class GrammarTooLargeError(ConstrainedError, ValueError):
    """Compilation exceeded a state-count or time budget; raised instead of hanging or exhausting memory."""

    def __init__(self, what: str, limit: int | float, detail: str = "") -> None:
        self.what = what
        """Which budget: ``"dfa_states"``, ``"nfa_states"``, ``"compile_seconds"``, ``"regex_length"``..."""
        self.limit = limit
        self.detail = detail
        """Where and how far over, when known (what a caller that re-raises with its own context keeps)."""
        msg = f"grammar exceeds the {what} budget of {limit}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class EmptyLanguageError(ConstrainedError, ValueError):
    """A pattern (or schema) that no string satisfies: a grammar for it could never finish, so it is refused."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        """The pattern whose language is empty."""
        excerpt = pattern if len(pattern) <= 80 else pattern[:77] + "..."
        super().__init__(f"the pattern accepts no string at all: {excerpt!r}")


class IncompatibleVocabularyError(ConstrainedError, ValueError):
    """The grammar needs bytes or special tokens that no token in the vocabulary can produce."""

    def __init__(self, detail: str, *, state: int | None = None, missing: tuple[bytes | str, ...] = ()) -> None:
        self.state = state
        self.missing = missing
        super().__init__(detail)


class BudgetTooSmallError(ConstrainedError, ValueError):
    """A token budget smaller than the shortest document the grammar accepts; refused up front."""

    def __init__(self, budget: int, needed: int) -> None:
        self.budget = budget
        self.needed = needed
        super().__init__(f"max_tokens={budget} cannot fit the shortest accepted document ({needed} tokens)")


class GrammarError(ConstrainedError, ValueError):
    """A rule set that cannot be a grammar: an undefined or invalid rule name, left recursion, a rule that
    matches nothing, a special token the rules may not name."""


class UnknownKeywordWarning(UserWarning):
    """A schema key that is no JSON Schema keyword (``_format``, ``javaType``...): the spec treats it as an
    annotation, so it constrains nothing. Warned about, never silently dropped; ``unknown_keywords="error"``
    refuses it instead."""


class MaskError(ConstrainedError, RuntimeError):
    """Masking failed mid-generation (e.g. a token outside the mask was sampled). Generation stops; it never
    continues unconstrained."""


class GbnfSyntaxError(ConstrainedError, ValueError):
    """A GBNF grammar that llama.cpp's format cannot express or we cannot translate, at a 1-based line and column."""

    def __init__(self, line: int, column: int, message: str) -> None:
        self.line = line
        self.column = column
        self.message = message
        super().__init__(f"GBNF error at line {line}, column {column}: {message}")
