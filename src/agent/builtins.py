"""The built-in tools: deterministic, local, and small enough to constrain.

    builtin_tools(sandbox_root) ─► read_file       (data)    text file under sandbox_root, size-capped
                                ─► calculator      (data)    + - * / // % ** and parentheses over numbers, via ast
                                ─► write_artifact  (action)  bytes published through ctx.artifacts (run-local)

Owns: the sandbox rule for reads (`resolve_in_sandbox`) and safe arithmetic (`evaluate_arithmetic`).
Refuses, by design: shell, network, delete, and anything outside the sandbox. Every built-in is
``constrained=True``: its schema is small and exact, so decoding can force well-formed calls.

Sandbox rule (read_file): the path must be relative, free of ``..`` components and NUL bytes; it is resolved
(symlinks followed) and must stay under the resolved sandbox root, so a symlink that points outside is refused;
the final component is then opened with ``O_NOFOLLOW`` and must be a regular file no larger than the cap. The
sandbox guards against a model's mistakes and injected paths, not against a local process racing to swap
directories between the check and the open.

Arithmetic rule (calculator): Python's own parser and operator semantics, but only number literals (no
booleans, complex or names), the seven binary operators, unary ``+``/``-`` and parentheses. Integer results
are capped at 4096 bits (an exponent that would exceed it is refused before computing), floats must stay
finite and real, nesting is capped at 100 levels. Division by zero is a clear ``execution_failed`` result.
"""

from __future__ import annotations

import ast
import math
import operator
import os
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Final

from agent.errors import ToolDefinitionError
from agent.grounding import GROUNDED_KEY
from agent.results import ResultErrorKind
from agent.schema import ValidatedArguments
from agent.tool import Tool, ToolContext, ToolFailure, ToolKind

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_INT_BITS",
    "builtin_tools",
    "calculator_tool",
    "evaluate_arithmetic",
    "read_file_tool",
    "resolve_in_sandbox",
    "write_artifact_tool",
]

MAX_EXPRESSION_CHARS: Final = 1000
MAX_INT_BITS: Final = 4096
"""Largest integer result, in bits (about 1233 decimal digits)."""
_MAX_NESTING: Final = 100
_DEFAULT_MAX_BYTES: Final = 1024 * 1024

_INVALID = ResultErrorKind.INVALID_ARGUMENTS


# ---------------------------------------------------------------------------------------------------------
# read_file
# ---------------------------------------------------------------------------------------------------------

def resolve_in_sandbox(root: Path, relative: str) -> Path:
    """The absolute path ``relative`` names under ``root`` (already resolved), or a `ToolFailure` saying why not.

    Raises:
        ToolFailure: absolute path, ``..``, NUL, or a resolution that leaves ``root`` (``invalid_arguments``).
    """
    if "\x00" in relative:
        raise ToolFailure("path contains a NUL byte", kind=_INVALID)
    if relative.startswith(("/", "\\")) or PureWindowsPath(relative).is_absolute() or PureWindowsPath(relative).drive:
        raise ToolFailure(f"absolute paths are not allowed ({relative!r}); give a path relative to the sandbox",
                          kind=_INVALID)
    if ".." in PurePosixPath(relative).parts or ".." in PureWindowsPath(relative).parts:
        raise ToolFailure(f"'..' is not allowed in paths ({relative!r})", kind=_INVALID)
    try:
        resolved = (root / relative).resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # symlink loops
        raise ToolFailure(f"cannot resolve {relative!r}: {exc}", kind=_INVALID) from None
    if not resolved.is_relative_to(root):
        raise ToolFailure(f"{relative!r} resolves outside the sandbox (through a symlink); refused", kind=_INVALID)
    return resolved


