"""The decode loop on a real model (SmolLM2): determinism, exits, masking, forced batching, rollback."""

from __future__ import annotations

import json
import threading

import jsonschema
import numpy as np
import pytest

from constrained.decoding import FinishReason, decode
from constrained.errors import MaskError
from constrained.grammar import compile_json_schema, compile_regex
from constrained.sampling import SamplingParams

pytestmark = pytest.mark.model

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture
def model(smollm2_model):
    smollm2_model.rollback(0)
    return smollm2_model


def chat(model, question: str) -> list[int]:
    return model.tokenize(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n", special=True)


# -- unconstrained ---------------------------------------------------------------------------------------------------


def test_greedy_decoding_is_deterministic_and_is_the_argmax_chain(model):
    prompt = model.tokenize("Once upon a time")
    first = decode(model, prompt, max_tokens=12)
    model.rollback(0)
    second = decode(model, prompt, max_tokens=12)
    assert first.tokens == second.tokens and first.finish_reason == FinishReason.LENGTH
    model.rollback(0)
    model.eval(prompt)
    manual = []
    for _ in range(12):
        manual.append(int(np.argmax(model.logits())))
        model.eval(manual[-1:])
    assert list(first.tokens) == manual
    assert first.text == model.detokenize(first.tokens)


def test_rollback_and_regenerate_equals_the_fresh_run(model):
    prompt = chat(model, "Name three fruits.")
    fresh = decode(model, prompt, max_tokens=16)
    assert model.n_past == len(prompt) + len(fresh.tokens) - 1  # the last token is appended, not evaluated
    model.rollback(len(prompt))
    again = decode(model, None, max_tokens=16)
    assert again.tokens == fresh.tokens and again.n_prompt_tokens == 0


def test_continuing_after_a_mid_generation_rollback_re_evaluates_the_last_token(model):
    prompt = model.tokenize("The days of the week are Monday,")
    fresh = decode(model, prompt, max_tokens=10)
    model.rollback(len(prompt) + 4)
    rest = decode(model, None, max_tokens=5)
    assert rest.tokens == fresh.tokens[4:9]  # KV kept fresh[:4]; fresh[3] is re-evaluated alone, as it was


def test_eos_ends_generation_and_is_reported_but_not_emitted(model):
    streamed: list[bytes] = []
    result = decode(model, chat(model, "What is 2+2? Answer with one number."), max_tokens=40,
                    on_token=lambda token, piece: streamed.append(piece))  # fmt: skip
    assert result.finish_reason == FinishReason.EOS
    assert result.tokens[-1] in model.vocabulary.eos_token_ids
    assert b"4" in result.text and b"<|im_end|>" not in result.text
    assert b"".join(streamed) == result.text


def test_stop_token_and_max_tokens_end_generation(model):
    prompt = model.tokenize("1, 2, 3, 4,")
    first = decode(model, prompt, max_tokens=1).tokens[0]
    model.rollback(0)
    stopped = decode(model, prompt, max_tokens=10, stop_token_ids=[first])
    assert stopped.finish_reason == FinishReason.STOP_TOKEN
    assert stopped.tokens == (first,) and stopped.text == b""
    model.rollback(0)
    limited = decode(model, prompt, max_tokens=3)
    assert limited.finish_reason == FinishReason.LENGTH and len(limited.tokens) == 3


def test_cancel_is_checked_before_every_step(model):
    cancel = threading.Event()
    seen = []

    def on_token(token, piece):
        seen.append(token)
        if len(seen) == 3:
            cancel.set()

    result = decode(model, model.tokenize("Hello"), max_tokens=20, on_token=on_token, cancel=cancel)
    assert result.finish_reason == FinishReason.CANCELLED
    assert list(result.tokens) == seen and len(seen) == 3


def test_seeded_sampling_is_reproducible(model):
    prompt = model.tokenize("My favourite animal is")
    params = SamplingParams(temperature=0.9, top_p=0.95, seed=1234)
    first = decode(model, prompt, max_tokens=10, sampling=params)
    model.rollback(0)
    assert decode(model, prompt, max_tokens=10, sampling=params).tokens == first.tokens


def test_timings_count_tokens_and_evals(model):
    result = decode(model, model.tokenize("Hello there"), max_tokens=5)
    timings = result.timings
    assert timings.n_generated == 5 and timings.n_forced == 0
    assert timings.n_evals == 5  # the prompt batch, then one per sampled token except the last
    assert result.n_prompt_tokens == 2 and timings.per_token_ms > 0


# -- constrained -------------------------------------------------------------------------------------------------------


def test_regex_constrained_output_matches_the_grammar(model):
    grammar = compile_regex("(yes|no|maybe)", model.vocabulary)
    result = decode(model, chat(model, "Is the sky blue?"), matcher=grammar.matcher(8), max_tokens=8)
    assert result.text in (b"yes", b"no", b"maybe")
    assert result.finish_reason in (FinishReason.EOS, FinishReason.GRAMMAR_COMPLETE)


@pytest.mark.parametrize("forced_batching", [False, True])
def test_schema_constrained_output_validates(model, forced_batching):
    grammar = compile_json_schema(PERSON, model.vocabulary)
    prompt = chat(model, "Describe Alice, 31 years old, as JSON.")
    result = decode(model, prompt, matcher=grammar.matcher(60), max_tokens=60, forced_batching=forced_batching)
    document = json.loads(result.text)
    jsonschema.validate(document, PERSON)
    assert result.finish_reason in (FinishReason.EOS, FinishReason.GRAMMAR_COMPLETE)


def test_forced_batching_appends_forced_tokens_without_sampling_and_in_fewer_evals(model):
    grammar = compile_json_schema(PERSON, model.vocabulary)
    prompt = chat(model, "Describe Bob, 40 years old, as JSON.")
    result = decode(model, prompt, matcher=grammar.matcher(60), max_tokens=60, forced_batching=True)
    assert result.timings.n_forced >= 4  # {"name":" and ,"age": and }
    assert result.timings.n_evals < result.timings.n_generated
    assert result.text.startswith(b'{"name":"')


def test_a_tight_budget_still_closes_the_document(model):
    grammar = compile_json_schema(PERSON, model.vocabulary)
    needed = grammar.index.needed_budget(grammar.dfa.initial)
    prompt = chat(model, "Describe a person with a very long name as JSON.")
    result = decode(model, prompt, matcher=grammar.matcher(needed + 2), max_tokens=needed + 2, forced_batching=True)
    jsonschema.validate(json.loads(result.text), PERSON)


class _RefusingMatcher:
    """A matcher that masks nothing and refuses everything: the loop must stop, not continue unconstrained."""

    def is_terminated(self):
        return False

    def apply_mask(self, logits):
        pass

    def advance(self, token_id):
        return False


class _EmptyMaskMatcher(_RefusingMatcher):
    def apply_mask(self, logits):
        logits[...] = -np.inf


@pytest.mark.parametrize("matcher", [_RefusingMatcher(), _EmptyMaskMatcher()])
def test_a_refused_or_impossible_token_raises_mask_error(model, matcher):
    with pytest.raises(MaskError):
        decode(model, model.tokenize("Hi"), matcher=matcher, max_tokens=5)


def test_masking_does_not_write_into_llamas_logits(model):
    grammar = compile_regex("(yes|no)", model.vocabulary)
    prompt = model.tokenize("Answer:")
    model.eval(prompt)
    before = model.logits().copy()
    model.rollback(0)
    result = decode(model, prompt, matcher=grammar.matcher(4), max_tokens=1)
    assert len(result.tokens) == 1 and model.n_past == len(prompt)
    np.testing.assert_array_equal(model.logits(), before)  # llama's buffer for the prompt end, unmasked
    assert np.isfinite(before).all()
