"""Model-family codecs: render conversations byte-exact to the official chat templates, parse assistant turns into
actions, and write the lazy tool-call grammar the engine constrains decoding with.

    codec_for("qwen2.5" | "llama3.1" | store model name | loaded model) ─► Codec
      ├─ qwen.py    QwenCodec     "qwen2.5-tool-call-v1"      ChatML, <tool_call> JSON envelopes, <tool_response>
      └─ llama3.py  Llama3Codec   "llama3-json-tool-call-v1"  <|python_tag|> / bare JSON, ipython results
    base.py  the contract (ToolSpec, Segment, actions, MalformedReason, Codec, errors)

Model syntax (``<tool_call>``, ``<|python_tag|>``, ``ipython``, ``<|im_end|>``) lives in this package only.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from agent.protocol.base import (Action, Codec, FinalText, MalformedReason, MalformedToolCall, MessageFormatError,
                                 ProtocolError, Segment, TemplateVariableError, ToolCall, ToolCalls, ToolChoice,
                                 ToolChoiceError, ToolNameError, ToolSpec, UnknownCodecError)
from agent.protocol.llama3 import Llama3Codec
from agent.protocol.qwen import QwenCodec

__all__ = [
    "Action",
    "Codec",
    "FinalText",
    "KNOWN_CODECS",
    "Llama3Codec",
    "MalformedReason",
    "MalformedToolCall",
    "MessageFormatError",
    "ProtocolError",
    "QwenCodec",
    "SMOLLM2_DEFAULT_SYSTEM",
    "Segment",
    "TemplateVariableError",
    "ToolCall",
    "ToolCalls",
    "ToolChoice",
    "ToolChoiceError",
    "ToolNameError",
    "ToolSpec",
    "UnknownCodecError",
    "codec_for",
    "codec_for_template",
    "template_default_system",
]

CHATML_NOTE = ("plain ChatML model without tool training or <tool_call> tokens: rendered and parsed with the Qwen2.5 "
               "codec (with its own template's default system prompt), tags written as text in the grammar")
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""The system prompt SmolLM2-Instruct's chat template inserts when a conversation has none (used when the codec is
chosen by name; a loaded model's own template is read instead)."""
_DEFAULT_SYSTEM_RE = re.compile(r"""<\|im_start\|>system(?:\\n|\n)((?:[^'"{}\\]|\\.)*?)<\|im_end\|>""")
"""A ChatML template's default system turn: one string literal ``'<|im_start|>system\\n…<|im_end|>'`` (the
newline written as an escape or as itself); a system turn built from ``messages[0]`` never matches."""
_JINJA_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}

_TEMPLATE_SHA256 = {  # the official templates (llama-cpp-python 0.3.36 sdist, models/templates/)
    "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f": "qwen2.5",
    "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65": "llama3.1",
    "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4": "llama3.2",
}
_MODEL_NAMES = {"qwen2.5-coder-0.5b-instruct": "qwen2.5", "smollm2-135m-instruct": "chatml"}
_KNOWN = ("qwen2.5", "llama3.1", "llama3.2", "llama3.3", *_MODEL_NAMES)
KNOWN_CODECS = _KNOWN
"""The family and model names `codec_for` knows (what `UnknownCodecError` lists)."""
_NAME_RE = re.compile(r"^(?:meta-)?(?:(?P<qwen>qwen2\.5)|llama-?3\.(?P<llama>[123])|(?P<smol>smollm2))(?:$|[-_.])")


def codec_for(family_or_model: str | Any) -> Codec:
    """The codec for a family name, a model-store name, or a loaded model (chosen by its ``.chat_template``).

    Args:
        family_or_model: ``"qwen2.5"``, ``"llama3.1"``, ``"llama3.2"``, ``"llama3.3"``; a model name such as
            ``"qwen2.5-coder-0.5b-instruct"`` or ``"Llama-3.2-1B-Instruct"``; or an object with ``.chat_template``
            (and optionally ``.vocabulary``, used to see whether the family's tag tokens exist).

    Raises:
        UnknownCodecError: nothing matches (the error lists what would).
    """
    if isinstance(family_or_model, str):
        return _codec_for_name(family_or_model)
    if not hasattr(family_or_model, "chat_template"):
        raise UnknownCodecError(type(family_or_model).__name__, _KNOWN,
                                "expected a family or model name, or an object with .chat_template")
    template = family_or_model.chat_template
    if not isinstance(template, str) or not template:
        raise UnknownCodecError(_describe(family_or_model), _KNOWN, "the model has no chat template")
    return codec_for_template(template, vocabulary=getattr(family_or_model, "vocabulary", None),
                              label=_describe(family_or_model))


def codec_for_template(template: str, *, vocabulary: Any = None, label: str = "chat template") -> Codec:
    """Choose a codec by chat-template content: the official templates by sha256, others by their markers."""
    specials = getattr(vocabulary, "special_ids_by_name", None)
    family = _TEMPLATE_SHA256.get(hashlib.sha256(template.encode()).hexdigest())
    if family is None:
        if "<|im_start|>" in template:
            family = "qwen2.5" if "<tool_call>" in template else "chatml"
        elif "<|start_header_id|>" in template and "ipython" in template:
            family = "llama3.2" if "strftime_now" in template else "llama3.1"
        else:
            raise UnknownCodecError(label, _KNOWN, "its chat template is neither ChatML nor Llama 3.1+")
    codec = _codec_for_family(family, template=template)
    if specials is not None:
        if isinstance(codec, QwenCodec) and codec.special_tags and "<tool_call>" not in specials:
            codec = QwenCodec(family=codec.family, special_tags=False, note=codec.note,
                              default_system=codec.default_system)
        if isinstance(codec, Llama3Codec) and "<|python_tag|>" not in specials:
            codec = Llama3Codec(family=codec.family, python_tag=False)
    return codec


def _codec_for_name(name: str) -> Codec:
    key = name.strip().lower()
    family = _MODEL_NAMES.get(key) or (key if key in _KNOWN else None)
    if family is None:
        match = _NAME_RE.match(key)
        if match is None:
            raise UnknownCodecError(name, _KNOWN)
        family = ("qwen2.5" if match["qwen"] else "chatml" if match["smol"] else f"llama3.{match['llama']}")
    return _codec_for_family(family)


def _codec_for_family(family: str, *, template: str | None = None) -> Codec:
    if family == "qwen2.5":
        return QwenCodec()
    if family == "chatml":
        system = SMOLLM2_DEFAULT_SYSTEM if template is None else template_default_system(template)
        return QwenCodec(family="chatml", special_tags=False, note=CHATML_NOTE, default_system=system)
    return Llama3Codec(family=family)


def template_default_system(template: str) -> str | None:
    """The default system prompt a ChatML chat template inserts when a conversation has none, or None when it
    inserts none (e.g. SmolLM2's ``You are a helpful AI assistant named SmolLM, trained by Hugging Face``)."""
    match = _DEFAULT_SYSTEM_RE.search(template)
    if match is None:
        return None
    return re.sub(r"\\(.)", lambda m: _JINJA_ESCAPES.get(m[1], m[0]), match[1])


def _describe(model: Any) -> str:
    path = getattr(model, "path", None)
    return f"{type(model).__name__}({path})" if path is not None else type(model).__name__
