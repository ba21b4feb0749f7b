"""`agent.chat`: a model without a tool codec still generates (its own chat template, or the raw prompt for a base
model), and what can be refused is refused before the weights load."""

from __future__ import annotations

import json
from types import SimpleNamespace

import jsonschema
import pytest

from agent.chat import ChatModel

GEMMA_LIKE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n"
              "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def fake_model(template: str | None) -> SimpleNamespace:
    pieces = {0: b"<bos>", 1: b"<eos>"}
    return SimpleNamespace(chat_template=template, vocabulary=[b"<bos>", b"<eos>"],
                           llama=SimpleNamespace(token_bos=lambda: 0, token_eos=lambda: 1),
                           token_bytes=lambda i: pieces[i])


def test_without_a_codec_the_prompt_goes_through_the_models_own_template():
    chat = ChatModel(model=fake_model(GEMMA_LIKE), codec=None, path=None)
    # the template's BOS text is left out: generation tokenizes with add_bos=True
    assert chat.render_user_prompt("Pick a city.") == "<start_of_turn>user\nPick a city.<end_of_turn>\n<start_of_turn>model\n"


def test_a_base_model_without_a_template_gets_the_prompt_as_it_is():
    chat = ChatModel(model=fake_model(None), codec=None, path=None)
    assert chat.render_user_prompt("Pick a city.") == "Pick a city."
    assert chat.render_user_prompt("Pick a city.", system="Be brief.") == "Be brief.\n\nPick a city."


@pytest.mark.model
def test_generate_works_on_a_model_without_a_tool_codec(tmp_path, capsys):
    from agent import cli

    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"],
              "additionalProperties": False}
    (tmp_path / "s.json").write_text(json.dumps(schema), encoding="utf-8")
    status = cli.main(["generate", "--model", "gemma3-270m", "--schema", str(tmp_path / "s.json"), "--prompt",
                       "Pick a city.", "--json", "--max-tokens", "16", "--threads", "1", "--n-ctx", "512"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert status == 0 and len(lines) == 1
    jsonschema.validate(json.loads(lines[0]), schema)
