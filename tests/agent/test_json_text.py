"""plain_encoder writes exactly what its encoder's own encode writes."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.json_text import plain_encoder

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
_ENCODERS = [
    json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False),
    json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False),
    json.JSONEncoder(),
    json.JSONEncoder(indent=2),
]


@settings(max_examples=200, deadline=None)
@given(_JSON, st.sampled_from(range(len(_ENCODERS))))
def test_plain_encoder_matches_encode(value, which):
    encoder = _ENCODERS[which]
    assert _outcome(plain_encoder(encoder), value) == _outcome(encoder.encode, value)


def _outcome(encode, value):
    try:
        return encode(value)
    except ValueError as error:  # infinities under allow_nan=False: both refuse, with the same message
        return ("ValueError", str(error))
