"""The `ember` command end to end: real argv, real models, real files; output formats as docs/cli.md states them.

Cheap commands run through the real entry point (``python -m agent.cli`` in a subprocess, so exit statuses
are the process's); model commands call `agent.cli.main` in-process with ``--threads 1`` (llama.cpp's spinning
threads make two much slower than one on a busy 2-core machine). One ``ember run`` is shared by the trace tests.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from agent import cli
from agent.models import MODELS
from agent.schema import ValidatedArguments, validate_arguments

ROOT = Path(__file__).resolve().parents[2]
QWEN = "qwen2.5-coder-0.5b-instruct"
SMOL = "smollm2-135m-instruct"
RECORD_KEYS = {"id", "action", "text", "calls", "withheld", "raw", "tokens", "seconds"}

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"], "additionalProperties": False}


def ember_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m agent.cli ARGS`` with this environment (the grammar cache dir included)."""
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=dict(os.environ), timeout=600)


def ember(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """`agent.cli.main` in-process: (exit status, non-empty stdout lines)."""
    status = cli.main(list(args))
    out = capsys.readouterr().out
    return status, [line for line in out.splitlines() if line.strip()]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


# -- help and docs ---------------------------------------------------------------------------------------------


def test_help_lists_every_subcommand():
    result = ember_process("--help")
    assert result.returncode == 0
    for name in ("models", "generate", "call", "run", "trace", "bench", "demo", "serve"):
        assert re.search(rf"^\s+{name}\s", result.stdout, re.MULTILINE), f"{name} missing from:\n{result.stdout}"
    assert set(_subcommands()) == {"models", "generate", "call", "run", "trace", "bench", "demo", "serve"}


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: ember {name}" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_docs_name_every_option_and_choice_of_every_subcommand(name):
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert f"## `ember {name}`" in doc
    section = doc.split(f"## `ember {name}`", 1)[1].split("\n## ", 1)[0]
    for action in _subcommands()[name]._actions:
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert f"`{option}" in section or f"{option}`" in section, f"{option} of ember {name} undocumented"
        for choice in action.choices or ():
            if isinstance(choice, str):
                assert choice in section, f"choice {choice!r} of ember {name} undocumented"


def test_a_request_that_cannot_be_served_exits_2_with_one_line_not_a_traceback():
    result = ember_process("models", "path", "no-such-model")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "no-such-model" in result.stderr and "known names" in result.stderr


# -- models ----------------------------------------------------------------------------------------------------


def test_models_list_json_is_the_whole_catalogue():
    result = ember_process("models", "list", "--json")
    assert result.returncode == 0
    entries = json.loads(result.stdout)
    assert [e["name"] for e in entries] == list(MODELS)
    for entry in entries:
        assert set(entry) == {"name", "description", "size_bytes", "sha256", "sources", "path", "is_cached"}
        assert entry["sha256"] == MODELS[entry["name"]].sha256 and Path(entry["path"]).is_absolute()


@pytest.mark.model
def test_models_path_prints_an_absolute_path_to_the_pinned_bytes():
    result = ember_process("models", "path", "qwen2.5-template")
    assert result.returncode == 0
    path = Path(result.stdout.strip().splitlines()[-1])
    assert path.is_absolute() and path.is_file()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MODELS["qwen2.5-template"].sha256


# -- generate --------------------------------------------------------------------------------------------------


@pytest.mark.model
def test_generate_json_prints_n_schema_valid_documents(tmp_path, capsys):
    schema = {"type": "object",
              "properties": {"city": {"enum": ["Jyväskylä", "東京", "Paris"]},
                             "rank": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["city", "rank"], "additionalProperties": False}
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema), encoding="utf-8")
    status, lines = ember(capsys, "generate", "--model", SMOL, "--schema", str(schema_file), "--prompt",
                          "Pick a city and rank it.", "--json", "--n", "2", "--seed", "1", "--temperature", "0.8",
                          "--max-tokens", "32", "--threads", "1")
    assert status == 0 and len(lines) == 2
    for line in lines:
        jsonschema.validate(json.loads(line), schema)


