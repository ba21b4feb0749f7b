"""Vocabulary: exact bytes and roles from llama.cpp, for pure construction and for real GGUF vocabularies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from constrained.vocabulary import Vocabulary

# -- pure construction -------------------------------------------------------------------------------------------


def test_from_tokens_defaults_normal_ids_to_everything_but_eos_and_specials():
    vocab = Vocabulary.from_tokens(
        [b"a", b"b", b"<s>", b"</s>"], eos_token_ids=[3], special_ids_by_name={"<s>": 2, "</s>": 3}
    )
    assert vocab.normal_ids == frozenset({0, 1})
    assert vocab.eos_token_ids == frozenset({3})
    assert len(vocab) == 4
    assert vocab.is_special(2) and vocab.is_special(3) and not vocab.is_special(0)


def test_out_of_range_ids_are_refused():
    with pytest.raises(ValueError, match="eos_token_ids"):
        Vocabulary.from_tokens([b"a"], eos_token_ids=[1])
    with pytest.raises(ValueError, match="special_ids_by_name"):
        Vocabulary.from_tokens([b"a"], special_ids_by_name={"<x>": 5})


def test_an_id_cannot_be_both_normal_and_eos():
    with pytest.raises(ValueError, match="both normal and EOS"):
        Vocabulary.from_tokens([b"a", b"b"], eos_token_ids=[1], normal_ids=[0, 1])


token_lists = st.lists(st.binary(min_size=1, max_size=4), min_size=2, max_size=12)


@given(token_lists, st.data())
def test_fingerprint_is_equal_for_equal_vocabularies_and_changes_with_any_byte(tokens, data):
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[0])
    assert vocab.fingerprint == Vocabulary.from_tokens(list(tokens), eos_token_ids=[0]).fingerprint
    index = data.draw(st.integers(0, len(tokens) - 1))
    changed = list(tokens)
    changed[index] = bytes([changed[index][0] ^ 0xFF]) + changed[index][1:]
    assert Vocabulary.from_tokens(changed, eos_token_ids=[0]).fingerprint != vocab.fingerprint


@given(token_lists)
def test_fingerprint_depends_on_roles_and_on_token_boundaries(tokens):
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[0])
    assert Vocabulary.from_tokens(tokens, eos_token_ids=[1]).fingerprint != vocab.fingerprint
    merged = [tokens[0] + tokens[1], *tokens[2:]]
    assert Vocabulary.from_tokens(merged, eos_token_ids=[0]).fingerprint != vocab.fingerprint


# -- real vocabularies -----------------------------------------------------------------------------------------


@pytest.mark.model
def test_llama3_vocab_has_every_token_with_eog_tokens_and_named_specials_of_llama_3_0(llama3_vocab):
    vocab = llama3_vocab
    assert len(vocab) == 128_256
    assert vocab.tokens[128_009] == b"<|eot_id|>"
    assert {128_001, 128_009} <= vocab.eos_token_ids
    assert vocab.special_ids_by_name["<|eot_id|>"] == 128_009  # EOS tokens are named too, for codec grammars
    assert vocab.special_ids_by_name["<|start_header_id|>"] == 128_006
    # llama.cpp's ggml-vocab-llama-bpe.gguf is Llama 3.0's: 128010 is reserved, not 3.1's <|python_tag|>.
    assert "<|python_tag|>" not in vocab.special_ids_by_name
    assert vocab.tokens[128_010] == b"<|reserved_special_token_5|>"
    assert 128_010 not in vocab.normal_ids and 128_000 not in vocab.normal_ids
    assert len(vocab.normal_ids) == 128_000


@pytest.mark.model
def test_qwen2_vocab_only_file_has_im_tokens_but_no_tool_call_token(qwen2_vocab):
    assert len(qwen2_vocab) == 151_936
    assert qwen2_vocab.special_ids_by_name["<|im_end|>"] == 151_645
    assert 151_645 in qwen2_vocab.eos_token_ids and 151_643 in qwen2_vocab.eos_token_ids
    # llama.cpp's ggml-vocab-qwen2.gguf predates Qwen2.5: ids 151646+ are padding, not <tool_call>.
    assert "<tool_call>" not in qwen2_vocab.special_ids_by_name
    assert qwen2_vocab.tokens[151_657] == b"[PAD151657]"


@pytest.mark.model
def test_qwen25_model_vocab_names_tool_call_as_a_special_token(qwen_vocab):
    assert len(qwen_vocab) == 151_936
    assert qwen_vocab.special_ids_by_name["<tool_call>"] == 151_657
    assert qwen_vocab.special_ids_by_name["</tool_call>"] == 151_658
    assert 151_657 not in qwen_vocab.normal_ids
    assert {151_643, 151_645} <= qwen_vocab.eos_token_ids
    assert qwen_vocab.fingerprint != Vocabulary.from_tokens(qwen_vocab.tokens).fingerprint


@pytest.mark.model
def test_smollm2_vocab_sizes_and_chatml_eos(smollm2_model):
    vocab = smollm2_model.vocabulary
    assert len(vocab) == 49_152
    assert vocab.special_ids_by_name["<|im_end|>"] == 2
    assert {0, 2} <= vocab.eos_token_ids


@pytest.mark.model
def test_gemma3_vocab_has_262k_tokens_and_byte_fallback_tokens_are_raw_bytes(gemma_path):
    vocab = Vocabulary.from_gguf(gemma_path)
    assert len(vocab) == 262_144
    assert vocab.tokens[1] == b"<eos>" and 1 in vocab.eos_token_ids
    assert "<end_of_turn>" in vocab.special_ids_by_name
    single_bytes = {vocab.tokens[i] for i in vocab.normal_ids if len(vocab.tokens[i]) == 1}
    assert {bytes([b]) for b in range(0x80, 0x100)} <= single_bytes  # <0x80>.. render as the raw byte


@pytest.mark.model
@pytest.mark.parametrize("fixture", ["llama3_vocab", "qwen2_vocab"])
def test_partial_utf8_pieces_exist_and_are_kept_raw(fixture, request):
    vocab = request.getfixturevalue(fixture)
    undecodable = []
    for i in vocab.normal_ids:
        try:
            vocab.tokens[i].decode("utf-8")
        except UnicodeDecodeError:
            undecodable.append(i)
    assert len(undecodable) > 1000
    assert all(b"\xef\xbf\xbd" not in vocab.tokens[i] for i in undecodable)  # no U+FFFD substitution
    assert {bytes([b]) for b in range(256)} <= {vocab.tokens[i] for i in vocab.normal_ids}  # byte-level BPE


NON_ASCII = ["Grüße aus Köln — ça va? 日本語のテキスト 🎉🦀", "naïve café\u00a0résumé\n\ttab", "Ελληνικά и русский"]


@pytest.fixture(scope="module")
def vocab_only_llamas():
    """name → (vocab-only ``llama_cpp.Llama``, ``Vocabulary.from_llama`` of it), closed at module end."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from agent.models import model_path

    loaded = {}
    for name in ("qwen2-vocab", "llama3-vocab"):
        llm = llama_cpp.Llama(model_path=str(model_path(name)), vocab_only=True, verbose=False)
        loaded[name] = (llm, Vocabulary.from_llama(llm))
    yield loaded
    for llm, _ in loaded.values():
        llm.close()


@pytest.mark.model
@pytest.mark.parametrize("name", ["qwen2-vocab", "llama3-vocab"])
@pytest.mark.parametrize("text", NON_ASCII)
def test_concatenated_token_bytes_round_trip_llamas_own_tokenizer(name, text, vocab_only_llamas):
    llm, vocab = vocab_only_llamas[name]
    ids = llm.tokenize(text.encode(), add_bos=False, special=False)
    assert b"".join(vocab.tokens[i] for i in ids) == text.encode()
    assert llm.detokenize(ids, special=True) == text.encode()


@pytest.mark.model
def test_from_llama_and_from_gguf_agree(qwen2_vocab, vocab_only_llamas):
    assert vocab_only_llamas["qwen2-vocab"][1].fingerprint == qwen2_vocab.fingerprint
