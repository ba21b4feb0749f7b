"""Streaming a turn before the turn is over: the prose that is certainly answer text, and the calls as written.

Owns two questions, asked by a server that streams deltas while the model is still writing.

- Which prefix of the text so far is prose that the finished turn's content will start with, whatever the model
  writes next? `ProseGuard` answers from the family's call triggers (`call_triggers`: the words that start a call
  attempt, as the codec's parser and lazy grammar define them), so call markup never reaches ``content``.
- Which calls has the model begun, under which names, and how much of each one's arguments object is written?
  `CallScanner` reads the call objects after the first trigger (or a leading ``{``) as a JSON-aware scan that never
  goes back: a call's name once its string is complete, then its arguments text as it grows. The arguments are the
  model's own bytes, so the streamed fragments concatenate to exactly what the finished turn carries.

Refuses to guess for a codec it does not know: nothing is released early, and the whole answer comes when the turn
is parsed.

    partial turn ─► ProseGuard.safe_prefix ─► held back: leading blanks, a leading "{" (a bare call), everything
                                              from a trigger on, a trigger's unfinished beginning, trailing blanks
    partial turn ─► CallScanner.feed ─► [ScannedCall(name, arguments so far, complete)]

The parsed turn's content (`FinalText.text`, `ToolCalls.text`) always starts with every safe prefix: a call's
prose is the text before its first trigger less trailing newline(s), and a bare call has none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agent.protocol._calls import DIALECT_WS, JSON_WS
from agent.protocol.base import Codec

__all__ = ["CallScanner", "ProseGuard", "ScannedCall", "call_triggers"]


def call_triggers(codec: Codec) -> tuple[str, ...] | None:
    """The words that start a call attempt anywhere in a turn of ``codec`` (a leading ``{`` also does, in every
    family), or None for a codec this module does not know."""
    syntax = _call_syntax(codec)
    return None if syntax is None else syntax[0]


def _call_syntax(codec: Codec) -> tuple[tuple[str, ...], str] | None:
    """The family's call triggers and its arguments key, or None for a codec this module does not know."""
    from agent.protocol import llama3, qwen

    if isinstance(codec, qwen.QwenCodec):
        return qwen.TRIGGERS, "arguments"
    if isinstance(codec, llama3.Llama3Codec):
        return llama3.TRIGGERS, "parameters"
    return None


def _call_region(text: str, triggers: tuple[str, ...]) -> int | None:
    """Where the call markup of a turn begins (its first trigger, or a leading ``{``); None while there is none."""
    lead = len(text) - len(text.lstrip(DIALECT_WS))
    if text.startswith("{", lead):
        return lead
    found = [at for at in (text.find(word) for word in triggers) if at != -1]
    return min(found) if found else None


class ProseGuard:
    """Says how much of a partial turn may be streamed as ``content`` (see the module docstring)."""

    def __init__(self, codec: Codec) -> None:
        self._triggers = call_triggers(codec)

    def safe_prefix(self, text: str) -> str:
        """The longest prefix of ``text`` that the finished turn's content starts with, whatever follows; never
        shrinks as ``text`` grows."""
        if self._triggers is None:
            return ""
        region = _call_region(text, self._triggers)
        cut = region if region is not None else len(text) - self._unfinished_trigger(text)
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


@dataclass(frozen=True)
class ScannedCall:
    """One call as far as the model has written it."""

    name: str | None
    """The tool name, once its JSON string is complete."""
    arguments: str
    """The arguments object's text written so far (the model's bytes: a prefix of the finished text)."""
    complete: bool
    """The arguments object is closed."""


class _Call:
    __slots__ = ("name", "start", "end")

    def __init__(self) -> None:
        self.name: str | None = None
        self.start: int | None = None
        self.end: int | None = None


class CallScanner:
    """Follows the call objects of a growing turn (see the module docstring); `feed` the whole text so far.

    A call object is a JSON object that opens outside any other value, or directly inside a top-level array (a
    fenced block may hold one). Inside it, the string value of ``"name"`` is the name and the object value of the
    family's arguments key is the arguments. What lies between values (tags, fences, ``;``) is skipped.
    """

    def __init__(self, codec: Codec) -> None:
        syntax = _call_syntax(codec)
        self._triggers, self._args_key = syntax if syntax is not None else ((), "")
        self._known = syntax is not None
        self._text = ""
        self._pos: int | None = None
        self._stack: list[str] = []
        self._in_string = self._escape = False
        self._string_start = 0
        self._call_depth = 0
        self._key: str | None = None
        self._expect_key = False
        self._value_key: str | None = None
        self._calls: list[_Call] = []

    def feed(self, text: str) -> list[ScannedCall]:
        """The calls begun in ``text`` (which extends the text fed before), in order."""
        if not self._known:
            return []
        if not text.startswith(self._text):
            raise ValueError("CallScanner.feed: the text must extend the text fed before")
        self._text = text
        if self._pos is None:
            self._pos = _call_region(text, self._triggers)
        if self._pos is not None:
            self._scan()
        end = len(text)
        return [ScannedCall(name=c.name, arguments="" if c.start is None else text[c.start:c.end or end],
                            complete=c.end is not None) for c in self._calls]

    def _scan(self) -> None:  # noqa: C901 - one character-level state machine, kept in one place on purpose
        text, stack = self._text, self._stack
        pos = self._pos
        assert pos is not None
        while pos < len(text):
            ch = text[pos]
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == '"':
                    self._in_string = False
                    self._string_closed(pos)
                pos += 1
                continue
            if not stack and ch not in "{[":
                pos += 1  # between values: tags, fences, separators
                continue
            if ch == '"':
                self._in_string, self._string_start = True, pos
                if len(stack) == self._call_depth and stack[-1] == "{" and self._expect_key:
                    self._expect_key = False
                else:
                    self._value_begins(pos)
            elif ch in "{[":
                self._value_begins(pos)
                stack.append(ch)
                if ch == "{" and self._call_depth == 0 and (len(stack) == 1 or stack == ["[", "{"]):
                    self._call_depth = len(stack)
                    self._calls.append(_Call())
                    self._expect_key = True
            elif ch in "}]":
                if stack:
                    stack.pop()
                if self._call_depth and len(stack) == self._call_depth and self._value_key == self._args_key:
                    self._value_ends(pos + 1)
                if len(stack) < self._call_depth:
                    self._call_depth, self._key, self._value_key = 0, None, None
            elif ch == "," and len(stack) == self._call_depth and self._call_depth:
                self._expect_key, self._value_key = True, None
            elif ch not in JSON_WS and ch != ":":
                self._value_begins(pos)  # a number, true, false or null
            pos += 1
        self._pos = pos

    def _at_call_level(self) -> bool:
        return bool(self._call_depth) and len(self._stack) == self._call_depth

    def _value_begins(self, pos: int) -> None:
        if self._at_call_level() and self._key is not None:
            self._value_key, self._key = self._key, None
            if self._value_key == self._args_key and self._calls[-1].start is None:
                self._calls[-1].start = pos

    def _value_ends(self, end: int) -> None:
        call = self._calls[-1]
        if call.start is not None and call.end is None:
            call.end = end
        self._value_key = None

    def _string_closed(self, pos: int) -> None:
        if not self._at_call_level():
            return
        raw = self._text[self._string_start:pos + 1]
        if self._value_key is None and self._key is None:  # a key of the call object
            self._key = _json_string(raw)
        elif self._value_key == "name":
            if self._calls[-1].name is None:
                self._calls[-1].name = _json_string(raw)
            self._value_key = None


def _json_string(raw: str) -> str | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, str) else None
