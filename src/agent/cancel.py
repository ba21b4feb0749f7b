"""Cooperative cancellation: one token any thread can trip, checked at every phase boundary.

Owns: `CancelToken`. Refuses: preempting anything. Cancellation is observed, never forced: the session
checks the token between phases, the engine's decode loop checks it between tokens, and tools receive it
in their `ToolContext` (``ctx.cancel.is_set()``). What a cancel *means* (roll back the speculative turn,
leave an executed effect visible) is decided by the session, not here.

    any thread ── token.cancel("user pressed ^C") ──► token.is_set() == True
                                                        ▲        ▲        ▲
                                          session boundaries  decode loop  tools
"""

from __future__ import annotations

import threading

__all__ = ["CancelToken"]


class CancelToken:
    """A one-way, thread-safe cancel flag with the reason of the first trip.

    It has ``.is_set()`` like `threading.Event`, so the decode loop and tools can take either.
    """

    __slots__ = ("_event", "_reason", "_lock")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason = ""
        self._lock = threading.Lock()

    def cancel(self, reason: str = "") -> None:
        """Trip the token. Idempotent: the first reason wins."""
        with self._lock:
            if not self._event.is_set():
                self._reason = reason
                self._event.set()

    def is_set(self) -> bool:
        """Whether the token has been tripped."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until tripped or ``timeout`` seconds pass; returns whether it was tripped."""
        return self._event.wait(timeout)

    @property
    def reason(self) -> str:
        """The reason given to the first `cancel` call ("" if none, or not tripped)."""
        return self._reason

    def __repr__(self) -> str:
        state = f"set, reason={self._reason!r}" if self.is_set() else "clear"
        return f"CancelToken({state})"
