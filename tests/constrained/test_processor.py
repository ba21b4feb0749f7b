"""LogitsProcessor: follows a llama-cpp-python generation by prompt length, masks every step, fails loud."""

from __future__ import annotations

import inspect
import json
import re

import numpy as np
import pytest
from tests.constrained.dfa_reference import make_dfa

from constrained.errors import BudgetTooSmallError, MaskError
from constrained.fsm import DEAD
from constrained.grammar import Grammar, compile_regex
from constrained.index import TokenIndex
from constrained.processor import DEFAULT_BUDGET, LLAMA_CPP_DEFAULT_MAX_TOKENS, LogitsProcessor
from constrained.vocabulary import Vocabulary


@pytest.fixture
def ab_grammar() -> Grammar:
    """Language ``a b*`` over tokens a, b, ab, plus EOS and an unnamed special."""
    vocab = Vocabulary.from_tokens(
        [b"a", b"b", b"ab", b"</s>", b"<s>"], eos_token_ids=[3], special_ids_by_name={"</s>": 3, "<s>": 4}
    )
    table = np.full((2, 256), DEAD, dtype=np.int32)
    table[0, ord("a")] = 1
    table[1, ord("b")] = 1
    dfa = make_dfa(table, np.asarray([False, True]))
    return Grammar(pattern="ab*", allow_special=False, dfa=dfa, vocabulary=vocab, index=TokenIndex(dfa, vocab),
                   fingerprint=dfa.fingerprint)  # fmt: skip


def finite_ids(scores: np.ndarray) -> list[int]:
    return np.flatnonzero(np.isfinite(scores)).tolist()


def test_first_call_treats_all_ids_as_prompt_and_masks(ab_grammar):
    processor = LogitsProcessor(ab_grammar)
    prompt = np.asarray([4, 1, 1, 0], dtype=np.intc)  # the prompt may contain anything, even "disallowed" ids
    scores = processor(prompt, np.zeros(5, dtype=np.float32))
    assert finite_ids(scores) == [0, 2]
    scores = processor(np.append(prompt, 2).astype(np.intc), np.zeros(5, dtype=np.float32))
    assert processor.generated_ids == (2,)
    assert finite_ids(scores) == [1, 3]


def test_several_new_ids_in_one_call_are_all_followed(ab_grammar):
    processor = LogitsProcessor(ab_grammar)
    processor(np.asarray([4], dtype=np.intc), np.zeros(5, dtype=np.float32))
    processor(np.asarray([4, 0, 1, 1], dtype=np.intc), np.zeros(5, dtype=np.float32))
    assert processor.generated_ids == (0, 1, 1)


def test_disallowed_generated_token_raises_mask_error_and_leaves_only_eos(ab_grammar):
    processor = LogitsProcessor(ab_grammar)
    processor(np.asarray([4], dtype=np.intc), np.zeros(5, dtype=np.float32))
    scores = np.zeros(5, dtype=np.float32)
    with pytest.raises(MaskError):
        processor(np.asarray([4, 1], dtype=np.intc), scores)
    assert finite_ids(scores) == [3]  # llama-cpp-python swallows the raise: the scores must still be safe
    assert isinstance(processor.error, MaskError)
    with pytest.raises(MaskError):  # and it stays failed
        processor(np.asarray([4, 1], dtype=np.intc), np.zeros(5, dtype=np.float32))
    with pytest.raises(MaskError):
        processor.raise_if_failed()


def test_reuse_on_another_sequence_raises_until_reset(ab_grammar):
    processor = LogitsProcessor(ab_grammar)
    processor(np.asarray([4, 4], dtype=np.intc), np.zeros(5, dtype=np.float32))
    processor(np.asarray([4, 4, 0], dtype=np.intc), np.zeros(5, dtype=np.float32))
    with pytest.raises(MaskError):
        processor(np.asarray([1, 4, 0, 1], dtype=np.intc), np.zeros(5, dtype=np.float32))
    with pytest.raises(MaskError):
        processor(np.asarray([4, 4, 2], dtype=np.intc), np.zeros(5, dtype=np.float32))
    processor.reset()
    assert finite_ids(processor(np.asarray([1], dtype=np.intc), np.zeros(5, dtype=np.float32))) == [0, 2]


