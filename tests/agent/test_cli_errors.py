"""The CLI's input-error rule (docs/cli.md, "Input errors"): every bad flag value or input file is ONE line on
stderr naming the flag or file, exit status 2, no traceback, found before any model loads; and no user data is
lost (an existing trace is never overwritten).

Most cases run `agent.cli.main` in-process with the model loader and the store's downloader replaced by a
function that fails the test, and ``EMBER_MODELS_DIR`` pointing at an empty directory (a store name would have to
be downloaded): an error found after a load would show as that failure, a traceback as an uncaught exception. A
few run as real processes, to check what a user sees.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent import cli

ROOT = Path(__file__).resolve().parents[2]


class ModelLoaded(BaseException):
    """Raised by the stand-in loader: a BaseException, so no `except Exception` in the CLI can hide it."""


@pytest.fixture(autouse=True)
def no_model(monkeypatch, tmp_path):
    """Any model load or store download fails the test; the store is an empty directory."""
    import agent.models
    import constrained.llama
    import constrained.vocabulary

    def loaded(*_args, **_kwargs):
        raise ModelLoaded("a model was loaded (or fetched) although the input was bad")

    monkeypatch.setattr(constrained.llama.LlamaModel, "load", loaded)
    monkeypatch.setattr(constrained.vocabulary.Vocabulary, "from_gguf", loaded)
    monkeypatch.setattr(agent.models, "pull", loaded)
    store = tmp_path / "empty-store"
    store.mkdir()
    monkeypatch.setenv("EMBER_MODELS_DIR", str(store))
    monkeypatch.chdir(tmp_path)


def input_error(capsys, *argv: str) -> str:
    """Run ``ember ARGV``; assert exit 2 with exactly one stderr line and nothing on stdout; return the line."""
    try:
        status = cli.main(list(argv))
    except SystemExit as exit_info:  # argparse's own errors exit through SystemExit
        status = exit_info.code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert status == 2, (status, captured.err)
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""
    assert lines[0].startswith(f"ember {argv[0]}: error: "), lines[0]
    return lines[0]


def write(path: Path, content: str | bytes) -> str:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def fake_gguf(path: Path, chat_template: str | None) -> str:
    """A GGUF v3 header with no tensors and at most one key, tokenizer.chat_template (enough for the codec check,
    which reads the metadata without llama.cpp)."""
    kvs = b""
    n_kv = 0
    if chat_template is not None:
        key, value = b"tokenizer.chat_template", chat_template.encode()
        kvs = struct.pack("<Q", len(key)) + key + struct.pack("<I", 8) + struct.pack("<Q", len(value)) + value
        n_kv = 1
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, n_kv) + kvs)
    return str(path)


# -- generate: schema files and --pydantic -----------------------------------------------------------------


def gen(*extra: str) -> tuple[str, ...]:
    return ("generate", "--prompt", "x", *extra)


def test_a_schema_that_is_json_but_not_a_json_schema(capsys, tmp_path):
    schema = write(tmp_path / "objekt.json", '{"type": "objekt"}')
    line = input_error(capsys, *gen("--schema", schema))
    assert f"--schema {schema}: not a valid JSON Schema" in line and "objekt" in line and "/type" in line


def test_a_schema_whose_nested_keyword_is_invalid_names_its_path(capsys, tmp_path):
    schema = write(tmp_path / "nested.json", '{"type": "object", "properties": {"a": {"minLength": -1}}}')
    line = input_error(capsys, *gen("--schema", schema))
    assert "not a valid JSON Schema" in line and "/properties/a/minLength" in line


@pytest.mark.parametrize(("content", "expected"), [
    ("[1, 2]", "not an array"),
    ('"string"', "not a string"),
    (b'{"type": "str\xe9"}', "not UTF-8"),
    ('{"type": ', "not JSON (line 1"),
    ("", "not JSON"),
    ('{"$dynamicRef": "#x"}', "unsupported JSON Schema keyword '$dynamicRef'"),
    ('{"type": "integer", "minimum": 5, "maximum": 1}', "no JSON document satisfies"),
    ('{"type": "string", "format": "no-such-format-xyz"}', "format 'no-such-format-xyz' is not enforced"),
], ids=["array", "string", "latin1", "truncated", "empty", "unsupported", "unsatisfiable", "unknown-format"])
def test_a_schema_file_that_is_not_a_usable_schema(capsys, tmp_path, content, expected):
    schema = write(tmp_path / "schema.json", content)
    line = input_error(capsys, *gen("--schema", schema))
    assert f"--schema {schema}: " in line and expected in line


def test_a_missing_schema_file_or_a_directory(capsys, tmp_path):
    assert "no such file" in input_error(capsys, *gen("--schema", str(tmp_path / "absent.json")))
    assert "is a directory" in input_error(capsys, *gen("--schema", str(tmp_path)))
    inline = input_error(capsys, *gen("--schema", '{"type": "string"}'))  # the schema itself where its file goes
    assert inline.endswith("no such file (it takes a path to a file, not JSON text)"), inline


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module ``usermod`` in the current directory with a pydantic model, non-models and bad tool lists."""
    (tmp_path / "usermod.py").write_text(
        "import pydantic\n"
        "from agent.builtins import builtin_tools\n"
        "class City(pydantic.BaseModel):\n    name: str\n"
        "class NotAModel:\n    pass\n"
        "NUMBER = 3\n"
        "NOT_TOOLS = [1, 2]\n"
        "def broken():\n    raise RuntimeError('boom\\nsecond line')\n", encoding="utf-8")
    (tmp_path / "brokenmod.py").write_text("import not_installed_anywhere_xyz\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("usermod", "brokenmod"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(("spec", "expected"), [
    ("nomod_xyz:Model", "no module named 'nomod_xyz'"),
    ("usermod:Missing", "has no attribute 'Missing'"),
    ("usermod:NotAModel", "not a pydantic BaseModel subclass (it is the class NotAModel)"),
    ("usermod:NUMBER", "not a pydantic BaseModel subclass (it is a int)"),
    ("brokenmod:X", "importing brokenmod failed"),
    ("usermod", "expected module:attr"),
])
def test_pydantic_names_a_missing_module_or_a_non_model(capsys, user_module, spec, expected):
    line = input_error(capsys, *gen("--pydantic", spec))
    assert f"--pydantic {spec}: " in line and expected in line


