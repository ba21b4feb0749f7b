"""`ember run`: one traced tool-calling session on a real model, with live output.

Wires the pieces the library keeps apart — model store, engine, codec, tool registry, trace recorder,
artifact store, session — and streams what happens: the model's text as it is generated and one line per
trace event (or the events themselves as JSON lines with ``--json``).

    prompt ─► Session(ChatModelEngine(model, codec), ToolRegistry(tools), trace, artifacts).run ─► RunResult
                     │ model text ──► stdout                 │ every event ──► one summary line
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.artifact import ArtifactStore
from agent.builtins import builtin_tools
from agent.chat import load_chat_model
from agent.engine import ChatModelEngine
from agent.inputs import InputError, import_attr, one_line
from agent.limits import AgentLimits
from agent.protocol.base import ToolChoice
from agent.session import RunResult, Session, ToolChoicePlanError, tool_choice_plan
from agent.tool import Tool, ToolRegistry, default_policy, pre_approved
from agent.trace import PrivacyMode, TraceMisuseError, TraceRecorder, check_new_trace
from constrained import SamplingParams

if TYPE_CHECKING:
    from agent.mcp import McpToolset

__all__ = ["check_run_inputs", "connect_mcp", "load_tools", "run_session", "summarize_event", "view_event"]


def load_tools(spec: str, *, sandbox_root: Path) -> list[Tool]:
    """``builtin`` → read_file / calculator / write_artifact; ``module:attr`` → a list of Tools (or a callable
    returning one).

    Raises:
        InputError: not ``builtin`` or ``module:attr``, the module or attribute is missing, importing or calling
            it failed, or what it names is not a list of `agent.tool.Tool` (one line, naming ``--tools``).
    """
    if spec == "builtin":
        return builtin_tools(sandbox_root)
    if ":" not in spec:
        raise InputError(f"--tools {spec}: expected 'builtin' or module:attr")
    value = import_attr(spec, "--tools")
    if callable(value) and not isinstance(value, (Tool, type)):
        try:
            value = value()
        except Exception as error:
            raise InputError(f"--tools {spec}: calling it failed: {type(error).__name__}: {one_line(error)}") from None
    tools = [value] if isinstance(value, Tool) else value
    if isinstance(tools, (str, bytes, type)) or not hasattr(tools, "__iter__"):
        kind = f"the class {tools.__name__}" if isinstance(tools, type) else f"a {type(tools).__name__}"
        raise InputError(f"--tools {spec}: not a list of agent.tool.Tool (it is {kind})")
    tools = list(tools)
    bad = next((t for t in tools if not isinstance(t, Tool)), None)
    if bad is not None:
        raise InputError(f"--tools {spec}: not a list of agent.tool.Tool (it holds a {type(bad).__name__})")
    return tools


def connect_mcp(files: Sequence[str | Path], *, strict: bool = False, log_dir: Path | None = None,
                log_prefix: str = "", progress: Callable[[str], None] | None = None) -> McpToolset:
    """The servers of ``--mcp`` files started and listed (`agent.mcp.connect`), every failure one line naming the
    flag and the file, before any model loads. Tools left out (a schema the compiler refuses) are reported through
    ``progress``.

    Raises:
        InputError: a file is missing, not JSON or holds a bad server entry; two files name the same server; a
            server failed to start or to list its tools; ``strict`` and a tool's schema was refused.
    """
    from agent.mcp import McpConfigError, McpError, McpServerError, connect, load_config  # the SDK: ~0.6 s

    configs = []
    for file in files:
        try:
            configs.append(load_config(file))
        except McpConfigError as error:
            raise InputError(f"--mcp {error}") from None
    try:
        toolset = connect(configs, strict=strict, log_dir=log_dir, log_prefix=log_prefix)
    except McpServerError as error:
        source = next((c[error.server].source for c in configs if error.server in c), "")
        raise InputError(f"--mcp {source}: {error}") from None
    except McpError as error:
        raise InputError(f"--mcp {' '.join(str(f) for f in files)}: {error}") from None
    if progress is not None:
        for skipped in toolset.skipped:
            progress(f"--mcp: left out {skipped.server}.{skipped.tool}: {skipped.reason}")
    return toolset


def _check_tool_choice(tool_choice: ToolChoice | Sequence[ToolChoice], registry: ToolRegistry) -> None:
    """`agent.session.tool_choice_plan` (the one check the session makes too), before the model loads, as a line
    naming ``--tool-choice``."""
    try:
        tool_choice_plan(tool_choice, registry)
    except ToolChoicePlanError as error:
        if error.choice is None:
            raise InputError("--tool-choice: the plan is empty; give at least one choice") from None
        raise InputError(f"--tool-choice: {error.choice!r} names no tool; use auto, required, none or one of: "
                         f"{', '.join(error.tools) or '(no tools)'}") from None


def _check_final_pattern(pattern: str) -> None:
    from agent.grounding_policy import SLOT_RE
    from constrained import check_pattern
    from constrained.errors import ConstrainedError

    if pattern.startswith("{"):
        raise InputError(f"--final-pattern {one_line(pattern, 60)}: must not start with '{{' (a turn starting with "
                         "{ is read as a tool call)")
    try:
        check_pattern(SLOT_RE.sub("0", pattern))  # a slot ({{number@calculator}}) is filled per turn
    except ConstrainedError as error:
        raise InputError(f"--final-pattern {one_line(pattern, 60)}: {one_line(error)}") from None
    except RecursionError:
        raise InputError(f"--final-pattern {one_line(pattern, 60)}: nested too deeply") from None


def check_run_inputs(*, trace_path: Path, sandbox: Path, artifact_root: Path | None, force: bool) -> None:
    """The file and directory arguments of a run, before anything is loaded (see `run_session`).

    Raises:
        InputError: the trace file holds bytes (``force`` false) or is a directory; the sandbox is not a
            directory; the artifact path is a file.
    """
    try:
        check_new_trace(trace_path, replace=force)
    except TraceMisuseError as error:
        if trace_path.is_file():
            raise InputError(f"--trace {trace_path}: already holds a trace ({trace_path.stat().st_size:,} bytes); "
                             "refusing to overwrite it (give --force to replace it, or another --trace path)") from None
        raise InputError(f"--trace {str(error)}") from None
    if not sandbox.is_dir():
        raise InputError(f"--sandbox {sandbox}: not a directory")
    if artifact_root is not None and artifact_root.exists() and not artifact_root.is_dir():
        raise InputError(f"--artifacts {artifact_root}: exists and is not a directory")


_DURATION_DIGITS = {"duration_ms": 3, "elapsed_s": 6, "t_ms": 3}
"""How the CLI's views round durations (to the microsecond); the trace file keeps them as recorded."""


