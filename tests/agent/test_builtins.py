"""The built-in tools: sandboxed reads, ast arithmetic, artifact writes; nothing else."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.artifact import ArtifactStore
from agent.errors import ToolDefinitionError
from agent.results import ResultErrorKind as R
from agent.schema import ArgumentErrors, ValidatedArguments, validate_arguments
from agent.tool import IdempotencyStore, Tool, ToolContext, ToolFailure, ToolKind, ToolOutcome, default_policy, \
    execute_tool
from agent.builtins import MAX_INT_BITS, builtin_tools, evaluate_arithmetic


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    root = tmp_path / "sandbox"
    (root / "data").mkdir(parents=True)
    (root / "data" / "scores.txt").write_text("baseline_q4 = 0.612\ntuned_q8 = 0.744\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("outside", encoding="utf-8")
    return root


@pytest.fixture
def tools(sandbox: Path) -> dict[str, Tool]:
    return {t.name: t for t in builtin_tools(sandbox, max_read_bytes=64)}


def call(tool: Tool, raw: dict, **ctx_kw) -> ToolOutcome:
    args = validate_arguments(tool.name, tool.parameters, raw)
    assert isinstance(args, ValidatedArguments), args
    idempotency = ctx_kw.pop("idempotency", None)
    return execute_tool(tool, args, ToolContext(run_id="r", call_id="c", **ctx_kw), timeout_s=30,
                        approval=default_policy, idempotency=idempotency)


def test_the_builtins_are_three_constrained_local_tools(tools):
    assert {(t.name, t.kind, t.external, t.constrained) for t in tools.values()} == {
        ("read_file", ToolKind.DATA, False, True), ("calculator", ToolKind.DATA, False, True),
        ("write_artifact", ToolKind.ACTION, False, True)}
    for tool in tools.values():
        assert tool.parameters["additionalProperties"] is False and tool.description


def test_builtin_tools_needs_an_existing_directory(tmp_path):
    with pytest.raises(ToolDefinitionError):
        builtin_tools(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ToolDefinitionError):
        builtin_tools(tmp_path / "file")


# -- read_file -----------------------------------------------------------------------------------------------------

def test_read_file_returns_the_text_of_a_file_in_the_sandbox(tools):
    outcome = call(tools["read_file"], {"path": "data/scores.txt"})
    assert outcome.ok
    assert outcome.value == {"path": "data/scores.txt", "size_bytes": 37,
                             "content": "baseline_q4 = 0.612\ntuned_q8 = 0.744\n"}


def test_read_file_follows_symlinks_that_stay_inside(tools, sandbox):
    (sandbox / "link.txt").symlink_to(sandbox / "data" / "scores.txt")
    outcome = call(tools["read_file"], {"path": "link.txt"})
    assert outcome.ok and outcome.value["path"] == "data/scores.txt"


@pytest.mark.parametrize("path", ["/etc/passwd", "\\\\server\\share\\x", "C:\\Windows\\win.ini", "../secret.txt",
                                  "data/../../secret.txt", "data/..\\..\\secret.txt", "data/\x00x"])
def test_read_file_refuses_absolute_and_parent_paths(tools, path):
    outcome = call(tools["read_file"], {"path": path})
    assert outcome.error_kind is R.INVALID_ARGUMENTS and outcome.started


def test_read_file_refuses_symlinks_escaping_the_sandbox(tools, sandbox, tmp_path):
    (sandbox / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (sandbox / "data" / "up").symlink_to(tmp_path)
    for path in ["escape.txt", "data/up/secret.txt"]:
        outcome = call(tools["read_file"], {"path": path})
        assert outcome.error_kind is R.INVALID_ARGUMENTS and "outside the sandbox" in outcome.detail
        assert "outside" not in str(outcome.value)


def test_read_file_refuses_directories_fifos_missing_large_and_binary_files(tools, sandbox):
    os.mkfifo(sandbox / "pipe")
    (sandbox / "big.txt").write_text("x" * 65)
    (sandbox / "bin.dat").write_bytes(b"\xff\xfe\x00")
    expected = {"data": "not a regular file", "pipe": "not a regular file", "nope.txt": "no such file",
                "big.txt": "at most 64", "bin.dat": "not UTF-8"}
    for path, words in expected.items():
        outcome = call(tools["read_file"], {"path": path})
        assert outcome.error_kind is R.EXECUTION_FAILED and words in outcome.detail, (path, outcome)


def test_read_file_schema_refuses_a_missing_or_empty_path(tools):
    tool = tools["read_file"]
    assert isinstance(validate_arguments(tool.name, tool.parameters, {}), ArgumentErrors)
    assert isinstance(validate_arguments(tool.name, tool.parameters, {"path": ""}), ArgumentErrors)


# -- calculator ----------------------------------------------------------------------------------------------------

def test_calculator_reproduces_the_seed_run(tools):
    outcome = call(tools["calculator"], {"expression": "(0.744 - 0.612) / 0.612 * 100"})
    assert outcome.ok and math.isclose(outcome.value, 21.5686, rel_tol=1e-5)


@pytest.mark.parametrize(("expression", "value"), [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("-2 ** 2", -4), ("2 ** -1", 0.5), ("7 // 2", 3), ("-7 // 2", -4),
    ("7 % 3", 1), ("+5", 5), ("1e3", 1000.0), ("10 / 4", 2.5), ("2 ** 4095 - 2 ** 4095", 0), ("(((1)))", 1),
])
def test_calculator_uses_python_arithmetic(expression, value):
    result = evaluate_arithmetic(expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize("expression", ["1 / 0", "1 // 0", "5 % 0", "0 ** -1"])
def test_division_by_zero_is_a_clear_error_result(tools, expression):
    outcome = call(tools["calculator"], {"expression": expression})
    assert outcome.error_kind is R.EXECUTION_FAILED and outcome.detail.startswith("division by zero")


@pytest.mark.parametrize("expression", [
    "__import__('os').system('x')", "abs(-1)", "x + 1", "(1).real", "[1, 2]", "1 if 1 else 2", "1 < 2", "True + 1",
    "1j", "'a' * 3", "lambda: 1", "1; 2", "1 & 2", "not 1",
])
def test_calculator_refuses_everything_but_arithmetic(expression):
    with pytest.raises(ToolFailure) as info:
        evaluate_arithmetic(expression)
    assert info.value.kind is R.INVALID_ARGUMENTS


def test_calculator_schema_keeps_letters_out_before_execution(tools):
    tool = tools["calculator"]
    result = validate_arguments(tool.name, tool.parameters, {"expression": "__import__('os')"})
    assert isinstance(result, ArgumentErrors) and result.errors[0].path == "expression"


@pytest.mark.parametrize("expression", ["2 ** 100000", "9 ** 9 ** 9", "10.0 ** 400", "1e308 * 10", "(-8) ** 0.5",
                                        "(2 ** 4000) * (2 ** 4000)", "(10 ** 400) / 1", "2 ** 4096",
                                        "(" * 250 + "1" + ")" * 250,
                                        "-" * 300 + "1", "1" * 1001])
def test_calculator_bounds_size_depth_and_non_real_results(expression):
    with pytest.raises(ToolFailure):
        evaluate_arithmetic(expression)


OPS = ["+", "-", "*", "/", "//", "%"]

numbers = st.one_of(st.integers(-50, 50),
                    st.floats(-50, 50, allow_nan=False, allow_infinity=False).map(lambda f: round(f, 3)))


def render(value) -> str:
    text = repr(value)
    return f"({text})" if text.startswith("-") else text


expressions = st.recursive(
    numbers.map(render),
    lambda children: st.one_of(
        st.tuples(children, st.sampled_from(OPS), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        # small literal exponents keep every intermediate far below the integer cap, so Python and the
        # calculator see the same values all the way through
        st.tuples(children, st.one_of(st.integers(-3, 3), st.sampled_from([0.5, 1.5, -0.5]))).map(
            lambda t: f"({t[0]} ** {render(t[1])})"),
        children.map(lambda c: f"-{c}"),
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(expression=expressions)
def test_calculator_agrees_with_python_arithmetic(expression):
    try:
        expected = eval(expression, {"__builtins__": {}}, {})  # noqa: S307 - generated arithmetic only
        python_error = None
    except (ZeroDivisionError, OverflowError, TypeError) as exc:  # TypeError: a complex intermediate
        expected, python_error = None, exc
    out_of_bounds = python_error is None and (
        isinstance(expected, complex)
        or (isinstance(expected, float) and not math.isfinite(expected))
        or (isinstance(expected, int) and expected.bit_length() > MAX_INT_BITS))
    if python_error is not None or out_of_bounds:
        with pytest.raises(ToolFailure) as info:
            evaluate_arithmetic(expression)
        if isinstance(python_error, ZeroDivisionError):  # unless a complex intermediate was refused first
            assert info.value.detail.startswith(("division by zero", "the result is not a real number"))
        return
    result = evaluate_arithmetic(expression)
    assert result == expected and type(result) is type(expected)


# -- write_artifact ------------------------------------------------------------------------------------------------

def test_write_artifact_publishes_through_the_run_store(tools, tmp_path):
    store = ArtifactStore(tmp_path / "artifacts")
    outcome = call(tools["write_artifact"], {"name": "best-config.md", "content": "DONE 21.57%\n"}, artifacts=store)
    assert outcome.ok and [r.id for r in outcome.artifacts] == [outcome.value["id"]]
    assert outcome.value["name"] == "best-config.md" and outcome.value["size_bytes"] == 12
    assert store.read(outcome.value["id"]) == b"DONE 21.57%\n"
    assert all(store.verify(r) for r in outcome.artifacts)


def test_write_artifact_retried_with_the_same_arguments_writes_once(tools, tmp_path):
    store, keys = ArtifactStore(tmp_path / "artifacts"), IdempotencyStore()
    raw = {"name": "a.md", "content": "x"}
    first = call(tools["write_artifact"], raw, artifacts=store, idempotency=keys)
    second = call(tools["write_artifact"], raw, artifacts=store, idempotency=keys)
    assert second.replayed and second.value == first.value and len(store.refs()) == 1


def test_write_artifact_without_a_store_fails_clearly(tools):
    outcome = call(tools["write_artifact"], {"name": "a.md", "content": "x"})
    assert outcome.error_kind is R.EXECUTION_FAILED and "no artifact store" in outcome.detail


def test_write_artifact_names_cannot_be_paths(tools):
    tool = tools["write_artifact"]
    for name in ["../x", "/etc/x", "a/b", ".hidden", ""]:
        assert isinstance(validate_arguments(tool.name, tool.parameters, {"name": name, "content": "x"}),
                          ArgumentErrors), name


@pytest.mark.parametrize(("expression", "value"), [("round((0.744 - 0.612) / 0.612 * 100, 2)", 21.57),
                                                    ("round(2.675 * 2)", 5), ("round(1 / 3, 4)", 0.3333)])
def test_calculator_rounds_with_the_one_function_it_knows(expression, value):
    assert evaluate_arithmetic(expression) == value


@pytest.mark.parametrize("expression", ["round(1, 2, 3)", "round(x=1)", "round(1, 2.5)", "round(1, -1)",
                                        "abs(1)", "round(*[1])", "__import__('os')"])
def test_calculator_refuses_every_other_call_shape(expression):
    with pytest.raises(ToolFailure):
        evaluate_arithmetic(expression)