# -- numeric flags -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "flag"), [
    (gen("--schema", "s.json", "--temperature", "-1"), "--temperature"),
    (gen("--schema", "s.json", "--temperature", "nan"), "--temperature"),
    (gen("--schema", "s.json", "--temperature", "inf"), "--temperature"),
    (gen("--schema", "s.json", "--temperature", "warm"), "--temperature"),
    (gen("--schema", "s.json", "--seed", "-1"), "--seed"),
    (gen("--schema", "s.json", "--n", "0"), "--n"),
    (gen("--schema", "s.json", "--max-tokens", "-5"), "--max-tokens"),
    (gen("--schema", "s.json", "--n-ctx", "0"), "--n-ctx"),
    (gen("--schema", "s.json", "--threads", "two"), "--threads"),
    (("call", "--prompt", "x", "--n-ctx", "10"), "--n-ctx"),
    (("call", "--prompt", "x", "--max-tokens", "0"), "--max-tokens"),
    (("run", "x", "--max-steps", "0"), "--max-steps"),
    (("run", "x", "--n-ctx", "-1"), "--n-ctx"),
    (("demo", "--n-ctx", "abc"), "--n-ctx"),
    (("demo", "--threads", "0"), "--threads"),
    (("run", "x", "--privacy", "secret"), "--privacy"),
])
def test_an_out_of_range_numeric_flag_is_one_line(capsys, argv, flag):
    assert f"argument {flag}" in input_error(capsys, *argv)


def test_a_missing_required_flag_is_one_line(capsys):
    assert "--prompt" in input_error(capsys, "generate", "--schema", "s.json")