def test_generate_with_a_missing_schema_file_fails_before_loading_a_model(tmp_path):
    result = ember_process("generate", "--model", QWEN, "--schema", str(tmp_path / "absent.json"), "--prompt", "x")
    assert result.returncode == 2 and "absent.json" in result.stderr
    assert "loading" not in result.stderr


# -- call ------------------------------------------------------------------------------------------------------


@pytest.mark.model
def test_call_prints_one_documented_record_with_a_valid_call(tmp_path, capsys):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                          "parameters": WEATHER}},
        {"name": "add", "description": "Add two integers", "parameters": ADD},
    ]), encoding="utf-8")
    status, lines = ember(capsys, "call", "--model", QWEN, "--tools", str(tools), "--prompt",
                          "What's the weather in Oslo?", "--tool-choice", "required", "--json",
                          "--max-tokens", "64", "--threads", "1")
    assert status == 0 and len(lines) == 1
    record = json.loads(lines[0])
    assert set(record) == RECORD_KEYS
    assert record["id"] == "1" and record["action"] == "tool_calls"
    assert record["raw"].startswith(("<tool_call>", "```json\n{", "{"))  # required: a call shape from the start
    assert isinstance(record["tokens"], int) and record["tokens"] > 0 and record["seconds"] >= 0
    assert record["calls"] and all(set(call) == {"name", "arguments", "dropped", "sources"} for call in record["calls"])
    schemas = {"get_weather": WEATHER, "add": ADD}
    for call in record["calls"]:
        assert isinstance(validate_arguments(call["name"], schemas[call["name"]], call["arguments"]),
                          ValidatedArguments)


@pytest.mark.model
def test_call_cases_prints_one_record_per_case_for_openai_and_bare_tools(tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps(case, ensure_ascii=False) for case in [
        {"id": "weather", "messages": [{"role": "user", "content": "Weather in Jyväskylä, in celsius?"}],
         "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                                     "parameters": WEATHER}}]},
        {"id": "sum", "messages": [{"role": "user", "content": "What is 19 plus 23?"}],
         "tools": [{"name": "add", "description": "Add two integers", "parameters": ADD}]},
    ]) + "\n", encoding="utf-8")
    status, lines = ember(capsys, "call", "--model", QWEN, "--cases", str(cases), "--tool-choice", "required",
                          "--max-tokens", "64", "--threads", "1")
    assert status == 0 and len(lines) == 2
    records = [json.loads(line) for line in lines]
    assert [r["id"] for r in records] == ["weather", "sum"]
    for record, (name, schema) in zip(records, [("get_weather", WEATHER), ("add", ADD)]):
        assert set(record) == RECORD_KEYS and record["action"] == "tool_calls"
        assert [c["name"] for c in record["calls"]] == [name] * len(record["calls"])
        for call in record["calls"]:
            assert isinstance(validate_arguments(name, schema, call["arguments"]), ValidatedArguments)