def _rounded(key: str, value: Any) -> Any:
    digits = _DURATION_DIGITS.get(key)
    if digits is None or not isinstance(value, float):
        return value
    return round(value, digits)


def view_event(event: dict[str, Any]) -> dict[str, Any]:
    """The event as ``ember run --json`` prints it: as recorded, with durations rounded to the microsecond."""
    data = event.get("data")
    shown = {k: _rounded(k, v) for k, v in event.items()}
    if isinstance(data, dict):
        shown["data"] = {k: _rounded(k, v) for k, v in data.items()}
    return shown


def summarize_event(event: dict[str, Any]) -> str:
    """One human line for a trace event: seq, type, and the fields a reader looks for first (durations in ms with
    at most one decimal)."""
    data = event.get("data") or {}
    keys = ("tool", "ok", "kind", "action", "finish_reason", "n_output_tokens", "duration_ms", "artifact_id",
            "limit", "detail", "role")

    def shown_value(key: str) -> str:
        value = data[key]
        if key == "duration_ms" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return f"{value:.1f}" if value >= 0.1 or value == 0 else f"{value:.3f}"
        return json.dumps(value, ensure_ascii=False)

    shown = " ".join(f"{k}={shown_value(k)}" for k in keys if k in data)
    return f"[{event['seq']:>3}] {event['event_type']:<26} {shown}".rstrip()