# -- --model -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [gen("--schema", "s.json"), ("call", "--prompt", "x"), ("run", "x")])
def test_a_model_path_that_is_not_gguf_is_refused_before_loading(capsys, tmp_path, command):
    (tmp_path / "s.json").write_text('{"type": "string"}', encoding="utf-8")
    fake = write(tmp_path / "weights.gguf", "this is not a model\n")
    line = input_error(capsys, *command, "--model", fake)
    assert f"--model {fake}: not a GGUF file" in line
    assert "no such file" in input_error(capsys, *command, "--model", str(tmp_path / "absent.gguf"))
    assert "not a GGUF file (an empty file" in input_error(capsys, *command, "--model",
                                                           write(tmp_path / "empty.gguf", b""))


def test_an_unknown_model_name_is_refused_with_the_known_names(capsys):
    line = input_error(capsys, "call", "--prompt", "x", "--model", "no-such-model")
    assert "no-such-model" in line and "known names" in line


@pytest.mark.parametrize("command", [("call", "--prompt", "x"), ("run", "x")])
def test_a_model_without_a_tool_codec_is_refused_before_loading(capsys, tmp_path, command):
    gemma = fake_gguf(tmp_path / "gemma.gguf", "{{ bos_token }}<start_of_turn>user\n{{ m }}<end_of_turn>")
    assert f"--model {gemma}: no codec for 'gemma.gguf'" in input_error(capsys, *command, "--model", gemma)
    base = fake_gguf(tmp_path / "base.gguf", None)
    assert "has no chat template" in input_error(capsys, *command, "--model", base)


# -- call: --tools and --cases files -----------------------------------------------------------------------


@pytest.mark.parametrize(("content", "expected"), [
    ('{"name": "add", "parameters": {"type": "object"}}', "must be a JSON array of tool definitions, not an object"),
    ('[{"description": "adds", "parameters": {"type": "object"}}]', "tool 0 has no name"),
    ('[{"type": "function", "function": {"description": "adds"}}]', "tool 0 has no name"),
    ('[{"name": ""}]', "tool 0 has no name"),
    ('["add"]', "tool 0 must be an object, not a string"),
    ('[{"name": "a"}, {"name": "a"}]', "tool name 'a' is given twice"),
    ('[{"name": "a", "parameters": {"type": "objekt"}}]', "tool 'a' parameters: not a valid JSON Schema"),
    ('[{"name": "a", "parameters": {"type": "object", "properties": {"d": {"type": "string", "format": "nope"}}}}]',
     "format 'nope' is not enforced"),
    ("[", "not JSON"),
], ids=["object", "no-name", "openai-no-name", "empty-name", "string", "duplicate", "bad-parameters",
        "unknown-format", "not-json"])
def test_a_tools_file_that_is_not_a_list_of_named_tools(capsys, tmp_path, content, expected):
    tools = write(tmp_path / "tools.json", content)
    line = input_error(capsys, "call", "--tools", tools, "--prompt", "x")
    assert f"--tools {tools}: " in line and expected in line


def test_a_missing_tools_file(capsys, tmp_path):
    line = input_error(capsys, "call", "--tools", str(tmp_path / "absent.json"), "--prompt", "x")
    assert "absent.json: no such file" in line


def test_a_tool_choice_that_names_no_offered_tool(capsys, tmp_path):
    tools = write(tmp_path / "tools.json", '[{"name": "add"}]')
    line = input_error(capsys, "call", "--tools", tools, "--prompt", "x", "--tool-choice", "mul")
    assert line.startswith("ember call: error: --tool-choice") and "'mul'" in line and "'add'" in line
    assert "needs at least one tool" in input_error(capsys, "call", "--prompt", "x", "--tool-choice", "required")


GOOD_CASE = json.dumps({"id": "a", "messages": [{"role": "user", "content": "hi"}], "tools": []})


