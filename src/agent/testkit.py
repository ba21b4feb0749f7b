"""Scripted stand-ins for testing the session state machine: a turn engine that replays text, and a clock.

Owns: `ScriptedEngine` (a `TurnEngine` whose turns are given in advance), `ScriptedTurn` (one turn with
optional faults), `ScriptedCall` (what the session asked for), `ManualClock`. Refuses: anything about real
decoding. Use it for the session's transitions only; codecs, grammars and the real engine are tested against
real templates and vocabularies.

The engine keeps a fake KV cache whose "tokens" are the characters of the rendered prompt and the generated
text, so a test can assert the transaction semantics without a model:

    run_turn: kv = longest common prefix(kv, render(messages)) + rest of prompt, then + generated chars
    commit  : committed_tokens = len(kv)             rollback: kv truncated to committed_tokens
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.engine import EngineError, ModelTurn, prompt_tools
from agent.protocol.base import Action, Codec, FinalText, ToolCall, ToolCalls, ToolChoice, ToolSpec
from constrained import CancelSignal, FinishReason

__all__ = ["ManualClock", "ScriptedCall", "ScriptedEngine", "ScriptedTurn", "ScriptExhaustedError", "call_text",
           "final_text", "model_text"]

TurnText = str | Callable[[list[dict[str, Any]]], str]
"""A turn's text, or a function of the committed messages returning it."""


class ScriptExhaustedError(EngineError):
    """The session asked for more turns than the script holds (the test's script is too short)."""

    def __init__(self, n_turns: int) -> None:
        self.n_turns = n_turns
        super().__init__(f"scripted engine has no turn {n_turns + 1}: the script holds {n_turns} turn(s)")


@dataclass(frozen=True, kw_only=True)
class ScriptedTurn:
    """One scripted turn, with the faults a test may inject."""

    text: TurnText
    """What the model "generates" (one fake token per character)."""
    trip: Any = None
    """A cancel token to trip while generating (any object with ``cancel(reason)``), simulating a cancel that
    arrives mid-generation from another thread."""
    trip_at: int | None = None
    """Character index at which ``trip`` is tripped (default: the middle of the text)."""
    error: BaseException | None = None
    """Raise this from `run_turn` instead of generating (engine failure)."""
    finish_reason: FinishReason | str | None = None
    """Override the finish reason of a turn that runs to its end (default ``stop_token``)."""


@dataclass(frozen=True, kw_only=True)
class ScriptedCall:
    """What the session passed to one `run_turn` call."""

    messages: list[dict[str, Any]]
    """Deep copy of the committed messages the turn was generated against."""
    tools: tuple[ToolSpec, ...]
    tool_choice: ToolChoice
    max_tokens: int
    prompt: str
    """The codec's rendering of ``messages`` and ``tools`` (what a real model would have seen)."""
    final_pattern: str | None = None
    """The final-answer pattern the session asked the engine to enforce, if any."""
    parallel_calls: bool = False
    """Whether the session let the turn hold several calls."""


@dataclass(kw_only=True)
class ManualClock:
    """A clock tests advance by hand (``Session(clock=clock)``): wall-time limits without sleeping."""

    now: float = 0.0
    """Current reading in seconds."""

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += seconds


