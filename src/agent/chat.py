"""A loaded chat model: the store-resolved GGUF, its LlamaModel and the codec its chat template asks for.

The CLI's `generate`, `call`, `run` and `demo` all start here, so model resolution (a store name or a local
path), loading and codec choice happen in one place. What can be refused is refused before the weights load: the
path must be a GGUF file (magic bytes), and a model that needs a tool codec must have a chat template one fits
(read from the GGUF metadata, no llama.cpp involved).

    name | path ──models.model_path──► GGUF ──gguf_chat_template──► codec check ──LlamaModel.load──► model
                                                                                  └─codec_for(model)──► codec

`generate` needs no tool format: its prompt is a chat message rendered with the model's own chat template
(`constrained.generate(messages=...)`, so a model without a codec — Gemma 3, any other template — works too), and
a base model without a template gets the prompt as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import models
from agent.protocol import KNOWN_CODECS, codec_for, codec_for_template
from agent.protocol.base import Codec, UnknownCodecError
from constrained import LlamaModel

__all__ = ["ChatModel", "chat_messages", "load_chat_model"]


@dataclass(kw_only=True)
class ChatModel:
    """A model ready for chat: weights, codec and where it came from."""

    model: LlamaModel
    """The one narrow wrapper over llama.cpp."""
    codec: Codec | None
    """Renders and parses this model family's turns; None for a model no codec fits (``require_codec=False``)."""
    path: Path
    """The verified GGUF file."""

    def generate_structured(self, schema: Any, prompt: str, *, n: int = 1, temperature: float = 0.0,
                            seed: int | None = None, max_tokens: int = 256,
                            whitespace: str = "compact") -> list[Any]:
        """Validated objects (pydantic instances or dicts) constrained by ``schema``; see `constrained.generate`.

        The prompt is a chat message rendered by the model's own template, so its text stays data (text that
        would spell a control token is refused, `ChatTemplateError`); a base model without a template reads it
        as it is."""
        from constrained import generate

        options = {"n": n, "temperature": temperature, "seed": seed, "max_tokens": max_tokens,
                   "whitespace": whitespace}
        if self.model.chat_template:
            return generate(self.model, schema, messages=chat_messages(prompt), **options)
        return generate(self.model, schema, prompt, **options)


def load_chat_model(name_or_path: str, *, n_ctx: int = 4096, n_threads: int | None = None,
                    progress: Callable[[str], None] | None = None, codec: str | None = None,
                    require_codec: bool = True) -> ChatModel:
    """Resolve ``name_or_path`` through the model store, load it and pick its codec.

    Args:
        name_or_path: a store name (``ember models list``) or a local GGUF path.
        n_ctx: context window to allocate.
        n_threads: llama.cpp threads for generation and prompt batches; ``None`` keeps llama-cpp-python's
            defaults (see `LlamaModel.load`: on a busy machine 1 thread can be an order of magnitude faster).
        progress: receives human progress lines (downloads, loading).
        codec: a family name to force (``"qwen2.5"``, ``"llama3.1"``...) instead of reading the chat template.
        require_codec: refuse a model no tool codec fits (before loading it); false gives ``codec=None`` instead
            (enough for `ChatModel.generate_structured`).

    Raises:
        ModelStoreError: unknown name, missing file, not a GGUF file (checked before loading).
        UnknownCodecError: ``require_codec`` and no codec fits the model's chat template (before loading).
    """
    path = models.check_gguf(models.model_path(name_or_path, progress=progress), label=name_or_path)
    forced = codec_for(codec) if codec is not None else None
    if forced is None and require_codec:
        template = models.gguf_chat_template(path)
        if not template:
            raise UnknownCodecError(path.name, KNOWN_CODECS, "the model has no chat template (a base model?), "
                                    "so it has no tool-call format")
        codec_for_template(template, label=path.name)  # raises before the weights load
    if progress is not None:
        progress(f"loading {path.name}")
    model = LlamaModel.load(path, n_ctx=n_ctx, n_threads=n_threads)
    if forced is not None:
        return ChatModel(model=model, codec=forced, path=path)
    try:
        chosen: Codec | None = codec_for(model)
    except UnknownCodecError:
        if require_codec:
            model.close()
            raise
        chosen = None
    return ChatModel(model=model, codec=chosen, path=path)


def chat_messages(prompt: str, system: str | None = None) -> Sequence[dict[str, Any]]:
    """The OpenAI-format message list for one user prompt with an optional system message."""
    messages: list[dict[str, Any]] = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": prompt})
    return messages