@pytest.mark.parametrize(("bad_line", "expected"), [
    ('{"id": "b", "tools": []}', 'the case has no "messages"'),
    ("not json at all", "not JSON (column 1"),
    ('["a", "list"]', "a case is a JSON object"),
    ('{"messages": []}', '"messages" is empty'),
    ('{"messages": "hi"}', '"messages" must be a non-empty list'),
    ('{"messages": [{"content": "no role"}]}', 'messages[0] must be an object with a "role"'),
    ('{"messages": [{"role": "robot", "content": "x"}]}', "messages[0] has role 'robot'"),
    ('{"messages": [{"role": "user", "content": "x"}], "tools": {"name": "a"}}', '"tools": must be a JSON array'),
    ('{"messages": [{"role": "user", "content": "x"}], "tool_choice": "nosuch"}', "names no offered tool"),
], ids=["no-messages", "not-json", "not-object", "empty-messages", "string-messages", "no-role", "bad-role",
        "tools-object", "bad-choice"])
def test_a_cases_line_that_is_not_a_case_is_named_by_file_and_line(capsys, tmp_path, bad_line, expected):
    cases = write(tmp_path / "cases.jsonl", f"{GOOD_CASE}\n\n{bad_line}\n{GOOD_CASE}\n")
    line = input_error(capsys, "call", "--cases", cases)
    assert f"--cases {cases} line 3: " in line and expected in line


def test_a_cases_file_that_is_missing_empty_or_not_utf8(capsys, tmp_path):
    assert "no such file" in input_error(capsys, "call", "--cases", str(tmp_path / "absent.jsonl"))
    assert "no cases" in input_error(capsys, "call", "--cases", write(tmp_path / "empty.jsonl", "\n\n"))
    assert "not UTF-8" in input_error(capsys, "call", "--cases", write(tmp_path / "l1.jsonl", b'{"a": "\xff"}\n'))


def test_call_needs_a_prompt_or_cases(capsys):
    assert "--prompt" in input_error(capsys, "call")


# -- run: --tools module:attr, --tool-choice, --final-pattern, --sandbox, --artifacts ------------------------


@pytest.mark.parametrize(("spec", "expected"), [
    ("nomod_xyz:x", "no module named 'nomod_xyz'"),
    ("usermod:Missing", "has no attribute 'Missing'"),
    ("usermod:NOT_TOOLS", "not a list of agent.tool.Tool (it holds a int)"),
    ("usermod:NUMBER", "not a list of agent.tool.Tool (it is a int)"),
    ("usermod:City", "not a list of agent.tool.Tool"),
    ("usermod:broken", "calling it failed: RuntimeError: boom second line"),
    ("brokenmod:x", "importing brokenmod failed"),
    ("builtins", "expected 'builtin' or module:attr"),
])
def test_run_tools_that_are_not_a_list_of_tools(capsys, user_module, spec, expected):
    line = input_error(capsys, "run", "x", "--tools", spec)
    assert f"--tools {spec}: " in line and expected in line


@pytest.mark.parametrize(("argv", "expected"), [
    (("--tool-choice", "calculator,,none"), "--tool-choice calculator,,none: the plan has an empty entry"),
    (("--tool-choice", "nosuch"), "--tool-choice: 'nosuch' names no tool"),
    (("--tool-choice", "read_file,nosuch"), "--tool-choice: 'nosuch' names no tool"),
    (("--final-pattern", "DONE ("), "--final-pattern DONE (: "),
    (("--final-pattern", '{"a": 1}'), "must not start with '{'"),
    (("--sandbox", "absent-dir"), "--sandbox"),
])
def test_run_flags_that_cannot_be_served(capsys, argv, expected):
    assert expected in input_error(capsys, "run", "x", *argv)


def test_run_artifacts_that_is_a_file(capsys, tmp_path):
    taken = write(tmp_path / "artifacts-file", "x")
    assert f"--artifacts {taken}: exists and is not a directory" in input_error(capsys, "run", "x", "--artifacts",
                                                                                taken)