def _read_capped(path: Path, relative: str, max_bytes: int) -> bytes:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise ToolFailure(f"no such file: {relative!r}") from None
    except OSError as exc:
        raise ToolFailure(f"cannot open {relative!r}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ToolFailure(f"{relative!r} is not a regular file")
        if info.st_size > max_bytes:
            raise ToolFailure(f"{relative!r} is {info.st_size} bytes; read_file reads at most {max_bytes}")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise ToolFailure(f"{relative!r} grew past {max_bytes} bytes while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_file_tool(sandbox_root: Path, *, max_bytes: int = _DEFAULT_MAX_BYTES, grounded: bool = False) -> Tool:
    """``read_file(path)``: the UTF-8 text of a file under ``sandbox_root`` (data). ``grounded``: the path must be one
    the user's words name (``x-grounded: "user"``, `agent.grounding`): the model reads the files it was asked to, not
    paths it invents."""
    root = _sandbox(sandbox_root)

    def read_file(args: ValidatedArguments, ctx: ToolContext) -> dict[str, Any]:
        relative = args["path"]
        path = resolve_in_sandbox(root, relative)
        data = _read_capped(path, relative, max_bytes)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolFailure(f"{relative!r} is not UTF-8 text (invalid byte at offset {exc.start})") from None
        return {"path": path.relative_to(root).as_posix(), "size_bytes": len(data), "content": text}

    return Tool(
        name="read_file",
        description=("Read a UTF-8 text file from the sandbox directory and return its content. The path is "
                     f"relative to the sandbox, e.g. notes/summary.md; files over {max_bytes} bytes are refused."),
        parameters={"type": "object",
                    "properties": {"path": {"type": "string", "minLength": 1, "maxLength": 200,
                                            **({GROUNDED_KEY: "user"} if grounded else {}),
                                            "description": "Relative path inside the sandbox, e.g. data/scores.txt. "
                                                           "No leading '/', no '..'."}},
                    "required": ["path"], "additionalProperties": False},
        function=read_file, kind=ToolKind.DATA, constrained=True)


def _sandbox(sandbox_root: Path) -> Path:
    try:
        root = Path(sandbox_root).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise ToolDefinitionError("read_file", f"sandbox_root {sandbox_root} cannot be resolved: {exc}") from None
    if not root.is_dir():
        raise ToolDefinitionError("read_file", f"sandbox_root {root} is not a directory")
    return root


# ---------------------------------------------------------------------------------------------------------
# calculator
# ---------------------------------------------------------------------------------------------------------

_BINARY: Final[dict[type[ast.operator], Callable[[Any, Any], Any]]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: Final[dict[type[ast.unaryop], Callable[[Any], Any]]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _check_number(value: Any) -> int | float:
    if isinstance(value, complex):
        raise ToolFailure("the result is not a real number (negative base with a fractional exponent)")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolFailure(f"the result is too large (more than {MAX_INT_BITS} bits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolFailure("the result is not a finite number (overflow)")
    return value


def _power(base: int | float, exponent: int | float) -> int | float:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if (abs(base).bit_length() - 1) * exponent > MAX_INT_BITS:
            raise ToolFailure(f"the result is too large (more than {MAX_INT_BITS} bits)")
    return base ** exponent


def _evaluate(node: ast.AST, depth: int) -> int | float:
    if depth > _MAX_NESTING:
        raise ToolFailure(f"the expression is nested more than {_MAX_NESTING} levels deep", kind=_INVALID)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check_number(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check_number(_UNARY[type(node.op)](_evaluate(node.operand, depth + 1)))
    if _is_round_call(node):
        digits = _evaluate(node.args[1], depth + 1) if len(node.args) == 2 else 0
        if not isinstance(digits, int) or not 0 <= digits <= _MAX_ROUND_DIGITS:
            raise ToolFailure(f"round(x, n) needs an integer n from 0 to {_MAX_ROUND_DIGITS}", kind=_INVALID)
        return _check_number(round(_evaluate(node.args[0], depth + 1), digits))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _evaluate(node.left, depth + 1)
        right = _evaluate(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _check_number(_power(left, right))
        return _check_number(_BINARY[type(node.op)](left, right))
    what = type(node).__name__
    if isinstance(node, ast.Constant):
        what = f"literal {node.value!r}"
    raise ToolFailure(f"unsupported element in the expression: {what}; only numbers, + - * / // % **, "
                      f"parentheses and round(x, n) are allowed", kind=_INVALID)


_MAX_ROUND_DIGITS: Final = 15


def _is_round_call(node: ast.AST) -> bool:
    """``round(x)`` or ``round(x, n)``: the one function the calculator knows (rounding is arithmetic a small
    model gets wrong in its head), matched structurally — no name lookup, no keywords, no star-args."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "round"
            and 1 <= len(node.args) <= 2 and not node.keywords
            and not any(isinstance(a, ast.Starred) for a in node.args))


def evaluate_arithmetic(expression: str) -> int | float:
    """The value of an arithmetic expression, computed by walking its Python AST (never ``eval``).

    Raises:
        ToolFailure: syntax error or unsupported element (``invalid_arguments``); division by zero, overflow or
            a result past the bounds (``execution_failed``).
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolFailure(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters", kind=_INVALID)
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolFailure(f"not a valid arithmetic expression: {exc.msg}", kind=_INVALID) from None
    except (RecursionError, MemoryError, ValueError):
        raise ToolFailure("the expression is too complex to parse", kind=_INVALID) from None
    try:
        return _evaluate(tree.body, 0)
    except ZeroDivisionError:
        raise ToolFailure(f"division by zero in {expression.strip()!r}") from None
    except OverflowError:
        raise ToolFailure("the result is too large (numeric overflow)") from None


def calculator_tool(*, grounded: bool = False) -> Tool:
    """``calculator(expression)``: exact arithmetic on numbers (data). ``grounded``: every number in the expression
    must be one the conversation or a tool result holds (``x-grounded``, `agent.grounding`), so the model computes
    on the numbers it read, not on numbers it recalls."""

    def calculator(args: ValidatedArguments, ctx: ToolContext) -> int | float:
        return evaluate_arithmetic(args["expression"])

    # Grounded, the grammar also holds each number to one the sources hold; a counted length on top of that would
    # multiply the automaton's states by the count, so the length is left to evaluate_arithmetic's own cap.
    pattern = r"^(?:[0-9eE+\-*/%(). ,]|round)+$" if grounded else r"^(?:[0-9eE+\-*/%(). ,]|round){1,200}$"

    return Tool(
        name="calculator",
        description=("Evaluate an arithmetic expression and return the number. Supports numbers (e.g. 0.612, "
                     "1e-3), + - * / // % **, parentheses and round(x, n); no variables or other functions. "
                     "Example: round((0.744 - 0.612) / 0.612 * 100, 2)"),
        parameters={"type": "object",
                    "properties": {"expression": {"type": "string", "pattern": pattern,
                                                  "description": "Arithmetic over numbers only, e.g. (2 + 3) * 4",
                                                  **({GROUNDED_KEY: {"match": "claims"}} if grounded else {})}},
                    "required": ["expression"], "additionalProperties": False},
        function=calculator, kind=ToolKind.DATA, constrained=True)


# ---------------------------------------------------------------------------------------------------------
# write_artifact
# ---------------------------------------------------------------------------------------------------------

def write_artifact_tool(*, max_bytes: int = _DEFAULT_MAX_BYTES, grounded: bool = False) -> Tool:
    """``write_artifact(name, content)``: publish UTF-8 text as a run artifact (action, run-local). ``grounded``: the
    name must be one the user's words give (``x-grounded: "user"``): the model writes the file it was asked for, not
    one named after an earlier result."""

    def write_artifact(args: ValidatedArguments, ctx: ToolContext) -> dict[str, Any]:
        if ctx.artifacts is None:
            raise ToolFailure("this run has no artifact store; write_artifact is unavailable")
        data = args["content"].encode("utf-8")
        if len(data) > max_bytes:
            raise ToolFailure(f"content is {len(data)} bytes; write_artifact writes at most {max_bytes}",
                              kind=_INVALID)
        ref = ctx.artifacts.write(args["name"], data)
        return {"id": ref.id, "name": ref.name, "sha256": ref.sha256, "size_bytes": ref.size_bytes}

    return Tool(
        name="write_artifact",
        description=("Save text as a named artifact of this run and return its id and sha256. The artifact "
                     "exists only if this tool returns ok; describing a file in prose does not create it."),
        parameters={"type": "object",
                    "properties": {
                        "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
                                 **({GROUNDED_KEY: "user"} if grounded else {}),
                                 "description": "File name, letters/digits/._- only, e.g. best-config.md"},
                        "content": {"type": "string",
                                    "description": f"The full text to save (UTF-8, at most {max_bytes} bytes)."}},
                    "required": ["name", "content"], "additionalProperties": False},
        function=write_artifact, kind=ToolKind.ACTION, external=False, constrained=True)


def builtin_tools(sandbox_root: Path, *, max_read_bytes: int = _DEFAULT_MAX_BYTES,
                  max_artifact_bytes: int = _DEFAULT_MAX_BYTES, grounded: bool = False) -> list[Tool]:
    """``[read_file, calculator, write_artifact]``, reads confined to ``sandbox_root``. ``grounded``: read_file's
    path and write_artifact's name must be ones the user named, the calculator's numbers ones the conversation holds
    (`read_file_tool`, `calculator_tool`, `write_artifact_tool`).

    Raises:
        ToolDefinitionError: ``sandbox_root`` does not exist or is not a directory.
    """
    return [read_file_tool(sandbox_root, max_bytes=max_read_bytes, grounded=grounded),
            calculator_tool(grounded=grounded), write_artifact_tool(max_bytes=max_artifact_bytes, grounded=grounded)]
