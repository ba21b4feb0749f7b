"""Sampler: greedy is argmax, a masked token is never drawn, a seed fixes the draws, nothing-allowed refuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from constrained.errors import MaskError
from constrained.sampling import Sampler, SamplingParams

finite = st.floats(-30, 30, allow_nan=False, width=32)
logit_vectors = hnp.arrays(np.float32, st.integers(2, 64), elements=finite)


@given(logit_vectors)
def test_greedy_is_argmax(logits):
    assert Sampler().sample(logits) == int(np.argmax(logits))


@given(logit_vectors, st.data(), st.floats(0.1, 3.0), st.floats(0.05, 1.0), st.integers(0, 2**32))
def test_a_masked_token_is_never_drawn(logits, data, temperature, top_p, seed):
    masked = data.draw(st.sets(st.integers(0, len(logits) - 1), max_size=len(logits) - 1))
    logits = logits.copy()
    logits[list(masked)] = -np.inf
    sampler = Sampler(SamplingParams(temperature=temperature, top_p=top_p, seed=seed))
    for _ in range(5):
        assert sampler.sample(logits) not in masked


@given(logit_vectors, st.integers(0, 2**32))
def test_the_same_seed_gives_the_same_draws(logits, seed):
    params = SamplingParams(temperature=1.0, seed=seed)
    first, second = Sampler(params), Sampler(params)
    assert [first.sample(logits) for _ in range(10)] == [second.sample(logits) for _ in range(10)]


def test_temperature_sampling_follows_the_distribution():
    logits = np.log(np.array([0.7, 0.2, 0.1], dtype=np.float32))
    sampler = Sampler(SamplingParams(temperature=1.0, seed=7))
    counts = np.bincount([sampler.sample(logits) for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(counts, [0.7, 0.2, 0.1], atol=0.03)


def test_small_top_p_keeps_only_the_most_likely_token():
    logits = np.array([1.0, 3.0, 2.9, -1.0], dtype=np.float32)
    sampler = Sampler(SamplingParams(temperature=1.0, top_p=0.01, seed=0))
    assert {sampler.sample(logits) for _ in range(50)} == {1}


def test_nothing_allowed_or_nan_is_refused():
    with pytest.raises(MaskError):
        Sampler().sample(np.full(4, -np.inf, dtype=np.float32))
    with pytest.raises(MaskError):
        Sampler(SamplingParams(temperature=1.0)).sample(np.array([0.0, np.nan], dtype=np.float32))


@given(logits=hnp.arrays(np.float32, st.integers(2, 64), elements=st.one_of(finite, st.just(-np.inf))),
       where=st.integers(0, 63), greedy=st.booleans())
def test_a_nan_anywhere_is_refused_even_among_masked_and_larger_logits(logits, where, greedy):
    logits = logits.copy()
    logits[where % len(logits)] = np.nan
    params = SamplingParams() if greedy else SamplingParams(temperature=0.7, seed=1)
    with pytest.raises(MaskError):
        Sampler(params).sample(logits)


@pytest.mark.parametrize("kwargs", [{"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"temperature": float("inf")}])
def test_invalid_params_are_refused(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
