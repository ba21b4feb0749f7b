"""Idempotency: an action tool runs at most once per key, for the lifetime of one `IdempotencyStore`.

    execute_tool(action) ─► store._claim(tool, args) ─► "run"      ─► execute ─► store._settle(outcome)
                                                     ├► "replay"   ─► the first outcome, ``replayed=True``
                                                     └► "conflict" ─► the key was used with other arguments

The key is the tool's ``idempotency_key`` argument when its schema declares one, else the sha256 of its
canonical arguments. Any outcome of a call that *started* is recorded (a timed-out charge may still have
happened) and replayed; a call that never started (denied, cancelled first) is not. The one exception is an
``idempotent`` tool (repeating it has no further effect, e.g. an MCP tool with ``idempotentHint: true``): a
call of it that timed out or was cancelled does not settle its key, so a retry runs it again under the same key.
Concurrent calls with the same key wait for the first. In memory only.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agent.results import ResultErrorKind
from agent.schema import ValidatedArguments, canonical_json
from agent.tool.definition import Tool
from agent.tool.outcome import ToolOutcome

__all__ = ["IDEMPOTENCY_KEY_FIELD", "IdempotencyStore"]

IDEMPOTENCY_KEY_FIELD: Final = "idempotency_key"
_UNSETTLED: Final = frozenset({ResultErrorKind.TIMEOUT, ResultErrorKind.CANCELLED})
"""Outcomes that leave it unknown whether the effect happened: an idempotent tool may run again after them."""


def _held_lock() -> Any:
    """A lock created held: released once, by whoever finishes what others wait for."""
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass
class _Entry:
    args_sha256: str
    outcome: ToolOutcome | None = None
    settled: Any = field(default_factory=_held_lock)
    """Held until the claim is settled (a C-level lock: cheaper than an Event on every action call); waiters
    pass through it with ``with``."""


class IdempotencyStore:
    """At-most-once execution of action tools, per key, for the lifetime of this object (in memory).

    Concurrent calls with the same key wait for the first and then replay it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}

    @staticmethod
    def key_for(tool: Tool, args: ValidatedArguments) -> str:
        """``key:<idempotency_key>`` when the tool's schema declares that argument and it was given, else
        ``args:<sha256 of the canonical arguments>``."""
        declared = isinstance(tool.parameters.get("properties"), Mapping) and \
            IDEMPOTENCY_KEY_FIELD in tool.parameters["properties"]
        if declared and IDEMPOTENCY_KEY_FIELD in args:
            return "key:" + canonical_json(args.to_dict()[IDEMPOTENCY_KEY_FIELD])
        return "args:" + args.sha256

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for e in self._entries.values() if e.outcome is not None)

    def _claim(self, tool: Tool, args: ValidatedArguments) -> tuple[str, Any]:
        """("run", key) to execute; ("replay", outcome); or ("conflict", detail) for a reused key."""
        key = (tool.name, self.key_for(tool, args))
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and tool.idempotent and entry.outcome is not None \
                        and entry.outcome.error_kind in _UNSETTLED and entry.args_sha256 == args.sha256:
                    entry = None  # a retry of an idempotent call whose first attempt left the effect unknown
                if entry is None:
                    self._entries[key] = _Entry(args_sha256=args.sha256)
                    return "run", key
            with entry.settled:  # blocks until `_settle` releases it
                pass
            with self._lock:
                if self._entries.get(key) is not entry:
                    continue  # the first attempt never started; claim again
            assert entry.outcome is not None
            if entry.args_sha256 != args.sha256:
                return "conflict", (f"idempotency key {key[1][4:]} was already used with different arguments; "
                                    f"the earlier call is not repeated")
            return "replay", dataclasses.replace(entry.outcome, replayed=True)

    def _settle(self, key: tuple[str, str], outcome: ToolOutcome | None) -> None:
        """Record the outcome of a started call, or release the claim of a call that never started."""
        with self._lock:
            entry = self._entries[key]
            if outcome is None:
                del self._entries[key]
            else:
                entry.outcome = outcome
        entry.settled.release()


