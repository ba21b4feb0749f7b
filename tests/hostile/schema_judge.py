"""Worker for test_hostile_schema_compiler: compile one schema and judge named sample documents against its grammar.

Runs inside `hostile_kit.Guarded` (memory limit, wall timeout), so a pathological schema cannot take the test run
down with it. Returns the error's type name when the compiler refuses the schema, else which samples the grammar
accepts (compact JSON text, as UTF-8 bytes) plus the random-walk soundness check of `hostile_workers`.
"""

from __future__ import annotations

from typing import Any

from hostile_workers import compile_schema


def judge(payload: tuple[Any, list[str]]) -> dict[str, Any]:
    """``(schema, samples)`` → ``{"outcome": "error", "type": ...}`` or
    ``{"outcome": "grammar", "accepts": [...], ...}``."""
    schema, samples = payload
    from constrained import fsm
    from constrained.errors import ConstrainedError
    from constrained.schema import schema_to_pattern

    checked = compile_schema((schema, "compact", 0))
    if checked["outcome"] == "error":
        return checked
    try:
        dfa = fsm.compile_dfa(schema_to_pattern(schema, whitespace="compact"))
    except ConstrainedError as exc:  # cannot happen after compile_schema succeeded; reported, not hidden
        return {"outcome": "error", "type": type(exc).__name__, "message": str(exc)[:200]}
    return {**checked, "accepts": [dfa.accepts(sample.encode("utf-8", "surrogatepass")) for sample in samples]}