def test_terminated_grammar_leaves_only_eos(ab_grammar):
    processor = LogitsProcessor(ab_grammar, max_tokens=2)
    processor(np.asarray([4], dtype=np.intc), np.zeros(5, dtype=np.float32))
    scores = processor(np.asarray([4, 0, 1], dtype=np.intc), np.full(5, -np.inf, dtype=np.float32))
    assert processor.matcher.is_terminated()
    assert finite_ids(scores) == [3]


def test_strided_scores_as_llama_cpp_passes_them_are_masked_in_place(ab_grammar):
    processor = LogitsProcessor(ab_grammar)
    records = np.zeros(5, dtype=np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True))
    records["logit"] = 1.0
    out = processor(np.asarray([4], dtype=np.intc), records["logit"])
    assert finite_ids(records["logit"]) == [0, 2]
    assert finite_ids(out) == [0, 2]


def test_the_default_budget_and_its_eos_fit_llama_cpp_pythons_default_max_tokens(ab_grammar):
    llama_cpp = pytest.importorskip("llama_cpp")
    for method in (llama_cpp.Llama.create_completion, llama_cpp.Llama.__call__):
        assert inspect.signature(method).parameters["max_tokens"].default == LLAMA_CPP_DEFAULT_MAX_TOKENS
    processor = LogitsProcessor(ab_grammar)
    assert processor.max_tokens == processor.matcher.max_tokens == DEFAULT_BUDGET == LLAMA_CPP_DEFAULT_MAX_TOKENS - 1
    assert LogitsProcessor(ab_grammar, max_tokens=None).matcher.max_tokens is None  # explicitly unbudgeted


def test_completion_kwargs_give_the_completion_the_processors_own_budget_and_a_fresh_sequence(ab_grammar):
    llama_cpp = pytest.importorskip("llama_cpp")
    processor = LogitsProcessor(ab_grammar, max_tokens=7)
    processor(np.asarray([4], dtype=np.intc), np.zeros(5, dtype=np.float32))
    processor(np.asarray([4, 0], dtype=np.intc), np.zeros(5, dtype=np.float32))
    kwargs = processor.completion_kwargs()
    assert kwargs["max_tokens"] == 7 + 1 and kwargs["stop"] == []  # the document's budget and the EOS ending it
    assert isinstance(kwargs["logits_processor"], llama_cpp.LogitsProcessorList)
    assert list(kwargs["logits_processor"]) == [processor]
    assert processor.generated_ids == ()  # reset: the next completion is a new generation, any prompt
    assert finite_ids(processor(np.asarray([1, 1], dtype=np.intc), np.zeros(5, dtype=np.float32))) == [0, 2]
    assert LogitsProcessor(ab_grammar, max_tokens=None).completion_kwargs()["max_tokens"] == -1  # no limit either


def test_a_completion_that_never_called_the_processor_is_reported(ab_grammar):
    pytest.importorskip("llama_cpp")
    processor = LogitsProcessor(ab_grammar)
    processor.completion_kwargs()
    with pytest.raises(MaskError, match="never called"):
        processor.raise_if_failed()
    processor.completion_kwargs()
    processor(np.asarray([4], dtype=np.intc), np.zeros(5, dtype=np.float32))
    processor.raise_if_failed()  # it ran: nothing to report
    processor.reset()
    processor.raise_if_failed()  # no generation was set up


def test_a_grammar_longer_than_the_default_budget_is_refused_up_front_with_the_fix_named():
    vocab = Vocabulary.from_tokens([b"a", b"</s>"], eos_token_ids=[1], special_ids_by_name={"</s>": 1})
    grammar = compile_regex("a{20}", vocab)
    with pytest.raises(BudgetTooSmallError) as refused:
        LogitsProcessor(grammar)
    assert refused.value.needed == 20 and any("completion_kwargs" in note for note in refused.value.__notes__)
    assert LogitsProcessor(grammar, max_tokens=20).max_tokens == 20


@pytest.fixture(scope="module")
def smollm2_llama(smollm2_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(smollm2_path), n_ctx=512, n_threads=2, verbose=False, seed=1)
    yield llm
    llm.close()