# -- run and trace ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_trace(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One real `ember run` with the builtin tools on a calculator prompt: one model turn, which must call the
    calculator (``--tool-choice calculator``), then the step limit ends the run."""
    work = tmp_path_factory.mktemp("ember-run")
    trace = work / "out" / "trace.jsonl"
    result = ember_process("run", "Use the calculator to compute 17*23.", "--model", QWEN, "--tools", "builtin",
                           "--trace", str(trace), "--sandbox", str(work), "--tool-choice", "calculator",
                           "--max-steps", "1", "--max-tokens", "48",
                           "--threads", "1", cwd=work)
    return result, trace


@pytest.mark.model
def test_run_streams_events_and_writes_a_trace_that_verifies(run_trace):
    result, trace = run_trace
    assert result.returncode == 1, result.stderr  # the run ended by its step limit: not `completed`
    assert result.stdout.splitlines()[-1].startswith("outcome: limit (model_steps)")
    events = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert [e["seq"] for e in events] == list(range(len(events)))
    shown = re.findall(r"^\[\s*(\d+)\] (\w+)", result.stdout, re.MULTILINE)  # one line each, streamed text apart
    assert shown == [(str(e["seq"]), e["event_type"]) for e in events]
    finished = [e for e in events if e["event_type"] == "tool_execution_finished"]
    assert len(finished) == 1 and finished[0]["data"]["tool"] == "calculator" and finished[0]["data"]["ok"] is True
    result_event = next(e for e in events if e["event_type"] == "tool_result_committed")
    assert json.loads(result_event["data"]["content"]) == {"ok": True, "result": 391}  # greedy reads 17*23
    assert events[-1]["event_type"] == "run_terminated" and result_event["seq"] < events[-1]["seq"]
    verify = ember_process("trace", "verify", str(trace))
    assert verify.returncode == 0, verify.stdout
    assert verify.stdout.strip().splitlines()[-1] == "trace verified: OK"


@pytest.mark.model
def test_trace_show_prints_one_timeline_row_per_event(run_trace, capsys):
    _, trace = run_trace
    status, lines = ember(capsys, "trace", "show", str(trace))
    n_events = len(trace.read_text(encoding="utf-8").splitlines())
    assert status == 0 and len(lines) >= n_events
    assert "run_started" in lines[0] and "calculator" in "\n".join(lines)


@pytest.mark.model
def test_trace_report_writes_html(run_trace, tmp_path, capsys):
    _, trace = run_trace
    out = tmp_path / "report.html"
    status, lines = ember(capsys, "trace", "report", str(trace), "-o", str(out))
    assert status == 0 and lines == [str(out)]
    html = out.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html") and "calculator" in html


@pytest.mark.model
@pytest.mark.parametrize("tamper", ["drop_execution_start", "forge_completion"])
def test_a_tampered_trace_fails_verification(run_trace, tmp_path, tamper):
    """A dropped event breaks the facts (exit 1); a forged completion keeps the structure, so only the narration
    heuristic catches its claim (exit 3, a labelled finding, not a fact problem)."""
    _, trace = run_trace
    lines = trace.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    if tamper == "drop_execution_start":
        lines = [line for line, e in zip(lines, events) if e["event_type"] != "tool_execution_started"]
    else:  # replace the terminal event with a completion that claims a file nobody wrote
        forged = dict(events[-1], event_type="run_completed",
                      data={"final_text": "I wrote the result to report.md."})
        lines = lines[:-1] + [json.dumps(forged)]
    assert "\n".join(lines) != trace.read_text(encoding="utf-8").rstrip("\n")
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = ember_process("trace", "verify", str(tampered), "--json")
    report = json.loads(result.stdout)
    if tamper == "drop_execution_start":
        assert result.returncode == 1 and report["ok"] is False and report["problems"]
    else:
        assert result.returncode == 3 and report["ok"] is True and report["problems"] == []
        assert report["narration"] and "claims an artifact" in report["narration"][0]


def test_trace_verify_checks_the_artifacts_directory_beside_the_trace_by_default(tmp_path):
    from agent.artifact import ArtifactStore
    from tests.agent.test_trace import write_run

    trace = tmp_path / "trace.jsonl"
    write_run(trace, ArtifactStore(tmp_path / "artifacts"))  # where `ember run` puts them by default
    assert ember_process("trace", "verify", str(trace)).returncode == 0
    [artifact] = (tmp_path / "artifacts").iterdir()
    artifact.write_bytes(b"# best config\ntuned_q8 = 0.999\n")  # the bytes on disk no longer match the trace
    result = ember_process("trace", "verify", str(trace), "--json")
    assert result.returncode == 1
    assert any("sha256" in problem for problem in json.loads(result.stdout)["problems"])


def test_a_tool_choice_plan_with_an_empty_entry_is_refused_before_any_model_loads(capsys):
    assert cli.main(["run", "hi", "--model", "no-such-model", "--tool-choice", "calculator,,none"]) == 2
    assert "empty entry" in capsys.readouterr().err
