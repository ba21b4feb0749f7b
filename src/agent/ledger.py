"""The commit ledger: the committed conversation, one entry per transition, changed by one function.

Owns: `CommitLedger` (append-only entries + the committed messages the engine renders), `LedgerEntry`,
`EntryKind`, `LedgerError`. Refuses: speculative state. Nothing enters the ledger until the session
commits it, and `CommitLedger.commit` is the only way in: it marks the engine's speculative turn committed
(``engine.commit()``), appends the entry, then reports it (the session traces it). Engine, ledger and trace
therefore move together or not at all.

    system ─► user ─► assistant_tool_call ─► tool_result | tool_rejection ─► … ─► assistant_final
                  └─► assistant_malformed_call ─► tool_rejection ─► …     (repair turn)
                  └─► assistant_final

The transitions are enforced: a tool result can only answer a call of the latest assistant turn, once.
Violations are session bugs and raise `LedgerError`; a cancelled run simply stops appending, so the
entries are always a valid committed prefix (an assistant call may stand without its result; a result
never stands without its call).
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.errors import AgentError

__all__ = ["CommitLedger", "EntryKind", "LedgerEntry", "LedgerError"]


class EntryKind(enum.StrEnum):
    """What a committed transition was."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT_FINAL = "assistant_final"
    """An assistant turn with no call: the run's answer."""
    ASSISTANT_TOOL_CALL = "assistant_tool_call"
    """An assistant turn requesting one or more calls."""
    ASSISTANT_MALFORMED_CALL = "assistant_malformed_call"
    """An assistant turn that attempted a call the codec could not understand."""
    TOOL_RESULT = "tool_result"
    """The reinjected outcome of an executed call (ok or not: a tool failure is still a result)."""
    TOOL_REJECTION = "tool_rejection"
    """The reinjected ok:false result of a call that was never executed (malformed, unknown tool,
    invalid arguments, denied by policy)."""


_ASSISTANT = frozenset({EntryKind.ASSISTANT_FINAL, EntryKind.ASSISTANT_TOOL_CALL,
                        EntryKind.ASSISTANT_MALFORMED_CALL})
_RESULTS = frozenset({EntryKind.TOOL_RESULT, EntryKind.TOOL_REJECTION})
_NEXT: dict[EntryKind | None, frozenset[EntryKind]] = {
    None: frozenset({EntryKind.SYSTEM, EntryKind.USER}),
    EntryKind.SYSTEM: frozenset({EntryKind.USER}),
    EntryKind.USER: _ASSISTANT,
    EntryKind.ASSISTANT_FINAL: frozenset({EntryKind.USER}),
    EntryKind.ASSISTANT_TOOL_CALL: _RESULTS,
    EntryKind.ASSISTANT_MALFORMED_CALL: frozenset({EntryKind.TOOL_REJECTION}),
    EntryKind.TOOL_RESULT: _RESULTS | _ASSISTANT,
    EntryKind.TOOL_REJECTION: _RESULTS | _ASSISTANT,
}


class LedgerError(AgentError):
    """A commit that would break the conversation's transition rules (a session bug, never a model fault)."""

    def __init__(self, previous: EntryKind | None, attempted: EntryKind, detail: str) -> None:
        self.previous = previous
        """Kind of the last committed entry (None for an empty ledger)."""
        self.attempted = attempted
        """Kind of the refused entry."""
        self.detail = detail
        super().__init__(f"cannot commit {attempted.value} after {previous.value if previous else 'nothing'}: "
                         f"{detail}")


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """One committed transition."""

    index: int
    """Position in the ledger (0-based); also the index of ``message`` in the committed messages."""
    kind: EntryKind
    """What transition this was."""
    message: Mapping[str, Any]
    """The committed OpenAI-format message (a private deep copy; `CommitLedger.messages` hands out copies)."""
    step: str | None = None
    """The trace step that produced it (``"model-2"``, ``"tool-3"``); None for the run's inputs."""
    call_ids: tuple[str, ...] = ()
    """For an assistant tool-call turn: the ids of its calls, in order. For a result: the call it answers."""
    tool: str | None = None
    """For results: the name of the tool the call asked for (as the model wrote it)."""
    ok: bool | None = None
    """For results: whether the reinjected result was ok:true. None for messages that are not results."""
    truncated: bool = False
    """For results: whether the content was cut to ``max_result_bytes`` before it was committed."""
    kv_tokens: int = 0
    """The engine's committed token count right after this commit."""