@pytest.mark.model
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_real_model_output_matches_the_pattern(smollm2_llama, monkeypatch, temperature):
    import llama_cpp

    monkeypatch.setenv("EMBER_CACHE_DIR", "off")
    vocab = Vocabulary.from_llama(smollm2_llama)
    pattern = r'\{"name":"[A-Z][a-z]{1,12}","age":(0|[1-9][0-9]?),"tags":\[("[a-z]{1,10}"(,"[a-z]{1,10}"){0,2})?\]\}'
    grammar = compile_regex(pattern, vocab)
    processor = LogitsProcessor(grammar, max_tokens=48)
    result = smollm2_llama.create_completion(
        "A JSON record describing a person:\n", max_tokens=48, temperature=temperature, seed=7,
        logits_processor=llama_cpp.LogitsProcessorList([processor]),
    )  # fmt: skip
    text = result["choices"][0]["text"]
    assert re.fullmatch(pattern, text), text
    assert result["choices"][0]["finish_reason"] == "stop"
    assert processor.matcher.is_accepting()


@pytest.mark.model
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the raise llama-cpp swallows
def test_failure_inside_llama_cpp_ends_generation_instead_of_running_unconstrained(smollm2_llama, monkeypatch):
    import llama_cpp

    monkeypatch.setenv("EMBER_CACHE_DIR", "off")
    grammar = compile_regex(r"[a-z]{1,40}", Vocabulary.from_llama(smollm2_llama))
    processor = LogitsProcessor(grammar)
    real_advance = processor.matcher.advance
    monkeypatch.setattr(processor.matcher, "advance", lambda t: processor.matcher.tokens_consumed < 2 and real_advance(t))
    result = smollm2_llama.create_completion(
        "Write a word:", max_tokens=20, temperature=0.0,
        logits_processor=llama_cpp.LogitsProcessorList([processor]),
    )  # fmt: skip
    assert isinstance(processor.error, MaskError)
    assert result["usage"]["completion_tokens"] <= 3  # stopped at once, EOS forced
    assert result["choices"][0]["finish_reason"] == "stop"
    with pytest.raises(MaskError):
        processor.raise_if_failed()


OPEN_OBJECT = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name"],
}
"""Open: additional properties of any type, strings of any length — documents that only a budget ends."""


@pytest.mark.model
def test_every_document_through_completion_kwargs_parses_and_validates_at_temperature_1(smollm2_llama):
    """The documented easy path. The same loop with the budget only on create_completion (the processor
    unbudgeted) ended 19 of 60 such documents truncated (3 open schemas, 20 seeds, 48 tokens)."""
    import jsonschema

    grammar = _json_grammar(smollm2_llama, OPEN_OBJECT)
    prompt = "<|im_start|>user\nDescribe a city as a JSON object.<|im_end|>\n<|im_start|>assistant\n"
    processor = LogitsProcessor(grammar, max_tokens=40)
    for seed in range(8):
        result = smollm2_llama.create_completion(prompt, temperature=1.0, seed=seed, **processor.completion_kwargs())
        processor.raise_if_failed()
        text = result["choices"][0]["text"]
        jsonschema.validate(json.loads(text), OPEN_OBJECT)
        assert result["choices"][0]["finish_reason"] == "stop", text


@pytest.mark.model
def test_logit_bias_that_makes_llama_cpp_drop_the_processor_never_passes_silently(smollm2_llama):
    grammar = _json_grammar(smollm2_llama, OPEN_OBJECT)
    processor = LogitsProcessor(grammar, max_tokens=8)
    result = smollm2_llama.create_completion("A city as JSON:", temperature=0.0, logit_bias={0: 0.0},
                                             **processor.completion_kwargs())  # fmt: skip
    if processor.generated_ids:  # a llama-cpp-python that keeps the processor: the output is constrained
        json.loads(result["choices"][0]["text"])
    else:
        with pytest.raises(MaskError, match="never called"):
            processor.raise_if_failed()


@pytest.mark.model
def test_the_default_budget_keeps_a_plain_create_completion_complete(smollm2_llama):
    import jsonschema
    import llama_cpp

    grammar = _json_grammar(smollm2_llama, OPEN_OBJECT)
    for seed in range(4):
        processor = LogitsProcessor(grammar)
        result = smollm2_llama.create_completion("A city as JSON:", temperature=1.0, seed=seed,
                                                 logits_processor=llama_cpp.LogitsProcessorList([processor]))
        jsonschema.validate(json.loads(result["choices"][0]["text"]), OPEN_OBJECT)
        assert result["choices"][0]["finish_reason"] == "stop"


def _json_grammar(llm, schema):
    from constrained.grammar import compile_json_schema

    return compile_json_schema(schema, Vocabulary.from_llama(llm))