class ScriptedEngine:
    """A `TurnEngine` replaying scripted turns through a real codec, with a fake, inspectable KV cache."""

    def __init__(self, turns: Sequence[TurnText | ScriptedTurn], codec: Codec) -> None:
        self.turns: list[TurnText | ScriptedTurn] = list(turns)
        """The turns, in order; running out raises `ScriptExhaustedError`."""
        self.codec = codec
        """Real codec: renders the prompt the fake KV is built from; the session parses with it."""
        self.calls: list[ScriptedCall] = []
        """Every `run_turn` request, in order."""
        self.commits: list[int] = []
        """KV length at each `commit` call (including no-op commits of non-model messages)."""
        self.rollbacks: list[tuple[int, int]] = []
        """(KV length before, KV length after) for each `rollback`."""
        self.kv: list[str] = []
        """The fake KV: one character per token."""
        self.prepared: list[tuple[tuple[str, ...], tuple[ToolChoice, ...], str | None]] = []
        """(tool names, tool choices, final pattern) of each `prepare` call."""
        self._committed = 0
        self._pending = False

    def prepare(self, tools: Sequence[ToolSpec], tool_choices: Sequence[ToolChoice],
                final_pattern: str | None = None, parallel_calls: bool = False) -> None:
        """Record what the session asked to precompile (a scripted engine has no grammars)."""
        self.prepared.append((tuple(t.name for t in tools), tuple(tool_choices), final_pattern))

    def run_turn(self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[ToolSpec],
                 tool_choice: ToolChoice = "auto", max_tokens: int, cancel: CancelSignal | None = None,
                 on_text: Callable[[str], None] | None = None, final_pattern: str | None = None,
                 parallel_calls: bool = False, on_prompt: Callable[[str], None] | None = None) -> ModelTurn:
        """Replay the next turn against ``messages``. See `agent.engine.TurnEngine.run_turn`."""
        if self._pending:
            self.rollback()
        msgs = copy.deepcopy([dict(m) for m in messages])
        prompt = self.codec.render(msgs, prompt_tools(tools, tool_choice) or None, add_generation_prompt=True)
        if on_prompt is not None:
            on_prompt(prompt)
        self.calls.append(ScriptedCall(messages=msgs, tools=tuple(tools), tool_choice=tool_choice,
                                       max_tokens=max_tokens, prompt=prompt, final_pattern=final_pattern,
                                       parallel_calls=parallel_calls))
        index = len(self.calls) - 1
        if index >= len(self.turns):
            raise ScriptExhaustedError(len(self.turns))
        turn = self.turns[index]
        if not isinstance(turn, ScriptedTurn):
            turn = ScriptedTurn(text=turn)
        if turn.error is not None:
            raise turn.error
        reused = 0
        while reused < min(len(self.kv), len(prompt) - 1) and self.kv[reused] == prompt[reused]:
            reused += 1
        self.kv[reused:] = list(prompt[reused:])
        self._committed = len(self.kv)
        self._pending = True
        text = turn.text(copy.deepcopy(msgs)) if callable(turn.text) else turn.text
        trip_at = turn.trip_at if turn.trip_at is not None else len(text) // 2
        generated: list[str] = []
        finish = FinishReason(turn.finish_reason or FinishReason.STOP_TOKEN)
        for i, ch in enumerate(text):
            if turn.trip is not None and i == trip_at:
                turn.trip.cancel("scripted cancel during generation")
            if cancel is not None and cancel.is_set():
                finish = FinishReason.CANCELLED
                break
            if len(generated) == max_tokens:
                finish = FinishReason.LENGTH
                break
            generated.append(ch)
            self.kv.append(ch)
            if on_text is not None:
                on_text(ch)
        constrained = tool_choice != "auto" or any(t.constrained for t in tools)
        return ModelTurn(text="".join(generated), n_prompt_tokens=len(prompt), n_output_tokens=len(generated),
                         finish_reason=finish, constrained=constrained, seconds=0.0, n_reused_tokens=reused)

    def commit(self) -> None:
        """The speculative turn becomes committed; recorded in `commits` either way."""
        if self._pending:
            self._committed = len(self.kv)
            self._pending = False
        self.commits.append(len(self.kv))

    def rollback(self) -> None:
        """Truncate the fake KV to the committed boundary."""
        before = len(self.kv)
        del self.kv[self._committed:]
        self._pending = False
        self.rollbacks.append((before, len(self.kv)))

    @property
    def committed_tokens(self) -> int:
        return self._committed

    @property
    def kv_tokens(self) -> int:
        """Current length of the fake KV (committed + speculative)."""
        return len(self.kv)

    @property
    def has_pending_turn(self) -> bool:
        """Whether a generated turn awaits commit or rollback."""
        return self._pending

    def identity(self) -> dict[str, Any]:
        return {"engine": type(self).__name__, "model_path": None, "model_sha256": None,
                "vocabulary_fingerprint": None, "codec_id": self.codec.id, "n_turns": len(self.turns)}


# -- what a model of a codec's family writes ----------------------------------------------------------------------

def model_text(codec: Codec, action: Action) -> str:
    """What a model of ``codec``'s family generates for ``action``: the codec's own rendering of the assistant turn,
    cut out of a conversation rendered with and without it (stop token excluded, as the engine reports it)."""
    base = [{"role": "user", "content": "u"}]
    prompt = codec.render(base, add_generation_prompt=True)
    full = codec.render([*base, codec.assistant_message(action)], add_generation_prompt=False)
    assert full.startswith(prompt), "the codec renders history differently from a prompt"
    turn = full[len(prompt):]
    for stop in codec.stop_token_names:
        if stop in turn:
            return turn[: turn.rindex(stop)]
    return turn


def call_text(codec: Codec, name: str, /, **arguments: Any) -> str:
    """`model_text` of one call."""
    return model_text(codec, ToolCalls(calls=(ToolCall(name=name, arguments=arguments, raw=""),)))


def final_text(codec: Codec, text: str) -> str:
    """`model_text` of a final answer."""
    return model_text(codec, FinalText(text=text))