class _Committer(Protocol):
    def commit(self) -> None: ...

    @property
    def committed_tokens(self) -> int: ...


@dataclass(kw_only=True)
class CommitLedger:
    """The committed conversation of one run. `commit` is the one function that changes it."""

    engine: _Committer
    """Told to commit its speculative turn (if any) before each entry is appended."""
    on_commit: Callable[[LedgerEntry], None] | None = None
    """Called with each new entry after it is appended (the session traces it here)."""
    _entries: list[LedgerEntry] = field(default_factory=list, init=False, repr=False)
    _pending_calls: list[str] = field(default_factory=list, init=False, repr=False)

    def commit(self, kind: EntryKind, message: Mapping[str, Any], *, step: str | None = None,
               call_ids: Sequence[str] = (), tool: str | None = None, ok: bool | None = None,
               truncated: bool = False) -> LedgerEntry:
        """Commit one transition: engine, ledger and (through ``on_commit``) trace together.

        Raises:
            LedgerError: the transition is not allowed after the last entry, or a result answers a call
                that is not pending.
        """
        call_ids = tuple(call_ids)
        self._check(kind, call_ids)
        self.engine.commit()
        entry = LedgerEntry(index=len(self._entries), kind=kind, message=copy.deepcopy(dict(message)),
                            step=step, call_ids=call_ids, tool=tool, ok=ok, truncated=truncated,
                            kv_tokens=self.engine.committed_tokens)
        self._entries.append(entry)
        if kind in (EntryKind.ASSISTANT_TOOL_CALL, EntryKind.ASSISTANT_MALFORMED_CALL):
            self._pending_calls = list(call_ids)
        elif kind in _RESULTS:
            self._pending_calls.remove(call_ids[0])
        else:
            self._pending_calls = []
        if self.on_commit is not None:
            self.on_commit(entry)
        return entry

    def _check(self, kind: EntryKind, call_ids: tuple[str, ...]) -> None:
        previous = self._entries[-1].kind if self._entries else None
        if kind not in _NEXT[previous]:
            raise LedgerError(previous, kind, "transition not allowed")
        if kind in _RESULTS:
            if len(call_ids) != 1:
                raise LedgerError(previous, kind, f"a result answers exactly one call, got {call_ids!r}")
            if call_ids[0] not in self._pending_calls:
                raise LedgerError(previous, kind, f"call {call_ids[0]!r} is not pending "
                                                  f"(pending: {self._pending_calls!r})")
        elif kind in (EntryKind.ASSISTANT_TOOL_CALL, EntryKind.ASSISTANT_MALFORMED_CALL):
            if not call_ids or len(set(call_ids)) != len(call_ids):
                raise LedgerError(previous, kind, f"an assistant call turn needs distinct call ids, "
                                                  f"got {call_ids!r}")
        elif call_ids:
            raise LedgerError(previous, kind, "only call turns and results carry call ids")

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """Every committed entry, in order."""
        return tuple(self._entries)

    @property
    def pending_calls(self) -> tuple[str, ...]:
        """Calls of the latest assistant turn that have no committed result yet."""
        return tuple(self._pending_calls)

    def messages(self) -> list[dict[str, Any]]:
        """The committed conversation as OpenAI-format messages (fresh deep copies)."""
        return [copy.deepcopy(dict(e.message)) for e in self._entries]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(tuple(self._entries))
