"""A loaded chat model: the store-resolved GGUF, its LlamaModel and the codec its chat template asks for.

The CLI's `generate`, `call`, `run` and `demo` all start here, so model resolution (a store name or a local
path), loading and codec choice happen in one place.

    name | path ──models.model_path──► GGUF ──LlamaModel.load──► model ──codec_for(model)──► codec
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import models
from agent.protocol import codec_for
from agent.protocol.base import Codec
from constrained.llama import LlamaModel

__all__ = ["ChatModel", "chat_messages", "load_chat_model"]


@dataclass(kw_only=True)
class ChatModel:
    """A model ready for chat: weights, codec and where it came from."""

    model: LlamaModel
    """The one narrow wrapper over llama.cpp."""
    codec: Codec
    """Renders and parses this model family's turns."""
    path: Path
    """The verified GGUF file."""

    def render_user_prompt(self, prompt: str, *, system: str | None = None) -> str:
        """The chat-templated prompt for a single user message, ready for generation."""
        return self.codec.render(chat_messages(prompt, system), add_generation_prompt=True)

    def generate_structured(self, schema: Any, prompt: str, *, n: int = 1, temperature: float = 0.0,
                            seed: int | None = None, max_tokens: int = 256,
                            whitespace: str = "compact") -> list[Any]:
        """Validated objects (pydantic instances or dicts) constrained by ``schema``; see `constrained.generate`."""
        from constrained import generate

        return generate(self.model, schema, self.render_user_prompt(prompt), n=n, temperature=temperature,
                        seed=seed, max_tokens=max_tokens, whitespace=whitespace)


def load_chat_model(name_or_path: str, *, n_ctx: int = 4096, n_threads: int | None = None,
                    progress: Callable[[str], None] | None = None, codec: str | None = None) -> ChatModel:
    """Resolve ``name_or_path`` through the model store, load it and pick its codec.

    Args:
        name_or_path: a store name (``ember models list``) or a local GGUF path.
        n_ctx: context window to allocate.
        n_threads: llama.cpp threads for generation and prompt batches; ``None`` keeps llama-cpp-python's
            defaults (see `LlamaModel.load`: on a busy machine 1 thread can be an order of magnitude faster).
        progress: receives human progress lines (downloads, loading).
        codec: a family name to force (``"qwen2.5"``, ``"llama3.1"``...) instead of reading the chat template.
    """
    path = models.model_path(name_or_path, progress=progress)
    if progress is not None:
        progress(f"loading {path.name}")
    model = LlamaModel.load(path, n_ctx=n_ctx, n_threads=n_threads)
    return ChatModel(model=model, codec=codec_for(codec or model), path=path)


def chat_messages(prompt: str, system: str | None = None) -> Sequence[dict[str, Any]]:
    """The OpenAI-format message list for one user prompt with an optional system message."""
    messages: list[dict[str, Any]] = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": prompt})
    return messages
