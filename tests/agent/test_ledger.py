"""CommitLedger: one commit function moves engine, ledger and observer together; transitions are enforced."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.ledger import CommitLedger, EntryKind, LedgerEntry, LedgerError


class _CountingEngine:
    """Minimal committer: counts commits; committed_tokens grows by 10 per commit."""

    def __init__(self) -> None:
        self.n_commits = 0

    def commit(self) -> None:
        self.n_commits += 1

    @property
    def committed_tokens(self) -> int:
        return 10 * self.n_commits


def _msg(role: str, content: str = "x") -> dict[str, str]:
    return {"role": role, "content": content}


def _ledger() -> tuple[CommitLedger, _CountingEngine, list[LedgerEntry]]:
    engine = _CountingEngine()
    seen: list[LedgerEntry] = []
    return CommitLedger(engine=engine, on_commit=seen.append), engine, seen


def test_every_commit_updates_engine_ledger_and_observer_together() -> None:
    ledger, engine, seen = _ledger()
    ledger.commit(EntryKind.SYSTEM, _msg("system"))
    ledger.commit(EntryKind.USER, _msg("user"))
    ledger.commit(EntryKind.ASSISTANT_TOOL_CALL, _msg("assistant"), step="model-1", call_ids=["call-1"])
    ledger.commit(EntryKind.TOOL_RESULT, _msg("tool"), step="tool-1", call_ids=["call-1"], tool="t", ok=True)
    ledger.commit(EntryKind.ASSISTANT_FINAL, _msg("assistant", "done"), step="model-2")
    assert engine.n_commits == len(ledger) == len(seen) == 5
    assert seen == list(ledger.entries)
    assert [e.index for e in ledger] == [0, 1, 2, 3, 4]
    assert [e.kv_tokens for e in ledger] == [10, 20, 30, 40, 50]
    assert [m["role"] for m in ledger.messages()] == ["system", "user", "assistant", "tool", "assistant"]


def test_messages_are_copies_that_cannot_change_the_ledger() -> None:
    ledger, _, _ = _ledger()
    original = _msg("user", "hello")
    ledger.commit(EntryKind.USER, original)
    original["content"] = "mutated"
    ledger.messages()[0]["content"] = "mutated too"
    assert ledger.messages()[0]["content"] == "hello"


def test_a_refused_commit_changes_nothing() -> None:
    ledger, engine, seen = _ledger()
    ledger.commit(EntryKind.USER, _msg("user"))
    with pytest.raises(LedgerError) as info:
        ledger.commit(EntryKind.TOOL_RESULT, _msg("tool"), call_ids=["call-1"])
    assert info.value.previous is EntryKind.USER and info.value.attempted is EntryKind.TOOL_RESULT
    assert engine.n_commits == len(ledger) == len(seen) == 1


def test_a_result_can_only_answer_a_pending_call_once() -> None:
    ledger, _, _ = _ledger()
    ledger.commit(EntryKind.USER, _msg("user"))
    ledger.commit(EntryKind.ASSISTANT_TOOL_CALL, _msg("assistant"), call_ids=["call-1", "call-2"])
    assert ledger.pending_calls == ("call-1", "call-2")
    with pytest.raises(LedgerError, match="not pending"):
        ledger.commit(EntryKind.TOOL_RESULT, _msg("tool"), call_ids=["call-9"])
    ledger.commit(EntryKind.TOOL_RESULT, _msg("tool"), call_ids=["call-1"], ok=True)
    with pytest.raises(LedgerError, match="not pending"):
        ledger.commit(EntryKind.TOOL_REJECTION, _msg("tool"), call_ids=["call-1"], ok=False)
    ledger.commit(EntryKind.TOOL_REJECTION, _msg("tool"), call_ids=["call-2"], ok=False)
    assert ledger.pending_calls == ()


def test_results_of_an_older_turn_cannot_be_committed_after_a_new_turn() -> None:
    ledger, _, _ = _ledger()
    ledger.commit(EntryKind.USER, _msg("user"))
    ledger.commit(EntryKind.ASSISTANT_TOOL_CALL, _msg("assistant"), call_ids=["call-1", "call-2"])
    ledger.commit(EntryKind.TOOL_RESULT, _msg("tool"), call_ids=["call-1"])
    ledger.commit(EntryKind.ASSISTANT_TOOL_CALL, _msg("assistant"), call_ids=["call-3"])
    with pytest.raises(LedgerError):
        ledger.commit(EntryKind.TOOL_RESULT, _msg("tool"), call_ids=["call-2"])


@pytest.mark.parametrize("call_ids", [(), ("call-1", "call-1")])
def test_call_turns_need_distinct_call_ids(call_ids: tuple[str, ...]) -> None:
    ledger, _, _ = _ledger()
    ledger.commit(EntryKind.USER, _msg("user"))
    with pytest.raises(LedgerError, match="distinct call ids"):
        ledger.commit(EntryKind.ASSISTANT_TOOL_CALL, _msg("assistant"), call_ids=call_ids)


def test_a_malformed_turn_can_only_be_answered_by_a_rejection() -> None:
    ledger, _, _ = _ledger()
    ledger.commit(EntryKind.USER, _msg("user"))
    ledger.commit(EntryKind.ASSISTANT_MALFORMED_CALL, _msg("assistant"), call_ids=["call-1"])
    with pytest.raises(LedgerError):
        ledger.commit(EntryKind.TOOL_RESULT, _msg("tool"), call_ids=["call-1"], ok=True)
    ledger.commit(EntryKind.TOOL_REJECTION, _msg("tool"), call_ids=["call-1"], ok=False)
    ledger.commit(EntryKind.ASSISTANT_FINAL, _msg("assistant"))


def test_final_answer_cannot_be_followed_by_a_tool_result_or_assistant_turn() -> None:
    ledger, _, _ = _ledger()
    ledger.commit(EntryKind.USER, _msg("user"))
    ledger.commit(EntryKind.ASSISTANT_FINAL, _msg("assistant"))
    for kind in (EntryKind.ASSISTANT_FINAL, EntryKind.TOOL_RESULT, EntryKind.SYSTEM):
        with pytest.raises(LedgerError):
            ledger.commit(kind, _msg("x"), call_ids=["call-1"] if kind is EntryKind.TOOL_RESULT else ())
    ledger.commit(EntryKind.USER, _msg("user", "follow-up"))


# A random walk over the transition graph: whatever sequence of attempts is made, the committed entries always
# read as a valid conversation (no result without its call, every result answering the latest call turn).
_ATTEMPT = st.tuples(st.sampled_from(list(EntryKind)), st.integers(1, 3))


@given(st.lists(_ATTEMPT, max_size=40))
def test_committed_entries_are_always_a_valid_conversation(attempts: list[tuple[EntryKind, int]]) -> None:
    ledger, engine, seen = _ledger()
    next_id = 0
    for kind, n in attempts:
        if kind in (EntryKind.ASSISTANT_TOOL_CALL, EntryKind.ASSISTANT_MALFORMED_CALL):
            ids = [f"call-{next_id + i}" for i in range(n if kind is EntryKind.ASSISTANT_TOOL_CALL else 1)]
            next_id += len(ids)
        elif kind in (EntryKind.TOOL_RESULT, EntryKind.TOOL_REJECTION):
            pending = ledger.pending_calls
            ids = [pending[(n - 1) % len(pending)]] if pending else ["call-none"]
        else:
            ids = []
        try:
            ledger.commit(kind, _msg("x"), call_ids=ids)
        except LedgerError:
            pass
    assert engine.n_commits == len(ledger) == len(seen)
    answered: set[str] = set()
    open_calls: set[str] = set()
    for prev, entry in zip([None, *ledger.entries], ledger.entries):
        if entry.kind in (EntryKind.TOOL_RESULT, EntryKind.TOOL_REJECTION):
            assert prev is not None and entry.call_ids[0] in open_calls and entry.call_ids[0] not in answered
            answered.add(entry.call_ids[0])
            if prev.kind is EntryKind.ASSISTANT_MALFORMED_CALL:
                assert entry.kind is EntryKind.TOOL_REJECTION
        elif entry.kind in (EntryKind.ASSISTANT_TOOL_CALL, EntryKind.ASSISTANT_MALFORMED_CALL):
            open_calls = set(entry.call_ids)
        elif entry.kind in (EntryKind.ASSISTANT_FINAL, EntryKind.USER, EntryKind.SYSTEM):
            open_calls = set()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    | st.dictionaries(st.integers(), inner, max_size=2) | st.tuples(inner, inner),
    max_leaves=20,
)


def _containers(value, out):
    if isinstance(value, (dict, list)):
        out.append(value)
        for item in value.values() if isinstance(value, dict) else value:
            _containers(item, out)
    return out


@given(_JSON)
def test_committed_messages_share_no_container_with_the_caller_or_each_other(value):
    ledger = CommitLedger(engine=_CountingEngine())
    message = {"role": "user", "content": "u", "extra": value}
    ledger.commit(EntryKind.USER, message)
    stored, handed_out = ledger.entries[0].message, ledger.messages()[0]
    assert stored == handed_out == copy.deepcopy(message)
    sent = {id(c) for c in _containers(message, [])}
    kept = {id(c) for c in _containers(dict(stored), [])}
    given_out = {id(c) for c in _containers(handed_out, [])}
    assert not sent & kept and not kept & given_out and not sent & given_out