# -- run --trace: never overwrite --------------------------------------------------------------------------


def test_run_refuses_an_existing_trace_and_leaves_it_byte_for_byte(capsys, tmp_path):
    trace = tmp_path / "run.jsonl"
    original = b"".join(json.dumps({"seq": i, "line": "previous run"}).encode() + b"\n" for i in range(24))
    trace.write_bytes(original)
    before = os.stat(trace)
    line = input_error(capsys, "run", "x", "--trace", str(trace))
    assert f"--trace {trace}: already holds a trace (" in line and "--force" in line
    assert trace.read_bytes() == original
    assert os.stat(trace).st_mtime_ns == before.st_mtime_ns


def test_run_refuses_a_trace_path_that_is_a_directory(capsys, tmp_path):
    assert "is a directory" in input_error(capsys, "run", "x", "--trace", str(tmp_path))


@pytest.fixture
def scripted_model(monkeypatch):
    """`ember run` on a scripted engine (no weights): the model answers "The answer." in one turn."""
    import agent.runner
    from agent.protocol import codec_for
    from agent.testkit import ScriptedEngine

    codec = codec_for("qwen2.5")
    monkeypatch.setattr(agent.runner, "load_chat_model", lambda *a, **k: SimpleNamespace(model=None, codec=codec))
    monkeypatch.setattr(agent.runner, "ChatModelEngine", lambda model, codec, **_: ScriptedEngine(["The answer."], codec))


def test_run_force_replaces_an_existing_trace(capsys, tmp_path, scripted_model):
    from agent.trace import read_trace, verify_trace

    trace = tmp_path / "run.jsonl"
    trace.write_bytes(b'{"old": true}\n' * 24)
    assert cli.main(["run", "hi", "--trace", str(trace), "--force"]) == 0
    capsys.readouterr()
    read = read_trace(trace)
    assert not read.problems and read.events[0].event_type == "run_started"
    assert b'"old"' not in trace.read_bytes() and verify_trace(trace).ok
    # and without --force the new trace is now the one kept
    kept = trace.read_bytes()
    input_error(capsys, "run", "hi", "--trace", str(trace))
    assert trace.read_bytes() == kept


