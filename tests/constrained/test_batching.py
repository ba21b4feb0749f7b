"""Several sequences in one llama_batch per step (SmolLM2): each with its own matcher, budget, forced runs, stops and
cancel; one sequence's failure never reaches another's; a shared prefix evaluated once.

Exactness: a slot decoding alone is token-identical to `decode` on a lone `LlamaModel`. Together, a row of a bigger
batch differs from a lone row in the last bits (llama.cpp's CPU kernels), so results of different batch layouts are
compared only for validity; results of the same layout (what another sequence holds differs, not how many tokens
it has in each step) are compared exactly.
"""

from __future__ import annotations

import json
import threading

import jsonschema
import llama_cpp
import pytest

from constrained import BatchDecodeError, BatchedModel, FinishReason, decode
from constrained.errors import MaskError
from constrained.grammar import compile_json_schema, compile_regex
from constrained.llama import ContextOverflowError, LlamaModel, ModelStateError

pytestmark = pytest.mark.model

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def batch(smollm2_path):
    with BatchedModel.load(smollm2_path, n_slots=3, n_ctx=512, n_threads=1) as batched:
        yield batched


@pytest.fixture
def slots(batch):
    for slot in batch.slots:
        slot.rollback(0)
    return batch.slots


def chat(model, question: str) -> list[int]:
    return model.tokenize(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n", special=True)


def positions(batch: BatchedModel, seq_id: int) -> tuple[int, int]:
    """The first and last position llama.cpp's KV holds for a sequence ((-1, -1) when it holds none)."""
    return (llama_cpp.llama_memory_seq_pos_min(batch.memory, seq_id),
            llama_cpp.llama_memory_seq_pos_max(batch.memory, seq_id))


# -- each sequence is its own ------------------------------------------------------------------------------------


def test_a_slot_decoding_alone_is_token_identical_to_decode_on_a_lone_model(slots, smollm2_path):
    grammar = compile_json_schema(PERSON, slots[0].vocabulary)
    lone = LlamaModel.load(smollm2_path, n_ctx=512, n_threads=1)
    try:
        for question, matcher in (("Who wrote Hamlet?", None), ("Invent a person.", grammar.matcher(40))):
            in_batch = decode(slots[0], chat(slots[0], question), max_tokens=24, forced_batching=matcher is not None,
                              matcher=matcher)
            lone.rollback(0)
            alone = decode(lone, chat(lone, question), max_tokens=24, forced_batching=matcher is not None,
                           matcher=grammar.matcher(40) if matcher is not None else None)
            assert in_batch.tokens == alone.tokens and in_batch.finish_reason == alone.finish_reason
            slots[0].rollback(0)
    finally:
        lone.close()


def test_slots_decode_together_each_held_to_its_own_grammar_budget_and_stops(batch, slots):
    person = compile_json_schema(PERSON, slots[0].vocabulary)
    answer = compile_regex("(yes|no|maybe)", slots[0].vocabulary)
    needed = person.index.needed_budget(person.dfa.initial)
    steps_before = batch.steps
    with batch.lock:  # all three join the same first step
        futures = [slots[0].submit(chat(slots[0], "Describe a person with a very long name as JSON."),
                                   matcher=person.matcher(needed + 2), max_tokens=needed + 2,
                                   forced_batching=True),
                   slots[1].submit(chat(slots[1], "Is the sky blue?"), matcher=answer.matcher(8), max_tokens=8),
                   slots[2].submit(chat(slots[2], "Count to twenty."), max_tokens=12)]
    tight, short, free = (future.result(timeout=120) for future in futures)
    jsonschema.validate(json.loads(tight.text), PERSON)
    assert tight.timings.n_forced >= 4 and len(tight.tokens) <= needed + 2
    assert short.text in (b"yes", b"no", b"maybe")
    assert free.finish_reason == FinishReason.LENGTH and len(free.tokens) == 12
    longest = max(r.timings.n_evals for r in (tight, short, free))
    assert batch.steps - steps_before <= longest + 1  # one step advanced all three (not one after another)


def test_decode_on_slots_from_several_threads_is_one_batch_and_each_gets_its_own_result(slots):
    grammar = compile_json_schema(PERSON, slots[0].vocabulary)
    results: dict[int, object] = {}
    prompts = [chat(slot, f"Invent person number {i}.") for i, slot in enumerate(slots)]

    def run(i: int) -> None:
        results[i] = decode(slots[i], prompts[i], matcher=grammar.matcher(40), max_tokens=40, forced_batching=True)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for i in range(3):
        jsonschema.validate(json.loads(results[i].text), PERSON)
        assert slots[i].tokens[: len(prompts[i])] == prompts[i]  # its own prompt, in its own sequence


def test_a_sequence_does_not_depend_on_what_another_slot_holds(slots):
    """Same layout (B's prompts have the same length, B generates the same number of tokens), different content:
    A's tokens are bit-identical."""
    grammar = compile_json_schema(PERSON, slots[0].vocabulary)
    others = [chat(slots[1], "Tell me about cats."), chat(slots[1], "Tell me about dogs.")]
    assert len(others[0]) == len(others[1]) and others[0] != others[1]
    runs = []
    for other in others:
        slots[0].rollback(0)
        slots[1].rollback(0)
        with slots[0].batch.lock:  # both join the same first step: the same layout in both runs
            a = slots[0].submit(chat(slots[0], "Invent a person."), matcher=grammar.matcher(40), max_tokens=40)
            b = slots[1].submit(other, max_tokens=8)
        runs.append((a.result(timeout=120), b.result(timeout=120)))
    assert runs[0][1].tokens != runs[1][1].tokens and all(len(b.tokens) == 8 for _, b in runs)
    assert runs[0][0].tokens == runs[1][0].tokens


def test_a_cancelled_sequence_stops_and_the_others_finish(slots):
    cancel = threading.Event()
    seen: list[int] = []

    def on_token(token: int, piece: bytes) -> None:
        seen.append(token)
        if len(seen) == 3:
            cancel.set()

    cancelled = slots[0].submit(chat(slots[0], "Write a long story."), max_tokens=40, on_token=on_token, cancel=cancel)
    other = slots[1].submit(chat(slots[1], "Write a long story."), max_tokens=20)
    assert cancelled.result(timeout=120).finish_reason == FinishReason.CANCELLED and len(seen) == 3
    assert other.result(timeout=120).finish_reason == FinishReason.LENGTH


def test_a_mask_error_fails_only_its_own_sequence(slots):
    class Refusing:
        def is_terminated(self) -> bool:
            return False

        def apply_mask(self, logits) -> None:
            pass

        def advance(self, token_id: int) -> bool:
            return False

    failing = slots[0].submit(chat(slots[0], "Hi"), matcher=Refusing(), max_tokens=5)
    other = slots[1].submit(chat(slots[1], "Hi"), max_tokens=6)
    with pytest.raises(MaskError):
        failing.result(timeout=120)
    assert len(other.result(timeout=120).tokens) == 6
    assert not slots[0].is_generating


def test_a_slot_runs_one_generation_at_a_time_and_refuses_a_prompt_past_its_window(slots):
    # The running generation waits in its first token's callback until the second submit has been tried, so the
    # slot is busy however fast the batch thread is.
    tried = threading.Event()
    running = slots[0].submit(chat(slots[0], "Write a long story."), max_tokens=10,
                              on_token=lambda token_id, piece: tried.wait(120))
    try:
        with pytest.raises(ModelStateError):
            slots[0].submit([1, 2], max_tokens=1)
    finally:
        tried.set()
    running.result(timeout=120)
    with pytest.raises(ContextOverflowError):
        slots[1].submit([1] * 600, max_tokens=1)


# -- one sequence's failure never reaches another ----------------------------------------------------------------


class _FailingDecode:
    """``llama_decode`` as llama.cpp's, except that from the ``fail_at``-th call holding sequence ``seq_id`` on, it fails:
    ``-1`` before touching the KV (an invalid batch), or ``-3`` after evaluating the batch (a fatal error that
    leaves the processed ubatches in the KV). With ``cancel``, that call goes through and ``cancel`` is set, so
    the sequence stops at the same point instead of failing."""

    def __init__(self, seq_id: int, fail_at: int, code: int, cancel: threading.Event | None = None) -> None:
        self.real = llama_cpp.llama_decode
        self.seq_id, self.fail_at, self.code, self.cancel = seq_id, fail_at, code, cancel
        self.calls = 0

    def __call__(self, ctx, batch):
        if not any(batch.seq_id[i][0] == self.seq_id for i in range(batch.n_tokens)):
            return self.real(ctx, batch)
        self.calls += 1
        if self.calls == self.fail_at - 1 and self.cancel is not None:
            code = self.real(ctx, batch)
            self.cancel.set()
            return code
        if self.calls < self.fail_at or self.cancel is not None:
            return self.real(ctx, batch)
        if self.code == -1:
            return -1
        self.real(ctx, batch)
        return self.code


@pytest.mark.parametrize("code", [-1, -3], ids=["invalid-batch", "fatal-after-evaluating"])
def test_a_failed_decode_fails_only_its_sequence_and_the_others_go_on_unchanged(batch, slots, monkeypatch, code):
    """A's tokens when B's decode fails at B's 4th step equal A's tokens when B is cancelled at that step: the
    failed batch was taken back out of the KV and A evaluated as if B had left."""
    grammar = compile_json_schema(PERSON, slots[0].vocabulary)
    prompt_a, prompt_b = chat(slots[0], "Invent a person."), chat(slots[1], "Write a long story.")

    def run(fault: _FailingDecode, cancel: threading.Event | None):
        for slot in slots:
            slot.rollback(0)
        monkeypatch.setattr(llama_cpp, "llama_decode", fault)
        try:
            with batch.lock:  # both join the same first step: the same layout in both runs
                a = slots[0].submit(prompt_a, matcher=grammar.matcher(40), max_tokens=40)
                b = slots[1].submit(prompt_b, max_tokens=30, cancel=cancel)
            return a.result(timeout=120), b
        finally:
            monkeypatch.setattr(llama_cpp, "llama_decode", fault.real)

    failed_before = batch.failed_decodes
    a_failed, b_failed = run(_FailingDecode(slots[1].seq_id, 4, code), None)
    with pytest.raises(BatchDecodeError) as caught:
        b_failed.result(timeout=120)
    assert caught.value.code == code and caught.value.seq_id == slots[1].seq_id
    assert batch.failed_decodes == failed_before + 1
    n_b = slots[1].n_past
    assert n_b == len(prompt_b) + 2 and positions(batch, slots[1].seq_id) == (0, n_b - 1)  # its failed step undone
    assert positions(batch, slots[0].seq_id) == (0, slots[0].n_past - 1)
    cancel = threading.Event()
    a_cancelled, b_cancelled = run(_FailingDecode(slots[1].seq_id, 4, code, cancel), cancel)
    assert b_cancelled.result(timeout=120).finish_reason == FinishReason.CANCELLED
    assert a_failed.tokens == a_cancelled.tokens
    jsonschema.validate(json.loads(a_failed.text), PERSON)
    again = slots[1].submit(chat(slots[1], "Hi"), max_tokens=4).result(timeout=120)  # the slot serves on
    assert len(again.tokens) == 4


# -- a shared prefix, evaluated once -----------------------------------------------------------------------------


class _CountingStore:
    """A prefix store that has nothing and counts what it is asked to save."""

    def __init__(self) -> None:
        self.saved: list[int] = []

    def restore(self, model, prompt, prefix_len) -> bool:
        return False

    def save(self, model, prompt, prefix_len) -> bool:
        self.saved.append(prefix_len)
        return True


def test_a_prefix_shared_by_several_slots_is_evaluated_once_and_its_cells_shared(batch, slots):
    system = "<|im_start|>system\n" + "You answer in JSON about people and their ages. " * 6 + "<|im_end|>\n"
    prefix = slots[0].tokenize(system, special=True)
    assert len(prefix) >= batch.min_shared_tokens
    store = _CountingStore()
    shared: dict[int, int] = {}
    evaluated_before = batch.prefixes_evaluated
    threads = [threading.Thread(target=lambda s=slot: shared.__setitem__(s.seq_id, s.share_prefix(prefix, store)))
               for slot in slots]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert store.saved == [len(prefix)]  # one evaluation, by the first slot that asked
    assert batch.prefixes_evaluated == evaluated_before + 1
    assert {share.n_tokens for share in shared.values()} == {len(prefix)}
    assert sorted(share.evaluated for share in shared.values()) == [False, False, True]
    grammar = compile_json_schema(PERSON, slots[0].vocabulary)
    futures = []
    for i, slot in enumerate(slots):
        assert slot.tokens == prefix and positions(batch, slot.seq_id) == (0, len(prefix) - 1)
        prompt = prefix + chat(slot, f"Invent person {i}.")
        futures.append(slot.submit(slot.reuse_prefix(prompt), matcher=grammar.matcher(40), max_tokens=40,
                                   forced_batching=True))
    for future in futures:
        jsonschema.validate(json.loads(future.result(timeout=120).text), PERSON)
    assert slots[0].share_prefix(prefix[:10], store).n_tokens == 0  # too short to be worth a holder
    again = slots[0].share_prefix(prefix, store)  # its own KV has it
    assert (again.n_tokens, again.evaluated, store.saved) == (len(prefix), False, [len(prefix)])


def test_a_prefix_saved_by_one_batch_is_loaded_by_the_next(tmp_path, smollm2_path):
    from agent.serve.prefix_cache import PrefixCache

    text = "<|im_start|>system\n" + "Facts about the solar system follow. " * 8 + "<|im_end|>\n"
    answers = []
    for _ in range(2):
        with BatchedModel.load(smollm2_path, n_slots=2, n_ctx=512, n_threads=1) as batched:
            cache = PrefixCache(tmp_path, model_sha256=batched.model.sha256, min_tokens=8)
            slot = batched.slots[1]
            prefix = slot.tokenize(text, special=True)
            assert slot.share_prefix(prefix, cache).n_tokens == len(prefix)
            prompt = prefix + chat(slot, "Which planet is largest?")
            answers.append(decode(slot, slot.reuse_prefix(prompt), max_tokens=8).tokens)
            counts = (cache.saved, cache.restored)
        assert counts == ((1, 0) if len(answers) == 1 else (0, 1))
    assert answers[0] == answers[1]  # the loaded cells are the evaluated ones


# -- generate ---------------------------------------------------------------------------------------------------


def test_generate_on_a_batch_decodes_its_documents_together_and_on_slots_from_threads(batch, slots):
    from constrained import generate

    messages = [{"role": "user", "content": "Invent a person."}]
    steps_before = batch.steps
    people = generate(batch, PERSON, messages=messages, n=3, temperature=0.9, seed=5, max_tokens=40)
    assert len(people) == 3
    for person in people:
        jsonschema.validate(person, PERSON)
    assert batch.steps - steps_before < 3 * 8  # together: fewer steps than three documents one after another
    found: dict[int, object] = {}
    threads = [threading.Thread(target=lambda s=slot: found.__setitem__(s.seq_id, generate(
        s, PERSON, messages=messages, max_tokens=40))) for slot in slots[:2]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for [person] in found.values():
        jsonschema.validate(person, PERSON)
