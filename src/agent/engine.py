"""A model turn as a transaction over the decode loop: render → reuse KV prefix → decode → commit | rollback.

Owns: `TurnEngine` (the seam the session talks to), `ModelTurn` (what one turn produced), `ChatModelEngine`
(the real engine over `constrained.llama.LlamaModel`), `EngineError` / `ContextWindowError`. Refuses: tool
syntax (the codec renders and supplies the grammar), parsing, and any idea of what a tool call *means*.

    committed messages ──codec.render_segments──► [Segment] ──tokenize──► prompt ids
        trusted segments: special=True; untrusted (user text, tool results): tokenize_untrusted
    a slot of a BatchedModel: the system + tools prefix ──slot.share_prefix──► evaluated once for every slot
    model.tokens ∩ prompt ──longest common prefix──► model.rollback(prefix)  (KV reuse)
    decode(rest of prompt, matcher?, max_tokens, stop = codec stops + EOG, cancel) ──► ModelTurn  (speculative)
        commit()   : the turn's tokens become the committed boundary
        rollback() : KV truncated to the committed boundary (the last prompt, which renders committed messages)

The generated turn is speculative until `commit`. The prompt is not: it is a rendering of messages the session
already committed, so a rollback keeps it and the next turn reuses it. The tool-call grammar is compiled once per
(tool specs, tool_choice) and only used when a tool is ``constrained`` or ``tool_choice`` is not ``"auto"``;
otherwise decoding is free and the codec's parser is the only judge of the turn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agent.errors import AgentError
from agent.protocol.base import Codec, ProtocolError, Segment, ToolChoice, ToolSpec
from constrained import (CancelSignal, CompiledGrammar, FinishReason, PrefixStore, RulePattern, SamplingParams, Slot,
                         compile_assembled, decode)
from constrained.errors import ConstrainedError

if TYPE_CHECKING:
    from constrained import LlamaModel, Vocabulary

__all__ = ["MODEL_FAILURES", "ChatModelEngine", "ContextWindowError", "EngineError", "ModelTurn", "TurnEngine",
           "callable_tools", "prompt_tools"]


class EngineError(AgentError):
    """Base of the errors an engine raises; the session ends the run ``failed`` with the message."""


class ContextWindowError(EngineError):
    """The prompt plus the turn's token budget does not fit the model's context window (checked before any
    evaluation, so a turn is never silently cut by a full context and mistaken for the output-token limit)."""

    def __init__(self, n_prompt_tokens: int, max_tokens: int, n_ctx: int) -> None:
        self.n_prompt_tokens = n_prompt_tokens
        self.max_tokens = max_tokens
        self.n_ctx = n_ctx
        super().__init__(f"prompt of {n_prompt_tokens} tokens + max_tokens {max_tokens} exceeds the context "
                         f"window of {n_ctx} tokens; lower limits.max_output_tokens or load with a larger n_ctx")


MODEL_FAILURES: tuple[type[Exception], ...] = (EngineError, ConstrainedError, RuntimeError)
"""What a model turn raises when the model, not our code, failed: `EngineError` (the context window, a scripted
engine's end), `ConstrainedError` (the decode loop: context overflow, model state, a mask that cannot hold) and
``RuntimeError`` (what llama-cpp-python raises when ``llama_decode`` fails). The session ends such a run
``failed``; anything else is a bug and propagates."""


@dataclass(frozen=True, kw_only=True)
class ModelTurn:
    """What one model turn produced. Speculative until the engine is told to commit."""

    text: str
    """The generated assistant text, stop token excluded (invalid UTF-8 from a cut turn is replaced)."""
    n_prompt_tokens: int
    """Tokens in the rendered prompt (reused + newly evaluated)."""
    n_output_tokens: int
    """Tokens generated in this turn."""
    finish_reason: FinishReason
    """Why generation stopped: ``eos``, ``stop_token``, ``length``, ``grammar_complete`` or ``cancelled`` (a
    ``StrEnum``: it compares equal to, and is written as, those strings)."""
    constrained: bool
    """Whether the tool-call grammar masked this turn."""
    seconds: float
    """Wall seconds of the whole turn (render, prompt eval, decode)."""
    n_reused_tokens: int = 0
    """Prompt tokens whose KV was reused from the previous turn instead of evaluated again."""
    timings: Mapping[str, float] | None = None
    """Optional breakdown in milliseconds from the decode loop (prompt eval, per-token...)."""


@runtime_checkable
class TurnEngine(Protocol):
    """The session's only view of a model: one turn at a time, with commit / rollback of the generated turn."""

    codec: Codec
    """The codec whose syntax the engine renders and constrains (the session parses with the same one)."""

    def run_turn(self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[ToolSpec],
                 tool_choice: ToolChoice, max_tokens: int, cancel: CancelSignal | None = None,
                 on_text: Callable[[str], None] | None = None, final_pattern: str | None = None,
                 parallel_calls: bool = False, on_prompt: Callable[[str], None] | None = None) -> ModelTurn:
        """Generate one assistant turn against the committed ``messages``; the turn stays speculative.

        ``cancel`` is a `CancelSignal` (only ``is_set()`` is read); a tripped cancel ends the turn with
        finish_reason ``cancelled``. ``on_text`` receives decoded text pieces as they are generated (streaming).
        ``on_prompt``, when given, receives the rendered prompt text once, after rendering and before anything is
        evaluated (the session traces it from there instead of rendering it a second time).
        ``final_pattern``, when given, is the pattern any final-answer text of the turn must match.
        ``parallel_calls`` lets the turn's grammar hold several calls (`Codec.tool_call_grammar`)."""
        ...

    def prepare(self, tools: Sequence[ToolSpec], tool_choices: Sequence[ToolChoice],
                final_pattern: str | None = None, parallel_calls: bool = False) -> None:
        """Compile whatever the given tool choices will need (tool-call grammars), so registration fails early on
        an unsupported schema and the first turn pays no compile."""
        ...

    def commit(self) -> None:
        """Make the speculative turn, if any, part of the committed state (no-op when none is pending)."""
        ...

    def rollback(self) -> None:
        """Discard the speculative turn: truncate the KV to the last committed boundary."""
        ...

    @property
    def committed_tokens(self) -> int:
        """Tokens of KV state that belong to committed history."""
        ...

    def identity(self) -> dict[str, Any]:
        """What pins this engine's behaviour, for the trace's provenance event (model, vocabulary, codec...)."""
        ...


def prompt_tools(tools: Sequence[ToolSpec], tool_choice: ToolChoice) -> list[ToolSpec]:
    """The tools a turn's prompt offers: none under ``tool_choice="none"``. Shown tools it may not call, a small
    model writes its call as prose anyway (measured: a JSON call object in a code block), so a turn that must
    answer sees no tool definitions; the history, calls and results included, renders as before."""
    return [] if tool_choice == "none" else list(tools)


def _spec_key(tools: Sequence[ToolSpec], tool_choice: ToolChoice) -> str:
    return json.dumps([[t.name, t.description, t.parameters, t.constrained, t.constraint] for t in tools]
                      + [tool_choice], sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def callable_tools(tools: Sequence[ToolSpec], tool_choice: ToolChoice) -> list[ToolSpec]:
    """The tools a turn's grammar may call: all but those whose turn constraint is False (no grounded value yet),
    unless the choice names one (then it stays, held by its declared schema, and validation speaks)."""
    return [t for t in tools if t.constraint is not False or t.name == tool_choice]


_MAX_GRAMMARS = 64
"""Compiled turn grammars an engine keeps (most recent); per-turn constraints (dynamic enums) make new ones."""


class ChatModelEngine:
    """The real `TurnEngine`: a `LlamaModel`, a codec and sampling parameters, with KV prefix reuse."""

    def __init__(self, model: LlamaModel | Slot, codec: Codec, *, sampling: SamplingParams | None = None,
                 forced_batching: bool = True, prefix_store: PrefixStore | None = None) -> None:
        self.model = model
        """The loaded model (the one narrow wrapper over llama.cpp), or one slot of a `constrained.BatchedModel`:
        then its turns are decoded in the batch, with the other slots' turns."""
        self.codec = codec
        self.sampling = sampling if sampling is not None else SamplingParams()
        """Sampling for every turn (greedy by default)."""
        self.forced_batching = forced_batching
        """Constrained turns append grammar-forced runs (the call envelope) without sampling each token."""
        self.prefix_store = prefix_store
        """On a slot: where the shared system + tools prefixes are loaded from and saved to (the disk prefix cache
        of ``ember serve``); None keeps them in the batch only."""
        self._committed = 0
        self._prefix_lengths: dict[str, int] = {}
        self._pending = False
        self._grammars: dict[str, CompiledGrammar] = {}
        vocab = model.vocabulary
        missing = [n for n in codec.stop_token_names if n not in vocab.special_ids_by_name]
        if missing:
            raise EngineError(f"codec {codec.id} stops on {missing}, which the vocabulary "
                              f"{vocab.name or '?'} does not have as special tokens")
        self._stop_ids = tuple(sorted({vocab.special_ids_by_name[n] for n in codec.stop_token_names}
                                      | set(vocab.eos_token_ids)))

    # -- the transaction ---------------------------------------------------------------------------------------

    def run_turn(self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[ToolSpec],
                 tool_choice: ToolChoice = "auto", max_tokens: int, cancel: CancelSignal | None = None,
                 on_text: Callable[[str], None] | None = None, final_pattern: str | None = None,
                 parallel_calls: bool = False, on_prompt: Callable[[str], None] | None = None) -> ModelTurn:
        """Render, reuse the KV prefix, decode one speculative turn. See `TurnEngine.run_turn`.

        Raises:
            ContextWindowError: the prompt plus ``max_tokens`` does not fit ``model.n_ctx``.
        """
        started = time.perf_counter()
        if self._pending:  # an uncommitted turn is still in the KV: it was never accepted
            self.rollback()
        segments = self._segments(messages, prompt_tools(tools, tool_choice))
        if on_prompt is not None:
            on_prompt("".join(segment.text for segment in segments))
        prompt = self._tokens(segments)
        if len(prompt) + max_tokens > self.model.n_ctx:
            raise ContextWindowError(len(prompt), max_tokens, self.model.n_ctx)
        evaluated = self._share_prefix(messages, prompt_tools(tools, tool_choice), prompt)
        rest = self.model.reuse_prefix(prompt)  # KV reuse: keeps the common prefix, ≥ 1 token left to evaluate
        reused = len(prompt) - len(rest) - evaluated
        self._committed = len(prompt)
        self._pending = True
        grammar = self._grammar(tools, tool_choice, final_pattern, parallel_calls)
        on_token = None
        if on_text is not None:
            on_token = _TextStream(on_text).on_token
        result = decode(self.model, rest,
                        matcher=grammar.matcher(max_tokens=max_tokens) if grammar is not None else None,
                        max_tokens=max_tokens, sampling=self.sampling, stop_token_ids=self._stop_ids,
                        forced_batching=self.forced_batching and grammar is not None, on_token=on_token,
                        cancel=cancel)
        timings = asdict(result.timings) if is_dataclass(result.timings) else result.timings
        return ModelTurn(text=bytes(result.text).decode("utf-8", errors="replace"), n_prompt_tokens=len(prompt),
                         n_output_tokens=len(result.tokens), finish_reason=FinishReason(result.finish_reason),
                         constrained=grammar is not None, seconds=time.perf_counter() - started,
                         n_reused_tokens=reused, timings=dict(timings) if isinstance(timings, Mapping) else None)

    def commit(self) -> None:
        """The speculative turn (now in the KV) becomes committed history."""
        if self._pending:
            self._committed = self.model.n_past
            self._pending = False

    def rollback(self) -> None:
        """Truncate the KV to the committed boundary; the prompt (committed messages) is kept for reuse."""
        self.model.rollback(min(self._committed, self.model.n_past))
        self._pending = False

    @property
    def committed_tokens(self) -> int:
        return self._committed

    def identity(self) -> dict[str, Any]:
        """Model path and sha256, vocabulary fingerprint and size, codec id, context size, sampling."""
        sampling = self.sampling
        return {"engine": type(self).__name__, "model_path": str(self.model.path),
                "model_sha256": self.model.sha256, "vocabulary_fingerprint": self.model.vocabulary.fingerprint,
                "vocabulary_size": len(self.model.vocabulary), "codec_id": self.codec.id,
                "n_ctx": self.model.n_ctx,
                "sampling": asdict(sampling) if is_dataclass(sampling) else repr(sampling)}

    # -- pieces ------------------------------------------------------------------------------------------------

    def prompt_tokens(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec]) -> list[int]:
        """The prompt for the next turn: trusted template text may hold special tokens, untrusted text never."""
        return self._tokens(self._segments(messages, tools))

    def shared_prefix_length(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec],
                             prompt: Sequence[int]) -> int:
        """Leading prompt tokens that every conversation with these system messages and tools renders the same (what
        an empty first user turn shares with the prompt): the prefix worth keeping for other requests."""
        lead = []
        for message in messages:
            if message["role"] != "system":
                break
            lead.append(dict(message))
        key = json.dumps(lead, sort_keys=True, ensure_ascii=False) + _spec_key(tools, "auto")
        length = self._prefix_lengths.get(key)
        if length is None:
            try:
                probe = self.prompt_tokens([*lead, {"role": "user", "content": ""}], tools)
            except ProtocolError:
                return 0
            length = 0
            while length < min(len(probe), len(prompt)) and probe[length] == prompt[length]:
                length += 1
            if len(self._prefix_lengths) >= _MAX_GRAMMARS:
                self._prefix_lengths.clear()
            self._prefix_lengths[key] = length
        return min(length, len(prompt))

    def _share_prefix(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec],
                      prompt: Sequence[int]) -> int:
        """On a slot, start its KV with the shared prefix (evaluated once for the batch); the tokens this call
        evaluated for it (not reused)."""
        if not isinstance(self.model, Slot):
            return 0
        share = self.model.share_prefix(prompt[: self.shared_prefix_length(messages, tools, prompt)],
                                        self.prefix_store)
        return share.n_tokens if share.evaluated else 0

    def _segments(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec]) -> list[Segment]:
        return self.codec.render_segments([dict(m) for m in messages], list(tools) or None,
                                          add_generation_prompt=True)

    def _tokens(self, segments: Sequence[Segment]) -> list[int]:
        ids: list[int] = []
        for segment in segments:
            if not segment.text:
                continue
            if segment.trusted:
                ids.extend(self.model.tokenize(segment.text, add_bos=False, special=True))
            else:
                ids.extend(self.model.tokenize_untrusted(segment.text))
        return ids

    def prepare(self, tools: Sequence[ToolSpec], tool_choices: Sequence[ToolChoice],
                final_pattern: str | None = None, parallel_calls: bool = False) -> None:
        """Compile (or load from the disk cache) the tool-call grammar of every choice. See `TurnEngine.prepare`."""
        for choice in dict.fromkeys(tool_choices):
            self._grammar(tools, choice, final_pattern, parallel_calls)

    def _grammar(self, tools: Sequence[ToolSpec], tool_choice: ToolChoice, final_pattern: str | None = None,
                 parallel_calls: bool = False) -> CompiledGrammar | None:
        """The compiled tool-call grammar, or None when decoding is free (no constrained tool, choice auto, no
        final-answer pattern)."""
        tools = callable_tools(tools, tool_choice)
        if tool_choice == "auto" and final_pattern is None and not any(t.constrained for t in tools):
            return None
        key = _spec_key(tools, tool_choice) + f"|{parallel_calls}|" + (final_pattern or "")
        grammar = self._grammars.pop(key, None)
        if grammar is None:
            grammar = tool_call_grammar(self.codec, list(tools), tool_choice, self.model.vocabulary,
                                        parallel_calls=parallel_calls, final_pattern=final_pattern)
            while len(self._grammars) >= _MAX_GRAMMARS:
                del self._grammars[next(iter(self._grammars))]
        self._grammars[key] = grammar  # most recently used last
        return grammar


def tool_call_grammar(codec: Codec, tools: list[ToolSpec], tool_choice: ToolChoice, vocab: Vocabulary, *,
                      parallel_calls: bool = False, final_pattern: str | None = None) -> CompiledGrammar:
    """The codec's turn grammar compiled over ``vocab``: one DFA when it fits, else (many or big tools, or a final
    pattern that calls rules: a `RulePattern` of a recursive or big answer schema) a pushdown grammar whose rules
    are the tools' arguments and the answer's, called from the same turn pattern."""
    def turn(rules: dict[str, str] | None) -> str:
        return codec.tool_call_grammar(tools, tool_choice, parallel_calls=parallel_calls, final_pattern=final_pattern,
                                       rules=rules)  # fmt: skip

    answer_rules = final_pattern.rules if isinstance(final_pattern, RulePattern) else None
    return compile_assembled(turn, vocab, rules=answer_rules, allow_special=True)


class _TextStream:
    """Turns generated token ids into text pieces, holding back bytes of an unfinished UTF-8 character."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        import codecs

        self._sink = sink
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def on_token(self, token_id: int, piece_bytes: bytes) -> None:
        piece = self._decoder.decode(piece_bytes)
        if piece:
            self._sink(piece)
