"""Trace views: the text timeline and the self-contained, escaped HTML report."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.artifact import ArtifactStore
from agent.trace import EventType, PrivacyMode, TraceRecorder, artifact_written_data, read_trace
from agent.trace_report import render_html_report, render_timeline

HOSTILE = '</pre></td><script>alert("x")</script><img src=x onerror=alert(1)><a href="https://evil.example">'
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "table", "tr", "th", "td",
                "code", "pre", "details", "summary"}


def record(path: Path, root: Path, *, privacy: PrivacyMode = PrivacyMode.FULL) -> list[dict]:
    store = ArtifactStore(root)
    out = []
    with TraceRecorder(path, privacy=privacy, run_id="run-report") as tr:
        p = tr.payload
        out.append(tr.emit(EventType.RUN_STARTED, data={"user_message": p("compare the scores\nplease")}))
        out.append(tr.emit(EventType.PROVENANCE, data={"runtime_version": "0.1.0", "codec_id": "qwen2.5-tool-call-v1",
                                                       "model_name": "qwen2.5-coder-0.5b-instruct"}))
        out.append(tr.emit(EventType.MODEL_CALL_FINISHED, step="model-1", data={
            "text": p(HOSTILE), "n_prompt_tokens": 321, "n_output_tokens": 17, "finish_reason": "stop",
            "duration_ms": 1234.5}))
        out.append(tr.emit(EventType.TOOL_EXECUTION_STARTED, step="tool-1", data={
            "call_id": "call-1", "tool": "write_artifact", "arguments": p({"name": "best.md", "content": HOSTILE})}))
        ref = store.write("best.md", HOSTILE.encode())
        out.append(tr.emit(EventType.TOOL_EXECUTION_FINISHED, step="tool-1", data={
            "call_id": "call-1", "tool": "write_artifact", "ok": True, "duration_ms": 0.3,
            "artifact_ids": [ref.id]}))
        out.append(tr.emit(EventType.ARTIFACT_WRITTEN, step="tool-1",
                           data=artifact_written_data(ref, call_id="call-1", tool="write_artifact")))
        out.append(tr.emit(EventType.TOOL_CALL_REJECTED, step="tool-2", data={
            "call_id": "call-2", "tool": "calculator", "kind": "invalid_arguments", "detail": "expected string"}))
        out.append(tr.emit(EventType.RUN_COMPLETED, data={"final_text": p("DONE 21.57%")}))
    return out


class TagCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.extend(attrs)


def structure(page: str) -> TagCollector:
    collector = TagCollector()
    collector.feed(page)
    return collector


def test_timeline_has_one_line_per_event_with_tools_timings_and_artifacts(tmp_path: Path) -> None:
    events = record(tmp_path / "t.jsonl", tmp_path / "a")
    text = render_timeline(read_trace(tmp_path / "t.jsonl").events)
    lines = text.splitlines()
    assert len(lines) == len(events)
    assert "model_call_finished" in lines[2] and "in=321 out=17" in lines[2] and "1234.5ms" in lines[2]
    assert "write_artifact(" in lines[3] and "call=call-1" in lines[3]
    assert "write_artifact ok 0.3ms" in lines[4]
    assert events[5]["data"]["artifact_id"] in lines[5]
    assert "invalid_arguments" in lines[6]
    assert lines[7].split()[3:5] == ["run_completed", "final:"]
    assert text == render_timeline(events)  # TraceEvent and emitted dicts render the same


def test_timeline_keeps_each_event_on_one_bounded_line() -> None:
    event = {"seq": 0, "t_ms": 1.0, "event_type": "message_committed", "step": None,
             "data": {"role": "assistant", "content": "line one\nline two\n" + "z" * 500}}
    (line,) = render_timeline([event]).splitlines()
    assert "line one⏎line two⏎" in line and line.endswith("…") and len(line) < 200


def test_timeline_shows_hashed_payloads_as_hashes(tmp_path: Path) -> None:
    record(tmp_path / "t.jsonl", tmp_path / "a", privacy=PrivacyMode.HASHED)
    text = render_timeline(read_trace(tmp_path / "t.jsonl").events)
    assert "compare the scores" not in text and "[hashed len=25 sha256=" in text


def test_html_report_escapes_every_payload(tmp_path: Path) -> None:
    record(tmp_path / "t.jsonl", tmp_path / "a")
    page = render_html_report(read_trace(tmp_path / "t.jsonl").events, title="<b>run</b>")
    assert "<script" not in page and "<img" not in page and '<a href' not in page
    assert "&lt;script&gt;" in page
    parsed = structure(page)
    assert parsed.tags <= ALLOWED_TAGS
    assert {name for name, _ in parsed.attrs} <= {"lang", "charset", "http-equiv", "content", "class", "id", "href"}


def test_html_report_is_self_contained_with_model_turns_tools_timings_and_artifacts(tmp_path: Path) -> None:
    events = record(tmp_path / "t.jsonl", tmp_path / "a")
    page = render_html_report(events, title="Ember trace")
    assert "default-src 'none'" in page
    parsed = structure(page)
    assert "script" not in parsed.tags and "link" not in parsed.tags and "img" not in parsed.tags
    assert "url(" not in page.split("</style>")[0] and "@import" not in page
    assert "model_call_finished" in page and "in=321 out=17 finish=stop 1234.5ms" in page
    assert "write_artifact" in page and "call-1" in page
    assert events[5]["data"]["artifact_id"] in page and events[5]["data"]["sha256"] in page
    assert "run_completed" in page and "model turns" in page and "1 (1234.5 ms)" in page


def test_html_report_of_an_interrupted_run_says_so() -> None:
    page = render_html_report([{"seq": 0, "event_type": "run_started", "t_ms": 0.1, "data": {}}])
    assert "no terminal event (interrupted)" in page


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=6)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(st.lists(st.fixed_dictionaries({"seq": st.integers(), "event_type": st.sampled_from(
    [e.value for e in EventType] + ["<script>", "future_event"]), "step": st.none() | st.text(),
    "data": st.dictionaries(st.sampled_from(["tool", "call_id", "text", "content", "ok", "duration_ms", "calls",
                                             "artifact_ids", "final_text", "limit", "x"]), json_values)}),
    max_size=4))
def test_renderers_never_raise_and_never_emit_markup_from_data(events) -> None:
    render_timeline(events)
    parsed = structure(render_html_report(events, title="t"))
    assert parsed.tags <= ALLOWED_TAGS
