"""Checks of what a user hands the `ember` command — files, schemas, ``module:attr`` names — before a model loads.

Every failure is an `InputError` whose message is one line that starts with the flag or file it is about and says
what is wrong (``--schema s.json: not a valid JSON Schema: at /type: 'objekt' is not valid …``); the CLI prints it
as ``ember <command>: error: …`` and exits 2. Nothing here loads a model or touches llama.cpp.

    --schema FILE ──read_json_file──► check_json_schema (jsonschema metaschema, then the engine's schema compiler)
    --pydantic m:M ──import_attr──► pydantic.BaseModel subclass ──► check_json_schema(model_json_schema())
    --tools / --cases files ──read_json_file / read_jsonl_file──► shapes checked by `agent.calls`
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from agent.errors import AgentError

__all__ = ["InputError", "check_json_schema", "import_attr", "load_pydantic_model", "one_line", "read_json_file",
           "read_jsonl_file", "read_text_file"]

_MAX_SHOWN = 160


class InputError(AgentError, ValueError):
    """A flag or input file that cannot be used as given; the message names it and says why, on one line."""


def one_line(text: object, limit: int = _MAX_SHOWN) -> str:
    """``text`` as one bounded line (newlines folded, long text cut with …)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def read_text_file(path: str | os.PathLike[str], what: str) -> str:
    """The UTF-8 text of a file the user named; ``what`` (e.g. ``"--schema s.json"``) heads every error."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        inline = str(path).lstrip()[:1] in ("{", "[")  # JSON text given where its file's path goes
        hint = " (it takes a path to a file, not JSON text)" if inline else ""
        raise InputError(f"{what}: no such file{hint}") from None
    except IsADirectoryError:
        raise InputError(f"{what}: is a directory, not a file") from None
    except OSError as error:
        raise InputError(f"{what}: cannot be read ({error.strerror or error})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{what}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def _json_error(what: str, error: json.JSONDecodeError) -> InputError:
    return InputError(f"{what}: not JSON (line {error.lineno}, column {error.colno}: {error.msg})")


def read_json_file(path: str | os.PathLike[str], what: str) -> Any:
    """One JSON document from a UTF-8 file (a leading BOM is tolerated)."""
    text = read_text_file(path, what).removeprefix("\ufeff")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise _json_error(what, error) from None
    except RecursionError:
        raise InputError(f"{what}: JSON nested too deeply to read") from None


def read_jsonl_file(path: str | os.PathLike[str], what: str) -> list[tuple[int, Any]]:
    """``(line number, value)`` for every non-blank line of a JSON Lines file; a bad line is named by number."""
    text = read_text_file(path, what).removeprefix("\ufeff")
    values = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            values.append((line_no, json.loads(line)))
        except json.JSONDecodeError as error:
            raise InputError(f"{what} line {line_no}: not JSON (column {error.colno}: {error.msg})") from None
        except RecursionError:
            raise InputError(f"{what} line {line_no}: JSON nested too deeply to read") from None
    return values


def check_json_schema(schema: Any, what: str) -> None:
    """Refuse what is not a JSON Schema (the jsonschema metaschema of its ``$schema`` draft, 2020-12 by default)
    or what the engine cannot enforce (its schema compiler: unsupported keyword, unsatisfiable, too large)."""
    if not isinstance(schema, (dict, bool)):
        raise InputError(f"{what}: a JSON Schema is an object or a boolean, not {_json_kind(schema)}")
    import jsonschema

    try:
        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/" + "/".join(str(part) for part in error.absolute_path)
        raise InputError(f"{what}: not a valid JSON Schema: at {where}: {one_line(error.message)}") from None
    from agent.schema import enforcement_refusal

    refusal = enforcement_refusal(schema)
    if refusal is not None:
        raise InputError(f"{what}: {one_line(refusal, 300)}")


def _json_kind(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def import_attr(spec: str, flag: str) -> Any:
    """The attribute named by ``module:attr`` (modules in the current directory are importable too)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{flag} {spec}: expected module:attr")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:  # the `ember` script does not put cwd there
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
            raise InputError(f"{flag} {spec}: no module named {error.name!r}") from None
        raise InputError(f"{flag} {spec}: importing {module_name} failed: {one_line(error)}") from None
    except Exception as error:  # the user's module raised while importing: say so, in one line
        raise InputError(f"{flag} {spec}: importing {module_name} failed: {type(error).__name__}: "
                         f"{one_line(error)}") from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise InputError(f"{flag} {spec}: module {module_name!r} has no attribute {attr!r}")
        value = getattr(value, part)
    return value


def load_pydantic_model(spec: str, flag: str = "--pydantic") -> Any:
    """The pydantic ``BaseModel`` subclass named by ``module:Model``, its JSON Schema checked like a file's."""
    import pydantic

    value = import_attr(spec, flag)
    if not (isinstance(value, type) and issubclass(value, pydantic.BaseModel)):
        kind = f"the class {value.__name__}" if isinstance(value, type) else f"a {type(value).__name__}"
        raise InputError(f"{flag} {spec}: not a pydantic BaseModel subclass (it is {kind})")
    try:
        schema = value.model_json_schema()
    except Exception as error:
        raise InputError(f"{flag} {spec}: pydantic cannot make a JSON Schema of it: {one_line(error)}") from None
    check_json_schema(schema, f"{flag} {spec}")
    return value
