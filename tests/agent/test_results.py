"""The one result builder and its bounded, always-valid-JSON text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import ResultBudgetError
from agent.results import ResultErrorKind, error_result, ok_result, result_content, result_json
from agent.schema import ArgumentError, ArgumentErrors, ValidationErrorKind, validate_arguments


def test_ok_result_has_the_contract_shape():
    assert ok_result({"x": 1}) == {"ok": True, "result": {"x": 1}}


def test_error_result_lists_path_and_reason_of_every_argument_error():
    errors = [ArgumentError(path="operation", reason="missing required argument",
                            kind=ValidationErrorKind.MISSING_REQUIRED),
              ArgumentError(path="a", reason="expected number, got string", kind=ValidationErrorKind.WRONG_TYPE)]
    result = error_result(ResultErrorKind.INVALID_ARGUMENTS, "2 invalid arguments", errors)
    assert result == {"ok": False, "kind": "invalid_arguments", "detail": "2 invalid arguments",
                      "errors": [{"path": "operation", "reason": "missing required argument"},
                                 {"path": "a", "reason": "expected number, got string"}]}


def test_the_invalid_arguments_result_is_built_from_argument_errors_in_the_seed_wording():
    calc = {"type": "object", "properties": {"operation": {"type": "string", "enum": ["add", "sub"]},
                                             "a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["operation", "a", "b"]}
    failed = validate_arguments("calc", calc, {"a": "1", "b": 2, "precision": 3})
    assert isinstance(failed, ArgumentErrors)
    assert error_result(ResultErrorKind.INVALID_ARGUMENTS, failed.detail, failed.errors) == {
        "ok": False, "kind": "invalid_arguments", "detail": "3 invalid arguments for tool 'calc'",
        "errors": [{"path": "a", "reason": "expected number, got string"},
                   {"path": "operation", "reason": "missing required argument"},
                   {"path": "precision", "reason": "unknown field"}]}


def test_error_result_always_carries_an_errors_list():
    assert error_result("timeout", "too slow")["errors"] == []


def test_error_result_refuses_an_unknown_kind():
    with pytest.raises(ValueError):
        error_result("exploded", "?")


def test_result_kinds_are_the_contract_vocabulary():
    assert {k.value for k in ResultErrorKind} == {
        "malformed_call", "unknown_tool", "invalid_arguments", "denied_by_policy", "execution_failed", "timeout",
        "cancelled", "result_not_serializable", "limit_exceeded", "server_failed"}


def test_small_result_is_compact_utf8_json_and_not_truncated():
    text, truncated = result_content(ok_result({"städte": ["Zürich", "東京"]}), max_bytes=1000)
    assert text == '{"ok":true,"result":{"städte":["Zürich","東京"]}}'
    assert truncated is False


def test_result_exactly_at_the_budget_is_not_truncated():
    full = result_json(ok_result("abc"))
    assert result_content(ok_result("abc"), max_bytes=len(full.encode())) == (full, False)


def test_truncated_string_result_is_valid_json_with_an_explicit_marker():
    value = "line\n" * 1000
    text, truncated = result_content(ok_result(value), max_bytes=200)
    assert truncated is True
    assert len(text.encode("utf-8")) <= 200
    data = json.loads(text)
    assert data["ok"] is True and data["truncated"] is True
    assert data["original_bytes"] == len(result_json(ok_result(value)).encode())
    assert value.startswith(data["result"]) and 0 < len(data["result"]) < len(value)


def test_truncated_structured_result_carries_a_prefix_of_its_json_text():
    value = {"rows": [{"i": i, "name": "ñ" * 5} for i in range(200)]}
    text, truncated = result_content(ok_result(value), max_bytes=300)
    data = json.loads(text)
    assert truncated and result_json(value).startswith(data["result"])


def test_truncation_never_splits_a_multibyte_code_point():
    # "€" is 3 bytes; budgets landing on each byte offset inside one must still yield whole characters.
    value = "€" * 400
    for max_bytes in range(120, 130):
        text, truncated = result_content(ok_result(value), max_bytes=max_bytes)
        raw = text.encode("utf-8")
        assert truncated and len(raw) <= max_bytes
        assert raw.decode("utf-8") == text
        assert set(json.loads(text)["result"]) <= {"€"}


def test_truncated_error_result_keeps_ok_false_and_its_kind():
    errors = [ArgumentError(path=f"f{i}", reason="unknown field", kind=ValidationErrorKind.UNKNOWN_FIELD)
              for i in range(100)]
    result = error_result(ResultErrorKind.INVALID_ARGUMENTS, "100 invalid arguments", errors)
    text, truncated = result_content(result, max_bytes=250)
    data = json.loads(text)
    assert truncated and data["ok"] is False and data["kind"] == "invalid_arguments"
    assert data["detail"].startswith("100 invalid arguments errors: [")


def test_unpaired_surrogates_are_escaped_so_the_text_is_encodable():
    text, _ = result_content(ok_result("a\ud800b"), max_bytes=1000)
    text.encode("utf-8")
    assert json.loads(text)["result"] == "a\ud800b"


def test_budget_too_small_for_the_wrapper_raises_with_fields():
    with pytest.raises(ResultBudgetError) as info:
        result_content(ok_result("x" * 100), max_bytes=10)
    assert info.value.max_bytes == 10 and info.value.min_bytes > 10


def test_nan_is_not_a_json_result():
    with pytest.raises(ValueError):
        result_content(ok_result(float("nan")), max_bytes=100)


@settings(max_examples=200, deadline=None)
@given(value=st.text(alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs", "Cc", "Mn")),
                     max_size=300),
       max_bytes=st.integers(min_value=80, max_value=600))
def test_result_content_is_valid_json_within_budget_and_maximal(value, max_bytes):
    text, truncated = result_content(ok_result(value), max_bytes=max_bytes)
    size = len(text.encode("utf-8"))
    assert size <= max_bytes
    data = json.loads(text)
    if not truncated:
        assert data == {"ok": True, "result": value}
        return
    shown = data["result"]
    assert value.startswith(shown) and len(shown) < len(value)
    # maximal: one more code point would not fit
    longer = result_json({**{k: v for k, v in data.items() if k != "result"}, "result": value[:len(shown) + 1]})
    assert len(longer.encode("utf-8")) > max_bytes
