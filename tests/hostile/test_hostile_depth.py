"""Hostile nesting depth: 300, 1,000 and 10,000 levels through every front end and validator (issue #44, item 2).

Each case builds its input inside a guarded worker process (`hostile_kit.Guarded`: a 4 GiB address-space cap,
RLIMIT_AS) and must end in its stated outcome: compiled (and the grammar takes a valid instance through the
matcher, and not that instance cut short) or refused with a typed error whose message names the depth limit and
where it was crossed; for the agent, the typed outcome a run gets (``ok:false`` naming the depth, a verified trace).
A worker that does not answer within `HANG_S` fails the case as hung: a guard, not a timing assertion. A
`RecursionError`, or any other exception, comes back as a crash. docs/limits.md ("Nesting depth") states each
limit and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from .hostile_kit import Guarded

HANG_S = 120.0
"""A case taking longer than this is hung (a guard that keeps the run from stalling, not a measurement)."""
DEPTHS = (300, 1_000, 10_000)


@dataclass(frozen=True)
class Compiled:
    """The front end gives a grammar that accepts the case's valid instance and rejects it cut short."""


@dataclass(frozen=True)
class Refused:
    """Refused with this error type, its message naming ``names`` (the limit) and matching ``where`` (the place)."""

    error: str
    names: str
    where: str


SCHEMA_OBJECTS = Refused("UnsupportedSchemaError", "deeper than MAX_SCHEMA_DEPTH = 1,024 containers",
                         r"keyword 'properties' at #/properties/a/properties/a/")
SCHEMA_ARRAYS = Refused("UnsupportedSchemaError", "deeper than MAX_SCHEMA_DEPTH = 1,024 containers",
                        r"keyword 'items' at #/items/items/")
REF_CHAIN = Refused("UnsupportedSchemaError", "deeper than MAX_SCHEMA_DEPTH = 1,024 levels",
                    r"keyword '\$ref' at #/\$defs/d10\d\d")
SCHEMA_TEXT = Refused("UnsupportedSchemaError", "deeper than MAX_SCHEMA_DEPTH = 1,024 containers",
                      r"JSON text, at character [\d,]+")
GBNF_GROUPS = Refused("GbnfSyntaxError", "groups nested deeper than 256 (MAX_NESTING)", r"line 1, column 266")
REGEX_GROUPS = Refused("RegexSyntaxError", "groups nested deeper than 100", r"at position 100")
PARAMETERS = Refused("ToolDefinitionError", "parameters nest deeper than MAX_SCHEMA_DEPTH = 64 containers",
                     r"at #/properties/a/properties/a/")

GRAMMARS: dict[str, dict[int, Compiled | Refused]] = {
    "schema_object": {300: Compiled(), 1_000: SCHEMA_OBJECTS, 10_000: SCHEMA_OBJECTS},
    "schema_array": {300: Compiled(), 1_000: Compiled(), 10_000: SCHEMA_ARRAYS},
    "schema_ref_chain": {300: Compiled(), 1_000: Compiled(), 10_000: REF_CHAIN},
    "schema_text": {300: Compiled(), 1_000: Compiled(), 10_000: SCHEMA_TEXT},
    "gbnf_groups": dict.fromkeys(DEPTHS, GBNF_GROUPS),
    "gbnf_rule_chain": dict.fromkeys(DEPTHS, Compiled()),
    "gbnf_left_chain": dict.fromkeys(DEPTHS, Compiled()),
    "regex_groups": dict.fromkeys(DEPTHS, REGEX_GROUPS),
    "agent_parameters": dict.fromkeys(DEPTHS, PARAMETERS),
}

_worker = Guarded("depth_workers:depth_case", mem_bytes=4 << 30, timeout_s=HANG_S)


@pytest.fixture(scope="module", autouse=True)
def _close_worker() -> Any:
    yield
    _worker.close()


def run_case(front_end: str, depth: int, *, whole: bool = False) -> dict[str, Any]:
    """The case's summary from the guarded worker; a hang, a dead worker or a crash fails the test here."""
    status, value = _worker((front_end, depth, whole))
    assert status != "timeout", f"{front_end} at depth {depth} hung (no answer within {HANG_S:g} s)"
    assert status != "died", f"{front_end} at depth {depth}: the worker died (exit {value}: the 4 GiB cap or a crash)"
    assert status == "ok", f"{front_end} at depth {depth} crashed: {value[0]}: {value[1]}"
    return value


def _depth_named(text: str) -> bool:
    """Whether a message names a depth: a number of levels or containers."""
    return re.search(r"\b\d[\d,]* (levels|containers)\b", text) is not None


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("front_end", sorted(GRAMMARS))
def test_a_deep_input_compiles_or_is_refused_with_a_typed_error_naming_depth_and_place(front_end: str,
                                                                                     depth: int) -> None:
    expected = GRAMMARS[front_end][depth]
    value = run_case(front_end, depth)
    if isinstance(expected, Refused):
        assert (value["outcome"], value.get("type")) == ("refused", expected.error), value
        assert expected.names in value["message"], value["message"]
        assert re.search(expected.where, value["message"]), value["message"]
        return
    assert value["outcome"] == "compiled", value
    assert value["accepts"], "the grammar rejects a valid instance"
    assert value["rejects_cut"], "the grammar accepts an instance cut short"


@pytest.mark.slow
@pytest.mark.parametrize("front_end", ["gbnf_rule_chain", "gbnf_left_chain"])
def test_a_ten_thousand_call_stack_accepts_its_whole_instance(front_end: str) -> None:
    value = run_case(front_end, 10_000, whole=True)
    assert value == {"outcome": "compiled", "accepts": True, "rejects_cut": True}


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_arguments_are_a_too_deep_argument_error_naming_the_depth(depth: int) -> None:
    value = run_case("agent_arguments", depth)
    for form in ("text", "value"):  # as the model wrote them, and already parsed
        [(kind, path, reason)] = value[form]
        assert kind == "too_deep", value
        assert _depth_named(reason), reason
        assert path in ("", ".".join(["a"] * 32)), path  # the text's top when it cannot parse, else where it crossed


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_deep_call_from_the_model_is_a_malformed_call_naming_the_depth(depth: int) -> None:
    value = run_case("agent_model_turn", depth)
    for codec, (action, reason, detail) in value["parsed"].items():
        assert (action, reason) == ("MalformedToolCall", "invalid_json"), (codec, detail)
        assert "258 levels a call may nest" in detail, detail
    assert value["run"] == "completed" and value["verifies"], value
    [message] = value["tool_messages"]
    assert (message["ok"], message["kind"]) == (False, "malformed_call"), message
    assert "258 levels" in message["detail"], message


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_deep_tool_result_is_result_not_serializable_naming_the_depth(depth: int) -> None:
    value = run_case("tool_result", depth)
    assert value["run"] == "completed" and value["verifies"], value
    [message] = value["tool_messages"]
    assert (message["ok"], message["kind"]) == (False, "result_not_serializable"), message
    assert "nested deeper than the 258 levels a result may nest (at result.a.a." in message["detail"], message
