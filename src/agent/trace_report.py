"""Human views of a trace: a one-line-per-event timeline and a self-contained HTML report.

    read_trace(path).events ─► render_timeline  ─► text   (``ember trace show``)
                            └► render_html_report ─► HTML (``ember trace report``)

Owns presentation only: it reads events (``trace.TraceEvent`` or the dicts ``TraceRecorder.emit`` returns) and
never judges them (``trace.verify_trace`` does). Refuses nothing: unknown event types and missing fields render
as what they are. The HTML is one file with inline CSS, no scripts and no external assets (a Content-Security-
Policy forbids loading any), and every value taken from the trace is HTML-escaped.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from typing import Any

from agent.trace import TERMINAL_EVENTS, EventType, TraceEvent

__all__ = ["render_html_report", "render_timeline"]

_EXCERPT_CHARS = 96


def _as_dict(event: TraceEvent | Mapping[str, Any]) -> dict[str, Any]:
    return event.to_json() if isinstance(event, TraceEvent) else dict(event)


def _text(value: Any) -> str:
    """A payload as text: strings as they are, privacy dicts and other JSON compactly."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str)


def _excerpt(value: Any, limit: int = _EXCERPT_CHARS) -> str:
    """One line, bounded: newlines shown as ⏎, long text cut with …"""
    if isinstance(value, dict) and value.get("privacy") in ("hashed", "summary"):
        shown = value.get("excerpt", "")
        value = f"{shown}[{value['privacy']} len={value.get('len')} sha256={str(value.get('sha256'))[:12]}]"
    text = _text(value).replace("\r", "").replace("\n", "⏎")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _ms(value: Any) -> str:
    return f"{value:.1f}ms" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def _summary(event_type: str, d: Mapping[str, Any]) -> str:
    """The one-line gist of an event's data."""
    tool, call = d.get("tool", "?"), d.get("call_id", "?")
    match event_type:
        case EventType.RUN_STARTED:
            return f"user: {_excerpt(d.get('user_message', ''))}"
        case EventType.PROVENANCE:
            model = d.get("model_name") or str(d.get("model_sha256") or "-")[:12]
            return (f"model={model} codec={d.get('codec_id')} "
                    f"runtime={d.get('runtime_version')} tools={str(d.get('tool_schema_sha256'))[:12]}")
        case EventType.MODEL_CALL_STARTED:
            return f"messages={d.get('n_messages', '?')} max_tokens={d.get('max_tokens', '?')}"
        case EventType.MODEL_CALL_FINISHED:
            return (f"in={d.get('n_prompt_tokens', '?')} out={d.get('n_output_tokens', '?')} "
                    f"finish={d.get('finish_reason', '?')} {_ms(d.get('duration_ms'))} "
                    f"text: {_excerpt(d.get('output', d.get('text', '')))}")
        case EventType.ASSISTANT_ACTION_PARSED:
            calls = d.get("calls")
            calls = calls if isinstance(calls, (list, tuple)) else []  # a reader never trusts a field's type
            names = ",".join(str(c.get("tool", c.get("name", "?"))) if isinstance(c, dict) else str(c)
                             for c in calls)
            reason = f" {d['reason']}" if d.get("reason") else ""
            return f"{d.get('action', '?')}{' ' + names if names else ''}{reason}"
        case EventType.TOOL_CALL_VALIDATED:
            args = f" {_excerpt(d['arguments'], 72)}" if "arguments" in d else ""
            loose = _ungrounded_paths(d.get("grounding"))
            return f"{tool} call={call}{args}" + (f" ungrounded: {', '.join(loose)}" if loose else "")
        case EventType.TOOL_CALL_REJECTED:
            return f"{tool} call={call} {d.get('kind', '?')}: {_excerpt(d.get('detail', ''))}"
        case EventType.TOOL_EXECUTION_STARTED:
            args = f"({_excerpt(d['arguments'], 72)})" if "arguments" in d else ""
            return f"{tool}{args} call={call}" + (f" timeout={d['timeout_s']}s" if d.get("timeout_s") else "")
        case EventType.TOOL_EXECUTION_FINISHED:
            status = "ok" if d.get("ok") else f"error {d.get('error_kind', '?')}"
            arts = d.get("artifact_ids") or []
            return f"{tool} {status} {_ms(d.get('duration_ms'))}" + (f" artifacts={arts}" if arts else "")
        case EventType.TOOL_RESULT_COMMITTED:
            return f"call={call} {_excerpt(d.get('content', d.get('result', '')))}"
        case EventType.TOOL_RESULT_UNCOMMITTED:
            return f"call={call} {tool} effect happened, result not committed: {d.get('reason', '?')}"
        case EventType.MESSAGE_COMMITTED:
            content = d.get("content") or d.get("tool_calls") or ""
            return f"{d.get('role', '?')}: {_excerpt(content)}"
        case EventType.ARTIFACT_WRITTEN:
            return (f"{d.get('artifact_id', '?')} sha256={str(d.get('sha256'))[:12]} "
                    f"{d.get('size_bytes', '?')}B call={call}")
        case EventType.RUN_COMPLETED:
            loose = [str(c.get("text")) for c in _records(d.get("grounding")) if _source_kind(c) == "none"]
            return f"final: {_excerpt(d.get('final_text', ''))}" + (f" ungrounded: {', '.join(loose)}" if loose else "")
        case EventType.RUN_FAILED:
            return f"{d.get('error', d.get('kind', '?'))}: {_excerpt(d.get('detail', ''))}"
        case EventType.RUN_CANCELLED:
            return f"reason: {_excerpt(d.get('reason', ''))}"
        case EventType.RUN_TERMINATED:
            return f"limit: {d.get('limit', '?')} {_excerpt(d.get('detail', ''))}".rstrip()
        case _:
            return _excerpt(d)


