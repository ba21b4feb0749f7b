"""The trace verifier: is this file a complete, consistent execution record? Facts only.

    file ─► read_trace ─► envelope checks (seq, run_id, first / terminal events, provenance)
                      ─► execution checks (started ↔ finished, artifact_written ↔ its call ↔ bytes on disk)
                      ─► nested runs (an orchestration call's linked run: its own trace, verified the same way)
                      ─► grounding: the final answer's claims, recomputed from the committed ledger
                      ─► VerifyReport(ok, problems, warnings, ungrounded)   + narration: check_narration's findings

Every check here reads recorded facts (event order, ids, hashes, files, the committed messages). A claim of the
final answer that no input and no tool result holds is a finding of its own (``VerifyReport.ungrounded``,
`agent.trace_grounding`); what the final answer says about artifacts is read by `agent.trace_narration`, a heuristic
whose findings the report keeps apart (``VerifyReport.narration``). Neither changes ``ok``. ``ember trace verify``
exits 0 (verified), 1 (a fact problem), 4 (facts verified, a final-answer claim is ungrounded) or 3 (facts
verified, only the narration check flagged the answer): docs/trace.md.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from agent.trace_format import TERMINAL_EVENTS, EventType, UnsupportedTraceSchemaError
from agent.trace_grounding import check_grounding
from agent.trace_narration import check_narration
from agent.trace_reader import TraceEvent, read_trace

__all__ = ["VerifyReport", "sha256_file", "verify_trace"]


def sha256_file(path: str | os.PathLike[str], *, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file, streamed (model files are hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, kw_only=True)
class VerifyReport:
    """Whether a trace is a complete, consistent execution record. ``ok`` iff ``problems`` is empty."""

    ok: bool
    """No fact check failed (``problems`` is empty). The narration findings never change it."""
    problems: tuple[str, ...]
    """Facts the trace gets wrong: envelope, order, terminal event, executions, artifacts."""
    warnings: tuple[str, ...] = ()
    """Things not checked or worth a look (unknown event types, artifacts not checked on disk…)."""
    n_events: int = 0
    narration: tuple[str, ...] = ()
    """Findings of the narration heuristic (`agent.trace_narration.check_narration`): what the final answer
    says about artifacts, set against what the trace records. A heuristic reading of English, reported apart
    from the facts; empty when it found nothing or did not run."""
    ungrounded: tuple[str, ...] = ()
    """Claims of the final answer (numbers, quoted strings, names) that no user or system message and no tool result
    holds (`agent.trace_grounding`): the model's memory. Recomputed from the committed ledger; empty when every
    claim is grounded or the check could not run (see ``warnings``)."""


def _check_envelope(events: list[TraceEvent], problems: list[str], warnings: list[str]) -> None:
    if not events:
        problems.append("trace holds no events")
        return
    run_ids = sorted({ev.run_id for ev in events})
    if len(run_ids) > 1:
        problems.append(f"more than one run_id: {run_ids[:5]}")
    for i, ev in enumerate(events):
        if ev.seq != i:
            problems.append(f"line {ev.line_no}: seq {ev.seq} where {i} was expected (seq starts at 0, "
                            "strictly increasing, no gaps)")
            break
    for prev, ev in zip(events, events[1:]):
        if ev.t_ms < prev.t_ms:
            warnings.append(f"seq {ev.seq}: t_ms goes backwards ({prev.t_ms} -> {ev.t_ms})")
            break
    if events[0].event_type != EventType.RUN_STARTED:
        problems.append(f"first event is {events[0].event_type}, not run_started")
    if not any(ev.event_type == EventType.PROVENANCE for ev in events):
        problems.append("no provenance event")
    terminals = [ev for ev in events if ev.event_type in TERMINAL_EVENTS]
    if not terminals:
        problems.append("no terminal event (run_completed / run_failed / run_cancelled / run_terminated)")
    elif len(terminals) > 1:
        problems.append(f"{len(terminals)} terminal events (seq {[t.seq for t in terminals]}); exactly one allowed")
    elif terminals[0] is not events[-1]:
        problems.append(f"terminal event {terminals[0].event_type} (seq {terminals[0].seq}) is not the last event")
    if terminals and terminals[-1].event_type == EventType.RUN_TERMINATED and not terminals[-1].data.get("limit"):
        problems.append(f"run_terminated (seq {terminals[-1].seq}) does not name its limit")
    known = set(EventType)
    unknown = sorted({ev.event_type for ev in events if ev.event_type not in known})
    if unknown:
        warnings.append(f"unknown event types kept: {unknown}")


def _check_executions(events: list[TraceEvent], artifact_root: Path | None, problems: list[str],
                      warnings: list[str]) -> None:
    """Tool execution pairing and artifact provenance."""
    started: dict[str, TraceEvent] = {}
    finished: dict[str, TraceEvent] = {}
    written: dict[str, TraceEvent] = {}
    for ev in events:
        call_id = ev.data.get("call_id")
        if ev.event_type == EventType.TOOL_EXECUTION_STARTED:
            if not isinstance(call_id, str):
                problems.append(f"seq {ev.seq}: tool_execution_started without a call_id")
            elif call_id in started:
                problems.append(f"seq {ev.seq}: call {call_id} executed twice")
            else:
                started[call_id] = ev
        elif ev.event_type == EventType.TOOL_EXECUTION_FINISHED:
            if not isinstance(call_id, str):
                problems.append(f"seq {ev.seq}: tool_execution_finished without a string call_id")
                continue
            if call_id not in started:
                problems.append(f"seq {ev.seq}: tool_execution_finished for call {call_id!r} that never started")
                continue
            finished[call_id] = ev
        elif ev.event_type == EventType.ARTIFACT_WRITTEN:
            artifact_id = ev.data.get("artifact_id")
            if not isinstance(artifact_id, str):
                problems.append(f"seq {ev.seq}: artifact_written without an artifact_id")
                continue
            if artifact_id in written:
                problems.append(f"seq {ev.seq}: artifact {artifact_id} recorded twice")
            written[artifact_id] = ev
            if not isinstance(call_id, str) or call_id not in started:
                problems.append(f"seq {ev.seq}: artifact {artifact_id} was not produced by a traced tool execution "
                                f"(no tool_execution_started for call {call_id!r} before it)")
    for call_id, ev in started.items():
        if call_id not in finished:
            terminal = events[-1].event_type
            msg = f"seq {ev.seq}: tool execution {call_id} has no tool_execution_finished"
            (problems if terminal == EventType.RUN_COMPLETED else warnings).append(msg)
    listed: dict[str, str] = {}
    for call_id, ev in finished.items():
        ids = ev.data.get("artifact_ids", [])
        if not isinstance(ids, list):
            problems.append(f"seq {ev.seq}: artifact_ids is not a list")
            continue
        for artifact_id in ids:
            if not isinstance(artifact_id, str):
                problems.append(f"seq {ev.seq}: call {call_id} lists an artifact id of type "
                                f"{type(artifact_id).__name__}, not a string")
                continue
            listed[artifact_id] = call_id
            if artifact_id not in written:
                problems.append(f"seq {ev.seq}: call {call_id} lists artifact {artifact_id} but no artifact_written "
                                "event records it")
    for artifact_id, ev in written.items():
        owner = ev.data.get("call_id")
        if isinstance(owner, str) and owner in started and listed.get(artifact_id) != ev.data.get("call_id"):
            problems.append(f"seq {ev.seq}: artifact {artifact_id} is not listed by tool_execution_finished of "
                            f"call {ev.data.get('call_id')}")
        _check_artifact_on_disk(ev, artifact_id, artifact_root, problems)
    if written and artifact_root is None:
        warnings.append(f"{len(written)} artifact(s) not checked on disk (no artifact_root given)")


def _check_artifact_on_disk(ev: TraceEvent, artifact_id: str, root: Path | None, problems: list[str]) -> None:
    if root is None:
        return
    if "/" in artifact_id or "\\" in artifact_id or artifact_id in (".", ".."):
        problems.append(f"seq {ev.seq}: artifact id {artifact_id!r} is not a plain file name")
        return
    path = root / artifact_id
    if not path.is_file():
        problems.append(f"seq {ev.seq}: artifact {artifact_id} missing under {root}")
        return
    digest = sha256_file(path)
    if digest != ev.data.get("sha256"):
        problems.append(f"seq {ev.seq}: artifact {artifact_id} sha256 {digest} does not match the trace "
                        f"({ev.data.get('sha256')})")
    elif "size_bytes" in ev.data and path.stat().st_size != ev.data["size_bytes"]:
        problems.append(f"seq {ev.seq}: artifact {artifact_id} size differs from the trace")


def _nested_traces(events: list[TraceEvent], where: Path) -> list[tuple[TraceEvent, str, Path | None]]:
    """Each run an execution linked (``linked_runs``), once, with the trace file that records it when one is
    found: the path its call's result names (``"trace"``, as `agent.subagent` returns it), else
    ``<parent run id>.<call id>.jsonl`` under the parent trace's directory, else any ``*.jsonl`` there whose first
    event belongs to that run (a replayed call links the run an earlier call made)."""
    found: list[tuple[TraceEvent, str, Path | None]] = []
    seen: set[str] = set()
    for ev in events:
        if ev.event_type != EventType.TOOL_EXECUTION_FINISHED:
            continue
        linked = ev.data.get("linked_runs") or []
        result = ev.data.get("result")
        value = result.get("value") if isinstance(result, dict) else None
        named = value.get("trace") if isinstance(value, dict) else None
        for run_id in map(str, linked if isinstance(linked, list) else []):
            if run_id in seen:
                continue
            seen.add(run_id)
            candidates = [where / named] if isinstance(named, str) and len(linked) == 1 else []
            candidates += sorted(where.rglob(f"{ev.run_id}.{ev.data.get('call_id')}.jsonl"))
            child = next((c for c in candidates if c.is_file() and _first_run_id(c) == run_id), None)
            if child is None:
                child = next((c for c in sorted(where.rglob("*.jsonl")) if _first_run_id(c) == run_id), None)
            found.append((ev, run_id, child))
    return found


def _first_run_id(path: Path) -> str | None:
    """The run id on a trace file's first line (None when it has none)."""
    try:
        with open(path, "rb") as f:
            line = f.readline(1 << 20)
        value = json.loads(line).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _check_nested(events: list[TraceEvent], where: Path, depth: int, problems: list[str],
                  warnings: list[str]) -> None:
    for ev, run_id, child in _nested_traces(events, where):
        if child is None:
            warnings.append(f"seq {ev.seq}: linked run {run_id} of call {ev.data.get('call_id')}: no trace of it found "
                            f"under {where} (the nested run was not traced, or its file moved)")
            continue
        if depth >= _MAX_NESTING:
            warnings.append(f"seq {ev.seq}: linked run {run_id} not verified: nesting deeper than {_MAX_NESTING}")
            continue
        report = _verify(child, artifact_root=None, narration=False, depth=depth + 1)
        problems.extend(f"nested run {run_id} ({child.name}): {p}" for p in report.problems)
        warnings.extend(f"nested run {run_id} ({child.name}): {w}" for w in report.warnings)


