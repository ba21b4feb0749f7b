"""The grounding check of a trace: does the final answer state anything no input and no tool result holds?

    events ─► the committed messages (message_committed: system, user) and ok results (tool_result_committed)
           ─► Sources ─► ground_text(final answer) ─► GroundingCheck(ungrounded, problems, skipped)
    run_completed.grounding (what the run recorded) ─► must agree with the recomputation (else a problem)

Grounding is a pure function of the ledger, and the trace records the ledger's every byte (in the ``full`` and
``summary`` privacy modes), so the check recomputes it rather than trusting what the run wrote. Its findings are
a class of their own (`agent.trace_verify.VerifyReport.ungrounded`): facts about the answer's values, apart from
the record's structure and from the narration heuristic.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.grounding import ClaimGrounding, Sources, ground_text
from agent.trace_format import EventType
from agent.trace_reader import TraceEvent

__all__ = ["GroundingCheck", "check_grounding", "sources_from_events"]


@dataclass(frozen=True, kw_only=True)
class GroundingCheck:
    """What the grounding check found in a run's final answer."""

    claims: tuple[ClaimGrounding, ...] = ()
    """Every claim of the final answer, with its recomputed source."""
    ungrounded: tuple[str, ...] = ()
    """One sentence per claim found in no user or system message and no tool result."""
    problems: tuple[str, ...] = ()
    """The run's recorded grounding disagrees with the recomputation (a fact problem)."""
    skipped: str = ""
    """Why the check could not run (a hashed payload); "" when it ran or there is no final answer."""


def _text(value: Any) -> str | None:
    """A recorded payload as the text it was, or None when a privacy mode replaced it."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)) and not (isinstance(value, dict) and "privacy" in value):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return None


def sources_from_events(events: Sequence[TraceEvent], *, before_index: int | None = None) -> tuple[Sources, str]:
    """The sources a trace's committed ledger holds (entries with ``ledger_index`` below ``before_index``, or all),
    and why some could not be read ("" when all were)."""
    sources = Sources()
    unreadable = ""
    for ev in events:  # a call validated with an ungrounded (or tainted) value taints its result, as in the session
        if ev.event_type == EventType.TOOL_CALL_VALIDATED and isinstance(ev.data.get("call_id"), str) \
                and any(_taints(g) for g in ev.data.get("grounding") or () if isinstance(g, dict)):
            sources.taint(ev.data["call_id"])
    for ev in events:
        data = ev.data
        index = data.get("ledger_index", ev.seq)  # written by every session; a hand-made trace may lack it
        if not isinstance(index, int) or (before_index is not None and index >= before_index):
            continue
        kind = data.get("kind", data.get("role"))
        if ev.event_type == EventType.MESSAGE_COMMITTED and kind in ("system", "user"):
            content = _text(data.get("content"))
            if content is None:
                unreadable = f"the {kind} message (seq {ev.seq}) is not recorded in full"
                continue
            sources.add_entry(index, str(kind), {"content": content})
        elif ev.event_type == EventType.TOOL_RESULT_COMMITTED and data.get("kind", "tool_result") == "tool_result" \
                and data.get("ok"):
            content = _text(data.get("content"))
            if content is None:
                unreadable = f"the result of {data.get('call_id')} (seq {ev.seq}) is not recorded in full"
                continue
            call_id, tool = data.get("call_id"), data.get("tool")
            sources.add_tool_result(index, content, call_id=call_id if isinstance(call_id, str) else None,
                                    tool=tool if isinstance(tool, str) else None)
    return sources, unreadable


def _taints(record: dict[str, Any]) -> bool:
    """`ValueGrounding.taints` read from its trace record: the value is ungrounded, or found in a tainted result."""
    sources = [record.get("source"), *(p.get("source") for p in record.get("parts") or () if isinstance(p, dict))]
    return any(isinstance(s, dict) and (s.get("kind") == "none" or s.get("tainted") is True) for s in sources)


def check_grounding(events: Sequence[TraceEvent]) -> GroundingCheck:
    """Recompute the final answer's claims and their sources from the recorded ledger (see the module docstring).
    A run that did not complete has no final answer: nothing to check."""
    completed = next((ev for ev in reversed(events) if ev.event_type == EventType.RUN_COMPLETED), None)
    if completed is None:
        return GroundingCheck()
    final = completed.data.get("final_text")
    final = final if isinstance(final, str) else None
    if final is None:
        return GroundingCheck(skipped="the final answer is not recorded in full (privacy mode)")
    sources, unreadable = sources_from_events(events)
    if unreadable:
        return GroundingCheck(skipped=unreadable)
    claims = ground_text(final, sources)
    ungrounded = tuple(
        f"the final answer's {c.kind} {c.text!r} (at {c.span[0]}:{c.span[1]}) "
        + ("is in no user or system message and no tool result" if not c.source.grounded else
           f"comes only from the result of {c.source.call_id} ({c.source.tool}), a call made on values that were not "
           "grounded")
        for c in claims if not c.source.grounded or c.source.tainted)
    problems: list[str] = []
    recorded = completed.data.get("grounding")
    if isinstance(recorded, list):
        said = [(r.get("span"), r["source"].get("kind") if isinstance(r.get("source"), dict) else None)
                for r in recorded if isinstance(r, dict)]
        found = [(list(c.span), c.source.kind.value) for c in claims]
        if said != found:
            problems.append(f"seq {completed.seq}: the recorded grounding of the final answer ({said}) disagrees with "
                            f"the grounding recomputed from the committed messages ({found})")
    return GroundingCheck(claims=claims, ungrounded=ungrounded, problems=tuple(problems))