def test_run_prints_the_final_answer_on_its_own_last_line(capsys, tmp_path, scripted_model):
    assert cli.main(["run", "hi", "--trace", str(tmp_path / "run.jsonl")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("outcome: completed") and lines[-1] == "The answer."


def test_run_json_view_rounds_durations_and_keeps_the_trace_as_recorded(capsys, tmp_path, scripted_model):
    trace = tmp_path / "run.jsonl"
    assert cli.main(["run", "hi", "--trace", str(trace), "--json"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    recorded = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert [e["seq"] for e in shown] == [e["seq"] for e in recorded]
    for event in shown:
        for value in (event["t_ms"], event["data"].get("duration_ms", 0.0)):
            assert value == round(value, 3)


# -- demo: a rerun keeps the previous run ------------------------------------------------------------------


def test_demo_out_that_is_a_file(capsys, tmp_path):
    taken = write(tmp_path / "out", "x")
    assert f"--out {taken}: exists and is not a directory" in input_error(capsys, "demo", "--out", taken)


def test_a_demo_rerun_moves_the_previous_run_aside_and_force_deletes_it(tmp_path, monkeypatch):
    import agent.demo

    out = tmp_path / "ember-demo"
    runs = []

    def fake_run_session(**kwargs):  # writes what a run writes, one marker per run
        runs.append(kwargs)
        kwargs["trace_path"].write_text(f"trace {len(runs)}\n", encoding="utf-8")
        (kwargs["artifact_root"]).mkdir(exist_ok=True)
        (kwargs["artifact_root"] / f"a{len(runs)}.md").write_text("x", encoding="utf-8")
        return SimpleNamespace(final_text="DONE 21.57%", outcome="completed", detail=None)

    monkeypatch.setattr(agent.demo, "run_session", fake_run_session)
    monkeypatch.setattr(agent.demo.trace, "read_trace", lambda path: SimpleNamespace(events=()))
    monkeypatch.setattr(agent.demo.trace, "verify_trace",
                        lambda *a, **k: SimpleNamespace(ok=True, problems=(), narration=(), ungrounded=()))
    for _ in range(2):
        agent.demo.run_demo(model="m", out_dir=out, n_ctx=2048)
    assert runs[-1]["n_ctx"] == 2048
    assert (out / "trace.jsonl").read_text() == "trace 2\n"
    [previous] = list((out / "previous").iterdir())
    assert (previous / "trace.jsonl").read_text() == "trace 1\n"
    assert (previous / "artifacts" / "a1.md").is_file() and (previous / "report.html").is_file()
    assert [p.name for p in (out / "artifacts").iterdir()] == ["a2.md"]
    agent.demo.run_demo(model="m", out_dir=out)  # a second set-aside in the same second gets its own directory
    assert len(list((out / "previous").iterdir())) == 2
    agent.demo.run_demo(model="m", out_dir=out, force=True)
    assert (out / "trace.jsonl").read_text() == "trace 4\n"
    assert [p.name for p in (out / "artifacts").iterdir()] == ["a4.md"]
    assert len(list((out / "previous").iterdir())) == 2


# -- trace show / report on garbage ------------------------------------------------------------------------


@pytest.mark.parametrize(("content", "expected"), [
    (b"this is not a trace\n", "not an Ember trace (line 1: not JSON"),
    (b'{"some": "other json"}\n[1, 2]\n', "not an Ember trace (line 1: missing or non-string schema)"),
    (b"\xff\xfe garbage\n", "not UTF-8"),
    (b"", "empty, no trace events"),
    (b'{"half a line', "one line without a newline"),
], ids=["text", "other-json", "binary", "empty", "torn"])
@pytest.mark.parametrize("action", ["show", "report"])
def test_trace_show_and_report_refuse_a_file_without_events(capsys, tmp_path, content, expected, action):
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(content)
    line = input_error(capsys, "trace", action, str(garbage))
    assert f"{garbage}: " in line and expected in line
    assert not (tmp_path / "garbage.html").exists()


def test_trace_commands_on_a_missing_file_or_a_directory(capsys, tmp_path):
    for action in ("show", "report", "verify"):
        assert "absent.jsonl" in input_error(capsys, "trace", action, str(tmp_path / "absent.jsonl"))
    assert "is a directory" in input_error(capsys, "trace", "show", str(tmp_path))


def test_trace_report_never_overwrites_the_trace_itself(capsys, tmp_path):
    from agent.artifact import ArtifactStore
    from tests.agent.test_trace import write_run

    trace = tmp_path / "run.html"  # the default output (trace path with .html) would be the trace itself
    write_run(trace, ArtifactStore(tmp_path / "artifacts"))
    before = trace.read_bytes()
    assert "is the trace itself" in input_error(capsys, "trace", "report", str(trace))
    assert "is the trace itself" in input_error(capsys, "trace", "report", str(trace), "-o", str(trace))
    assert trace.read_bytes() == before


def test_trace_show_reports_skipped_lines_of_a_partly_damaged_trace(capsys, tmp_path):
    from agent.artifact import ArtifactStore
    from tests.agent.test_trace import write_run

    trace = tmp_path / "run.jsonl"
    write_run(trace, ArtifactStore(tmp_path / "artifacts"))
    trace.write_bytes(trace.read_bytes() + b"garbage line\n")
    assert cli.main(["trace", "show", str(trace)]) == 0
    assert "1 malformed line(s) skipped" in capsys.readouterr().out


# -- models, bench, other commands -------------------------------------------------------------------------


def test_models_commands_without_a_name_or_with_an_unknown_one(capsys):
    assert "NAME" in input_error(capsys, "models", "pull")
    assert "no-such-model" in input_error(capsys, "models", "verify", "no-such-model")
    assert "no-such-model" in input_error(capsys, "models", "path", "no-such-model")


def test_bench_with_an_unknown_name(capsys):
    assert "no such benchmark" in input_error(capsys, "bench", "nosuch")


def test_an_artifact_error_is_an_input_error_not_a_traceback(capsys, monkeypatch, scripted_model):
    import agent.runner
    from agent.artifact import InvalidArtifactIdError

    def refuse(*_a, **_k):
        raise InvalidArtifactIdError("../escape")

    monkeypatch.setattr(agent.runner, "ArtifactStore", refuse)
    assert "is not an artifact id" in input_error(capsys, "run", "x")


# -- as a real process: what the user sees -----------------------------------------------------------------


def ember_process(*args: str, cwd: Path, store: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, EMBER_MODELS_DIR=str(store))  # empty: a store name would have to be downloaded
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def test_as_a_process_each_kind_of_input_error_is_one_line_exit_2(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "objekt.json").write_text('{"type": "objekt"}', encoding="utf-8")
    (tmp_path / "tools.json").write_text('{"name": "add"}', encoding="utf-8")
    (tmp_path / "cases.jsonl").write_text('{"id": 1}\n', encoding="utf-8")
    (tmp_path / "fake.gguf").write_text("not gguf", encoding="utf-8")
    (tmp_path / "garbage.jsonl").write_text("garbage\n", encoding="utf-8")
    (tmp_path / "run.jsonl").write_text('{"previous": 1}\n' * 24, encoding="utf-8")
    cases = [
        (["generate", "--schema", "objekt.json", "--prompt", "x"], "--schema objekt.json"),
        (["generate", "--pydantic", "nomod_xyz:M", "--prompt", "x"], "--pydantic nomod_xyz:M"),
        (["generate", "--schema", "objekt.json", "--prompt", "x", "--temperature", "-1"], "--temperature"),
        (["call", "--tools", "tools.json", "--prompt", "x"], "--tools tools.json"),
        (["call", "--cases", "cases.jsonl"], "--cases cases.jsonl line 1"),
        (["run", "x", "--tools", "nomod_xyz:x"], "--tools nomod_xyz:x"),
        (["run", "x", "--trace", "run.jsonl"], "--trace run.jsonl"),
        (["run", "x", "--model", "fake.gguf"], "fake.gguf"),
        (["trace", "report", "garbage.jsonl"], "garbage.jsonl"),
        (["models", "verify", "no-such-model"], "no-such-model"),
    ]
    for argv, named in cases:
        result = ember_process(*argv, cwd=tmp_path, store=store)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and named in lines[0], (argv, result.stderr)
        assert "Traceback" not in result.stderr and "loading" not in result.stderr
    assert (tmp_path / "run.jsonl").read_text(encoding="utf-8") == '{"previous": 1}\n' * 24
    assert not (tmp_path / "garbage.html").exists() and not (tmp_path / "artifacts").exists()
    assert list(store.iterdir()) == []


def test_version_is_the_package_version():
    from importlib.metadata import version

    result = subprocess.run([sys.executable, "-m", "agent.cli", "--version"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"ember {version('ember')}"


def test_annotations_constrain_nothing_and_an_unknown_format_is_refused_by_a_constrained_tool():
    from agent.errors import ToolDefinitionError
    from agent.tool import Tool

    annotated = {"type": "object", "title": "t", "examples": [{}], "x-vendor": 1,
                 "properties": {"d": {"type": "string", "description": "a day", "x-unit": "day"}}}
    assert Tool(name="ok", function=lambda a, c: 0, parameters=annotated, constrained=True).constrained
    unknown = {"type": "object", "properties": {"d": {"type": "string", "format": "no-such-format-xyz"}}}
    with pytest.raises(ToolDefinitionError, match="format 'no-such-format-xyz' is not enforced"):
        Tool(name="strict", function=lambda a, c: 0, parameters=unknown, constrained=True)
    assert not Tool(name="loose", function=lambda a, c: 0, parameters=unknown).constrained  # validated, not masked
