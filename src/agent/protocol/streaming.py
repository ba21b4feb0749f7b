"""Streaming a turn's prose before the turn is over: the part of a partial turn that is certainly answer text.

Owns one question, asked by a server that streams ``content`` deltas while the model is still writing: which
prefix of the text so far is prose that the finished turn's content will start with, whatever the model writes
next? It answers from the family's call triggers (`call_triggers`: the words that start a call attempt, as the
codec's parser and lazy grammar define them), so call markup never reaches ``content``. Refuses to guess for a codec
it does not know: nothing is released early, and the whole content comes when the turn is parsed.

    partial turn ─► ProseGuard.safe_prefix ─► held back: leading blanks, a leading "{" (a bare call), everything
                                              from a trigger on, a trigger's unfinished beginning, trailing blanks

The parsed turn's content (`FinalText.text`, `ToolCalls.text`) always starts with every safe prefix: a call's
prose is the text before its first trigger less trailing newline(s), and a bare call has none.
"""

from __future__ import annotations

from agent.protocol._calls import DIALECT_WS
from agent.protocol.base import Codec

__all__ = ["ProseGuard", "call_triggers"]


def call_triggers(codec: Codec) -> tuple[str, ...] | None:
    """The words that start a call attempt anywhere in a turn of ``codec`` (a leading ``{`` also does, in every
    family), or None for a codec this module does not know."""
    from agent.protocol import llama3, qwen

    if isinstance(codec, qwen.QwenCodec):
        return qwen._TRIGGERS
    if isinstance(codec, llama3.Llama3Codec):
        return llama3._TRIGGERS
    return None


class ProseGuard:
    """Says how much of a partial turn may be streamed as ``content`` (see the module docstring)."""

    def __init__(self, codec: Codec) -> None:
        self._triggers = call_triggers(codec)

    def safe_prefix(self, text: str) -> str:
        """The longest prefix of ``text`` that the finished turn's content starts with, whatever follows; never
        shrinks as ``text`` grows."""
        if self._triggers is None:
            return ""
        lead = text.lstrip(DIALECT_WS)
        if not lead or lead.startswith("{"):
            return ""
        found = [at for at in (text.find(word) for word in self._triggers) if at != -1]
        cut = min(found) if found else len(text) - self._unfinished_trigger(text)
        return text[:cut].rstrip(DIALECT_WS)

    def _unfinished_trigger(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a trigger."""
        assert self._triggers is not None
        longest = max(len(word) for word in self._triggers) - 1
        for size in range(min(longest, len(text)), 0, -1):
            tail = text[-size:]
            if any(word.startswith(tail) for word in self._triggers):
                return size
        return 0