_MAX_NESTING = 8


def verify_trace(path: str | os.PathLike[str] | BinaryIO | bytes, *,
                 artifact_root: str | os.PathLike[str] | None = None, narration: bool = True) -> VerifyReport:
    """Check that a trace is a complete, consistent execution record. Never raises for a bad trace (an unknown
    schema major is reported as a problem); raises ``OSError`` only if the trace itself cannot be opened.

    Facts (``problems``; ``ok`` iff none): every line parses with the v1 envelope; seq 0,1,2,… without gaps; one
    run_id; run_started first; a provenance event; exactly one terminal event, last; every started tool
    execution finished (a problem for a completed run); every artifact_written follows a tool_execution_started
    of its call, is listed by that call's tool_execution_finished, and (given ``artifact_root``) exists there
    with the recorded sha256 and size.

    A run that a call linked (agent as a tool) is verified too, from its own trace file when one is found (see
    `_nested_traces`; only for a ``path`` on disk): its problems are the parent's, prefixed with its run id.

    The final answer's claims are grounded again from the committed messages (`agent.trace_grounding`): an
    ungrounded claim is a finding of its own (``ungrounded``), and recorded grounding that disagrees is a problem.
    With ``narration`` (the default) the report also carries `check_narration`'s findings, apart from the facts.
    """
    return _verify(path, artifact_root=artifact_root, narration=narration, depth=0)