def _records(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _source_kind(record: Mapping[str, Any]) -> str:
    source = record.get("source")
    return str(source.get("kind", "?")) if isinstance(source, dict) else "?"


def _ungrounded_paths(grounding: Any) -> list[str]:
    return [str(r.get("path")) or "(arguments)" for r in _records(grounding) if _source_kind(r) == "none"]


def render_timeline(events: Iterable[TraceEvent | Mapping[str, Any]]) -> str:
    """One line per event: seq, time since run start, step, event type, and the event's gist."""
    lines = []
    for raw in events:
        ev = _as_dict(raw)
        t = ev.get("t_ms")
        t_text = f"{t:>10.1f}ms" if isinstance(t, (int, float)) else f"{'?':>12}"
        data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
        event_type = str(ev.get("event_type", "?"))
        lines.append(f"{ev.get('seq', '?'):>4} {t_text}  {str(ev.get('step') or '-'):<10} {event_type:<24} "
                     f"{_summary(event_type, data)}".rstrip())
    return "\n".join(lines) + ("\n" if lines else "")


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#1d1d1f;background:#fff}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;
vertical-align:top}th{background:#f4f4f6}.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code,pre{font:12px/1.4 ui-monospace,monospace}pre{white-space:pre-wrap;word-break:break-all;margin:4px 0;
background:#f7f7f9;padding:6px}.model{background:#eef5ff}.tool{background:#fff8e6}.bad{background:#ffecec}
.term{font-weight:600}.ok{color:#137333}.err{color:#b3261e}details summary{cursor:pointer}
"""


def _pre(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True,
                                                           default=str)
    return f"<pre>{html.escape(text)}</pre>"


def _row_class(event_type: str, data: Mapping[str, Any]) -> str:
    if event_type in TERMINAL_EVENTS:
        return "term" + (" bad" if event_type != EventType.RUN_COMPLETED else "")
    if event_type in (EventType.TOOL_CALL_REJECTED, EventType.TOOL_RESULT_UNCOMMITTED) or data.get("ok") is False:
        return "bad"
    if event_type.startswith("model_call") or event_type == EventType.ASSISTANT_ACTION_PARSED:
        return "model"
    if event_type.startswith("tool_") or event_type == EventType.ARTIFACT_WRITTEN:
        return "tool"
    return ""


def render_html_report(events: Iterable[TraceEvent | Mapping[str, Any]], *, title: str = "Ember trace") -> str:
    """A self-contained HTML page: run summary, artifacts, and the full timeline with every event's data
    (arguments, results, model text) in expandable blocks. All trace content is escaped."""
    evs = [_as_dict(e) for e in events]
    esc = html.escape
    datas = [e.get("data") if isinstance(e.get("data"), dict) else {} for e in evs]
    terminal = next((e for e in reversed(evs) if e.get("event_type") in TERMINAL_EVENTS), None)
    model_ms = sum(d.get("duration_ms", 0) for e, d in zip(evs, datas)
                   if e.get("event_type") == EventType.MODEL_CALL_FINISHED
                   and isinstance(d.get("duration_ms"), (int, float)))
    tool_ms = sum(d.get("duration_ms", 0) for e, d in zip(evs, datas)
                  if e.get("event_type") == EventType.TOOL_EXECUTION_FINISHED
                  and isinstance(d.get("duration_ms"), (int, float)))
    n_model = sum(e.get("event_type") == EventType.MODEL_CALL_FINISHED for e in evs)
    n_tool = sum(e.get("event_type") == EventType.TOOL_EXECUTION_FINISHED for e in evs)
    run_ids = sorted({str(e.get("run_id")) for e in evs})
    summary_rows = [("run", ", ".join(run_ids) or "-"),
                    ("outcome", str(terminal.get("event_type")) if terminal else "no terminal event (interrupted)"),
                    ("events", str(len(evs))), ("model turns", f"{n_model} ({model_ms:.1f} ms)"),
                    ("tool executions", f"{n_tool} ({tool_ms:.1f} ms)")]
    out = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
           f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>", f"<h1>{esc(title)}</h1>",
           "<table>"]
    out += [f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in summary_rows]
    out.append("</table>")
    artifacts = [d for e, d in zip(evs, datas) if e.get("event_type") == EventType.ARTIFACT_WRITTEN]
    out.append("<h2>Artifacts</h2>")
    if artifacts:
        out.append("<table><tr><th>id</th><th>sha256</th><th class=\"num\">bytes</th><th>call</th></tr>")
        out += [f"<tr><td><code>{esc(str(d.get('artifact_id')))}</code></td><td><code>{esc(str(d.get('sha256')))}"
                f"</code></td><td class=\"num\">{esc(str(d.get('size_bytes')))}</td>"
                f"<td><code>{esc(str(d.get('call_id')))}</code></td></tr>" for d in artifacts]
        out.append("</table>")
    else:
        out.append("<p>No artifact was written.</p>")
    out += _grounding_section(evs, datas)
    out.append("<h2>Timeline</h2><table><tr><th class=\"num\">seq</th><th class=\"num\">t</th><th>step</th>"
               "<th>event</th><th>details</th></tr>")
    for e, d in zip(evs, datas):
        event_type = str(e.get("event_type", "?"))
        t = e.get("t_ms")
        t_text = f"{t:.1f} ms" if isinstance(t, (int, float)) else "?"
        body = f"{esc(_summary(event_type, d))}"
        if d:
            body += f"<details><summary>data</summary>{_pre(d)}</details>"
        out.append(f"<tr id=\"seq-{esc(str(e.get('seq', '?')))}\" class=\"{_row_class(event_type, d)}\">"
                   f"<td class=\"num\">{esc(str(e.get('seq', '?')))}</td>"
                   f"<td class=\"num\">{esc(t_text)}</td><td>{esc(str(e.get('step') or '-'))}</td>"
                   f"<td><code>{esc(event_type)}</code></td><td>{body}</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out) + "\n"


def _grounding_section(evs: list[dict[str, Any]], datas: list[dict[str, Any]]) -> list[str]:
    """Every argument value and final-answer claim with where it came from: a user or system message, a tool result
    (linked to the event that committed it), the schema, or nowhere (ungrounded, marked)."""
    esc = html.escape
    results = {d["call_id"]: e.get("seq") for e, d in zip(evs, datas)
               if e.get("event_type") == EventType.TOOL_RESULT_COMMITTED and isinstance(d.get("call_id"), str)}
    messages = {d["ledger_index"]: e.get("seq") for e, d in zip(evs, datas)
                if e.get("event_type") == EventType.MESSAGE_COMMITTED and isinstance(d.get("ledger_index"), int)}

    def where(record: Mapping[str, Any], value: Any = None) -> str:
        source = record.get("source") if isinstance(record.get("source"), dict) else {}
        kind = str(source.get("kind", "?"))
        parts = _records(record.get("parts"))
        if parts and isinstance(value, str):  # each claim of a composed or ungrounded string, with its own source
            listed = "; ".join(f"<code>{esc(_part_text(value, p))}</code> {where(p)}" for p in parts)
            return ("composed of grounded parts: " if kind == "composed" else
                    "<strong class=\"err\">ungrounded</strong>: ") + listed
        if kind == "none":
            return "<strong class=\"err\">ungrounded</strong>: in no message and no tool result"
        if kind == "tool_result":
            seq = results.get(source["call_id"]) if isinstance(source.get("call_id"), str) else None
            path = f" at <code>{esc(str(source.get('path')))}</code>" if source.get("path") else ""
            label = f"{esc(str(source.get('tool')))} result ({esc(str(source.get('call_id')))}){path}"
            return f"<a href=\"#seq-{esc(str(seq))}\">{label}</a>" if seq is not None else label
        if kind in ("user", "system"):
            seq = messages.get(source["ledger_index"]) if isinstance(source.get("ledger_index"), int) else None
            span = source.get("span")
            label = f"{kind} message" + (f" [{esc(str(span[0]))}:{esc(str(span[1]))}]" if isinstance(span, list)
                                         and len(span) == 2 else "")
            return f"<a href=\"#seq-{esc(str(seq))}\">{label}</a>" if seq is not None else label
        return "fixed by the schema" if kind == "schema" else esc(kind)

    rows: list[str] = []
    for e, d in zip(evs, datas):
        if e.get("event_type") == EventType.TOOL_CALL_VALIDATED:
            values = _leaf_values(d.get("arguments"))
            for record in _records(d.get("grounding")):
                path = str(record.get("path", ""))
                shown = _excerpt(values[path], 60) if path in values else "?"
                bad = " class=\"bad\"" if _source_kind(record) == "none" else ""
                rows.append(f"<tr{bad}><td>{esc(str(d.get('call_id')))} {esc(str(d.get('tool')))}</td>"
                            f"<td><code>{esc(path or '(arguments)')}</code></td><td><code>{esc(shown)}</code></td>"
                            f"<td>{where(record, values.get(path))}</td></tr>")
        elif e.get("event_type") == EventType.RUN_COMPLETED:
            for record in _records(d.get("grounding")):
                bad = " class=\"bad\"" if _source_kind(record) == "none" else ""
                rows.append(f"<tr{bad}><td>final answer</td><td>{esc(str(record.get('kind')))}</td>"
                            f"<td><code>{esc(_excerpt(record.get('text'), 60))}</code></td>"
                            f"<td>{where(record)}</td></tr>")
    if not rows:
        return []
    return ["<h2>Where the values came from</h2><table><tr><th>call</th><th>argument / claim</th><th>value</th>"
            "<th>source</th></tr>", *rows, "</table>"]


def _part_text(value: str, part: Mapping[str, Any]) -> str:
    """The claim a part's span picks out of its string (``?`` when the span does not fit it)."""
    span = part.get("span")
    if isinstance(span, list) and len(span) == 2 and all(isinstance(i, int) for i in span) and 0 <= span[0] < span[1]:
        return value[span[0]:span[1]] or "?"
    return "?"


def _leaf_values(arguments: Any) -> dict[str, Any]:
    from agent.grounding import iter_leaves
    from agent.schema import render_path

    if not isinstance(arguments, (dict, list)):
        return {}
    return {render_path(parts): value for parts, value in iter_leaves(arguments)}