class _EchoingRecorder(TraceRecorder):
    """A trace recorder that also hands every appended event to a sink (the CLI's live view)."""

    def __init__(self, *args: Any, sink: Callable[[dict[str, Any]], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sink = sink

    def emit(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        event = super().emit(*args, **kwargs)
        self._sink(event)
        return event


class _StreamingEngine:
    """Passes the model's text to a sink as it is generated; otherwise the wrapped engine, unchanged."""

    def __init__(self, engine: ChatModelEngine, on_text: Callable[[str], None]) -> None:
        self._engine = engine
        self._on_text = on_text
        self.codec = engine.codec

    def run_turn(self, messages: Sequence[dict[str, Any]], **kwargs: Any) -> Any:
        kwargs.setdefault("on_text", self._on_text)
        return self._engine.run_turn(messages, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def run_session(*, model: str, tools: str | Sequence[Tool], prompt: str, trace_path: Path,
                artifact_root: Path | None = None, sandbox_root: Path | None = None,
                privacy: str = "full", json_output: bool = False, system_prompt: str | None = None,
                limits: AgentLimits | None = None, tool_choice: ToolChoice | Sequence[ToolChoice] = "auto",
                final_pattern: str | None = None,
                n_threads: int | None = None, progress: Callable[[str], None] | None = None,
                echo: bool = True, n_ctx: int = 4096, force: bool = False,
                sampling: SamplingParams | None = None, mcp: Sequence[str | Path] = (),
                approve: Sequence[str] = (), mcp_strict: bool = False, parallel_calls: bool = True) -> RunResult:
    """Run one session and return its typed result; the trace at ``trace_path`` is the record of it.

    Every input is checked before the model loads (`InputError`, one line naming the flag): the trace path (an
    existing non-empty file is never overwritten unless ``force``; the recorder creates the file exclusively
    either way), the sandbox and artifact directories, the tools, the tool-choice plan and the final pattern.

    ``mcp`` files add the tools of their servers (`agent.mcp`), started before the model loads and stopped when the
    run ends; each server's stderr goes to ``<trace stem>.<server>.stderr.log`` beside the trace. ``approve``
    pre-approves tools by name pattern (`agent.tool.pre_approved`); ``mcp_strict`` fails the start on a tool whose
    schema the compiler refuses instead of leaving it out. ``parallel_calls``: as `Session`'s.
    """
    sandbox = (sandbox_root or Path.cwd()).resolve()
    check_run_inputs(trace_path=trace_path, sandbox=sandbox, artifact_root=artifact_root, force=force)
    local = load_tools(tools, sandbox_root=sandbox) if isinstance(tools, str) else list(tools)
    if final_pattern is not None:
        _check_final_pattern(final_pattern)
    mcp_tools = connect_mcp(mcp, strict=mcp_strict, log_dir=trace_path.parent, log_prefix=f"{trace_path.stem}.",
                            progress=progress) if mcp else None
    try:
        return _run(model=model, registry=ToolRegistry([*local, *(mcp_tools or ())]), mcp_tools=mcp_tools,
                    prompt=prompt, trace_path=trace_path, artifact_root=artifact_root, privacy=privacy,
                    json_output=json_output, system_prompt=system_prompt, limits=limits, tool_choice=tool_choice,
                    final_pattern=final_pattern, n_threads=n_threads, progress=progress, echo=echo, n_ctx=n_ctx,
                    force=force, sampling=sampling, approve=approve, parallel_calls=parallel_calls)
    finally:
        if mcp_tools is not None:
            mcp_tools.close()


def _run(*, model: str, registry: ToolRegistry, mcp_tools: McpToolset | None, prompt: str, trace_path: Path,
         artifact_root: Path | None, privacy: str, json_output: bool, system_prompt: str | None,
         limits: AgentLimits | None, tool_choice: ToolChoice | Sequence[ToolChoice], final_pattern: str | None,
         n_threads: int | None, progress: Callable[[str], None] | None, echo: bool, n_ctx: int, force: bool,
         sampling: SamplingParams | None, approve: Sequence[str], parallel_calls: bool) -> RunResult:
    """`run_session` once its tools are known: load the model, run, print."""
    _check_tool_choice(tool_choice, registry)
    chat = load_chat_model(model, n_ctx=n_ctx, n_threads=n_threads, progress=progress)
    artifacts = ArtifactStore(artifact_root or trace_path.parent / "artifacts")  # creates the directory

    mid_line = False  # streamed model text not yet ended by a newline

    def show_event(event: dict[str, Any]) -> None:
        nonlocal mid_line
        if echo:
            line = json.dumps(view_event(event), ensure_ascii=False) if json_output else summarize_event(event)
            print(("\n" if mid_line else "") + line, flush=True)
            mid_line = False

    def show_text(piece: str) -> None:
        nonlocal mid_line
        if echo and not json_output and piece:
            sys.stdout.write(piece)
            sys.stdout.flush()
            mid_line = not piece.endswith("\n")

    engine = _StreamingEngine(ChatModelEngine(chat.model, chat.codec, sampling=sampling), show_text)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    with _EchoingRecorder(trace_path, privacy=PrivacyMode(privacy), truncate=force, sink=show_event) as trace:
        session = Session(engine, registry, limits=limits or AgentLimits(), trace=trace, artifacts=artifacts,
                          system_prompt=system_prompt, tool_choice=tool_choice, final_pattern=final_pattern,
                          approval=pre_approved(approve) if approve else default_policy,
                          tool_updates=mcp_tools.refresh if mcp_tools is not None else None,
                          parallel_calls=parallel_calls)
        result = session.run(prompt)
    if echo and not json_output:
        print(("\n" if mid_line else "") + f"outcome: {result.outcome}"
              + (f" ({result.limit})" if result.limit else "") + (f" — {result.detail}" if result.detail else ""))
        if result.final_text is not None:  # the answer on its own last line, for whoever reads the output
            print(result.final_text.strip())
    return result