def _verify(path: str | os.PathLike[str] | BinaryIO | bytes, *, artifact_root: str | os.PathLike[str] | None,
            narration: bool, depth: int) -> VerifyReport:
    problems: list[str] = []
    warnings: list[str] = []
    try:
        read = read_trace(path)
    except UnsupportedTraceSchemaError as e:
        return VerifyReport(ok=False, problems=(str(e),))
    problems.extend(read.problems)
    if read.torn_tail is not None:
        problems.append(f"torn final line ({len(read.torn_tail)} chars): the run was interrupted mid-write")
    events = list(read.events)
    _check_envelope(events, problems, warnings)
    root = Path(artifact_root) if artifact_root is not None else None
    _check_executions(events, root, problems, warnings)
    if isinstance(path, (str, os.PathLike)):
        _check_nested(events, Path(path).parent, depth, problems, warnings)
    grounding = check_grounding(events)
    problems.extend(grounding.problems)
    if grounding.skipped:
        warnings.append(f"grounding check skipped: {grounding.skipped}")
    findings: tuple[str, ...] = ()
    if narration:
        narrated = check_narration(events)
        findings = narrated.findings
        if narrated.skipped:
            warnings.append(f"narration check skipped: {narrated.skipped}")
    return VerifyReport(ok=not problems, problems=tuple(problems), warnings=tuple(warnings),
                        n_events=len(events), narration=findings, ungrounded=grounding.ungrounded)
