"""The narration check: does the final answer claim artifacts that the trace does not record? A heuristic.

    events ─► the final answer (run_completed.final_text, else the last assistant message)
           ─► claims_artifact(text)? (an English write verb beside a file noun or name, not negated; or an id)
           ─► NarrationCheck(findings, skipped)

It reads English with regular expressions, so it can miss a claim or see one that is not there; its findings
are labelled as such by `agent.trace_verify.verify_trace` (``VerifyReport.narration``), never mixed with the
fact checks. A claim is backed when the trace records an ``artifact_written`` event (from any tool); an
artifact id the answer names (``NNNN-<12 hex>-name``) must be one the trace recorded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.trace_format import EventType
from agent.trace_reader import TraceEvent

__all__ = ["NarrationCheck", "check_narration", "claims_artifact"]


@dataclass(frozen=True, kw_only=True)
class NarrationCheck:
    """What the narration heuristic found in a run's final answer."""

    findings: tuple[str, ...] = ()
    """Claims the trace does not back, one sentence each."""
    skipped: str = ""
    """Why the answer could not be read (hashed by the privacy mode); "" when it was read or there is none."""


_WRITE_VERB = r"(?:wrote|written|writ(?:e|ing)|saved?|saving|created?|creating|stored?|storing|generated|exported)"
_FILE_NOUN = r"(?:file|files|artifact|artifacts|document|report|markdown|csv|json)"
_FILENAME = r"[\w.-]+\.(?:md|txt|json|csv|html?|ya?ml|py|log|xml|tsv|pdf|png|svg)\b"
_ARTIFACT_ID_RE = re.compile(r"\b\d{4,}-[0-9a-f]{12}(?:-[A-Za-z0-9._-]+)?")
_CLAIM_RE = re.compile(rf"\b{_WRITE_VERB}\b[^.!?\n]{{0,80}}?(?:\b{_FILE_NOUN}\b|{_FILENAME})"
                       rf"|(?:\b{_FILE_NOUN}\b|{_FILENAME})[^.!?\n]{{0,80}}?\b{_WRITE_VERB}\b", re.IGNORECASE)
_NEGATION_RE = re.compile(r"\b(?:not|never|no|cannot|can't|couldn't|didn't|did not|unable|failed to)\b",
                          re.IGNORECASE)


def claims_artifact(text: str) -> bool:
    """Heuristic: does this answer claim that a file/artifact was written? True if a sentence pairs a write verb
    (wrote, saved, created, …) with a file noun or a file name and is not negated, or if it names an artifact id
    (``NNNN-<12 hex>-name``)."""
    if _ARTIFACT_ID_RE.search(text):
        return True
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        m = _CLAIM_RE.search(sentence)
        if m and not _NEGATION_RE.search(sentence[:m.end()]):
            return True
    return False


def _final_text(events: list[TraceEvent]) -> tuple[str | None, str | None]:
    """(final answer text, where it came from) — run_completed.final_text, else the last assistant message."""
    candidates: list[tuple[Any, str]] = []
    for ev in reversed(events):
        if ev.event_type == EventType.RUN_COMPLETED and "final_text" in ev.data:
            candidates.append((ev.data["final_text"], f"run_completed (seq {ev.seq})"))
            break
    for ev in reversed(events):
        if ev.event_type == EventType.MESSAGE_COMMITTED and ev.data.get("role") == "assistant":
            candidates.append((ev.data.get("content"), f"message_committed (seq {ev.seq})"))
            break
    for value, origin in candidates:
        if isinstance(value, str):
            return value, origin
        if isinstance(value, dict) and isinstance(value.get("excerpt"), str):
            return value["excerpt"], origin + " summary excerpt"
    return None, (candidates[0][1] if candidates else None)


def check_narration(events: Sequence[TraceEvent]) -> NarrationCheck:
    """Set the final answer's claims about artifacts against the ``artifact_written`` events of the trace."""
    events = list(events)
    text, origin = _final_text(events)
    if text is None:
        return NarrationCheck(skipped=f"the final answer at {origin} is hashed" if origin is not None else "")
    findings: list[str] = []
    recorded = [r for ev in events if ev.event_type == EventType.ARTIFACT_WRITTEN
                and isinstance(r := ev.data.get("artifact_id"), str)]  # the verifier reports non-strings
    if claims_artifact(text) and not recorded:
        findings.append(f"the final answer claims an artifact was written, but the trace records none "
                        f"(answer from {origin})")
    for named in (n.rstrip("._-") for n in _ARTIFACT_ID_RE.findall(text)):
        if not any(r == named or r.startswith(named) for r in recorded):
            findings.append(f"the final answer names artifact {named}, which the trace never recorded")
    return NarrationCheck(findings=tuple(findings))
