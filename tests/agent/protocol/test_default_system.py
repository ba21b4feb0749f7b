"""A plain ChatML model gets its own template's default system prompt, not Qwen's (SmolLM2's template names
SmolLM); Qwen2.5 keeps its own. The GGUF metadata reader `agent.models.gguf_chat_template` reads the template
without llama.cpp, so the codec can be chosen before a model loads."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agent.protocol import SMOLLM2_DEFAULT_SYSTEM, QwenCodec, codec_for, codec_for_template, template_default_system
from agent.protocol.qwen import QWEN_DEFAULT_SYSTEM

CHATML_NO_DEFAULT = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
                     "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                     "{% endif %}")
CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
]


def jinja_render(template: str, messages: list[dict[str, str]]) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


def test_qwen_keeps_its_own_default_system_prompt():
    assert codec_for("qwen2.5").default_system == QWEN_DEFAULT_SYSTEM
    assert QwenCodec().render([{"role": "user", "content": "hi"}]).startswith(
        f"<|im_start|>system\n{QWEN_DEFAULT_SYSTEM}<|im_end|>\n")


def test_smollm2_by_name_gets_smollm2s_default_system_prompt():
    codec = codec_for("smollm2-135m-instruct")
    assert codec.family == "chatml" and codec.default_system == SMOLLM2_DEFAULT_SYSTEM
    assert "Qwen" not in codec.render([{"role": "user", "content": "hi"}])


def test_the_default_system_prompt_is_read_from_the_template():
    assert template_default_system("{{ '<|im_start|>system\\nYou\\'re X.<|im_end|>\\n' }}") == "You're X."
    assert template_default_system("{{ '<|im_start|>system\nLiteral newline<|im_end|>\n' }}") == "Literal newline"
    assert template_default_system(CHATML_NO_DEFAULT) is None
    assert template_default_system("{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>' }}") is None


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_a_chatml_template_without_a_default_renders_no_system_turn(messages):
    codec = codec_for_template(CHATML_NO_DEFAULT)
    assert codec.family == "chatml" and codec.default_system is None
    assert codec.render(messages, add_generation_prompt=True) == jinja_render(CHATML_NO_DEFAULT, messages)


@pytest.mark.model
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_smollm2_renders_byte_exact_to_its_gguf_template(messages):
    from agent.models import gguf_chat_template, model_path

    template = gguf_chat_template(model_path("smollm2-135m-instruct", fetch=False))
    codec = codec_for(SimpleNamespace(chat_template=template))
    assert codec.default_system == SMOLLM2_DEFAULT_SYSTEM
    assert codec.render(messages, add_generation_prompt=True) == jinja_render(template, messages)


@pytest.mark.model
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct", "gemma3-270m",
                                  "qwen2-vocab", "llama3-vocab"])
def test_gguf_chat_template_reads_what_llama_cpp_reads(name):
    llama_cpp = pytest.importorskip("llama_cpp")
    from agent.models import gguf_chat_template, model_path

    path = model_path(name, fetch=False)
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        assert gguf_chat_template(path) == llm.metadata.get("tokenizer.chat_template")
    finally:
        llm.close()


def test_gguf_chat_template_of_a_file_that_is_not_gguf_is_none(tmp_path):
    from agent.models import gguf_chat_template

    (tmp_path / "x.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")  # truncated header
    (tmp_path / "y.gguf").write_bytes(b"text")
    assert gguf_chat_template(tmp_path / "x.gguf") is None and gguf_chat_template(tmp_path / "y.gguf") is None
    assert gguf_chat_template(tmp_path / "missing.gguf") is None
