"""The repeated-call rule, shared by the session and `ember serve`: a model that calls again what it has the answer to
is not given the call again; it is asked to answer.

    calls of a turn ─► distinct_calls (identical calls in one turn: the first stands) ─► keys
    keys ⊆ answered (every call already has its result)? ─► the turn is refused: decoded again under "none", the
                                                            last tool result carrying REPEAT_NOTE (seen by the model)

Small models loop on a call whose result they hold (measured: a one-step calculator question called the calculator
on its own result until the tool-call limit), so a turn made only of such repeats is never executed or returned.
A turn that mixes new calls with repeats runs the new ones; the session replays the repeats' earlier results.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from agent.grounding import INPUT_SOURCES
from agent.schema import canonical_json

__all__ = ["REPEAT_NOTE", "CallKey", "call_key", "distinct_calls", "ends_with_result", "only_repeats", "repeat_note",
           "with_repeat_note"]

CallKey = tuple[str, str]
"""A call's identity: its tool name and its arguments as canonical JSON."""

REPEAT_NOTE: Final = ("You already have the result of this call. Answer the user's question from the results above, "
                      "in plain words.")
"""What the model reads after the last tool result when its turn only repeated answered calls (without it the
default model writes the call again as a code block, measured)."""

_RESULT_ROLES: Final = ("tool", "ipython")
"""The roles a tool result is committed under (OpenAI's ``tool``; Llama 3's ``ipython``)."""


def call_key(name: str, arguments: Mapping[str, Any] | Any) -> CallKey:
    """A call's identity: key order and spacing do not count, 1 and 1.5 differ."""
    return name, canonical_json(arguments)


_Call = TypeVar("_Call")


def distinct_calls(calls: Sequence[_Call], key: Any) -> tuple[list[_Call], int]:
    """The calls with every repeat of an earlier call in the same list dropped (the first stands), and how many
    were dropped. ``key(call)`` is its `CallKey`."""
    seen: set[CallKey] = set()
    kept: list[_Call] = []
    for call in calls:
        k = key(call)
        if k not in seen:
            seen.add(k)
            kept.append(call)
    return kept, len(calls) - len(kept)


def only_repeats(keys: Iterable[CallKey], answered: Mapping[CallKey, Any] | frozenset[CallKey] | set[CallKey]) -> bool:
    """Every call (at least one) already has its result in the conversation."""
    keys = list(keys)
    return bool(keys) and all(k in answered for k in keys)


def repeat_note(missing: Sequence[str] = ()) -> str:
    """`REPEAT_NOTE`, or, when the answer needs a value that only a call not yet made can give (a final pattern
    whose slot takes a number from ``missing``, e.g. ``calculator``), the note that says so."""
    if not missing:
        return REPEAT_NOTE
    names = " or ".join(n if n not in INPUT_SOURCES else "a tool" for n in missing)
    return (f"You already have the result of this call. The answer needs a result of {names}, which you do not have "
            f"yet: call {names} next.")


def ends_with_result(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the last message is a tool result (where `with_repeat_note` puts a note for the next turn)."""
    return bool(messages) and messages[-1].get("role") in _RESULT_ROLES


def with_repeat_note(messages: Sequence[Mapping[str, Any]], note: str = REPEAT_NOTE) -> list[dict[str, Any]]:
    """Copies of ``messages`` whose last tool result ends with ``note`` (unchanged when there is none)."""
    out = [dict(m) for m in messages]
    results = [i for i, m in enumerate(out) if m.get("role") in _RESULT_ROLES]
    if results:
        last = out[results[-1]]
        last["content"] = f"{last.get('content') or ''}\n\n({note})"
    return out
