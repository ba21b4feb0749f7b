"""The public encoders write exactly the bytes the retired C-encoder fast path wrote, so no hash changes.

The trace's lines and `canonical_json` (the text every argument and schema hash is taken over) were written by
calling ``json.encoder.c_make_encoder`` directly (``agent.json_text.plain_encoder``, now gone); they are written by
`json.JSONEncoder.encode` with the same options (the trace recorder's line encoder, `canonical_json`'s encoder).
The old construction is kept here, in the test only, as the oracle of the old bytes.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.schema import canonical_json

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=2**63, max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.1, -0.0, 1e16, 1e-7, 5e-324, 1.7976931348623157e308])
    | st.text() | st.text(alphabet="é😀\u2028\x00\x7f\"\\/ \u00ff\u4e2d", max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
_ENCODERS = [
    json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False),  # the trace line encoder
    json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False),  # canonical_json
    json.JSONEncoder(),
]
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)


def _old_encoder(encoder: json.JSONEncoder):
    """The retired fast path, verbatim: the C encoder built once from ``encoder``'s options, no cycle markers."""
    string = json.encoder.encode_basestring_ascii if encoder.ensure_ascii else json.encoder.encode_basestring
    chunks = _c_make_encoder(None, encoder.default, string, None, encoder.key_separator, encoder.item_separator,
                             encoder.sort_keys, encoder.skipkeys, encoder.allow_nan)
    return lambda value: "".join(chunks(value, 0))


def _outcome(encode, value):
    try:
        return encode(value).encode("utf-8", "surrogatepass")
    except ValueError as error:
        return ("ValueError", str(error))


@pytest.mark.skipif(_c_make_encoder is None, reason="this Python has no C JSON encoder to compare with")
@settings(max_examples=300, deadline=None)
@given(_JSON, st.sampled_from(range(len(_ENCODERS))))
def test_the_public_encoder_writes_the_old_fast_paths_bytes(value, which):
    encoder = _ENCODERS[which]
    assert _outcome(encoder.encode, value) == _outcome(_old_encoder(encoder), value)


@pytest.mark.skipif(_c_make_encoder is None, reason="this Python has no C JSON encoder to compare with")
@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_canonical_json_hashes_are_what_they_were(value):
    old = _old_encoder(_ENCODERS[1])(value)
    assert hashlib.sha256(canonical_json(value).encode("utf-8", "surrogatepass")).hexdigest() == \
        hashlib.sha256(old.encode("utf-8", "surrogatepass")).hexdigest()


def test_canonical_json_of_a_fixed_value_is_pinned():
    value = {"b": [1, 2.5, 10**30, -0.0, 1e16], "a": "é😀\u2028", "c": {"z": None, "y": True}}
    text = canonical_json(value)
    assert text == '{"a":"é😀\u2028","b":[1,2.5,1000000000000000000000000000000,-0.0,1e+16],"c":{"y":true,"z":null}}'
    assert hashlib.sha256(text.encode()).hexdigest() == hashlib.sha256(
        json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
