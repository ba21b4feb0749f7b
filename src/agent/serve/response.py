"""OpenAI's response objects: a whole ``chat.completion``, and the ``chat.completion.chunk`` stream of the same answer.

Owns the wire shapes only; the answer itself comes from the worker. The stream is built so that concatenating its
deltas gives the whole completion: content deltas in order, then each call as ``delta.tool_calls[{index}]`` with
``id``, ``type`` and ``function.name`` once, and its ``arguments`` after, then a chunk with ``finish_reason``, and
(``stream_options.include_usage``) one last chunk with ``usage`` and no choices.

    Answer ─► completion(...)                       one JSON object
    Delta  ─► content_chunk(...)                    data: {...}
    CallDelta ─► call_chunk(...)                    a call's id and name, or an arguments fragment
    Answer ─► final_chunks(...)                     finish, usage
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from agent.serve.worker import Answer, CallDelta

__all__ = ["Completion", "sse"]

FINGERPRINT = "ember"


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event carrying ``data`` (a JSON object, or the literal ``[DONE]``)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


@dataclass
class Completion:
    """Ids and timestamps shared by one completion's object or chunks."""

    model: str
    include_usage: bool = False
    id: str = field(default_factory=lambda: f"chatcmpl-{secrets.token_hex(12)}")
    created: int = field(default_factory=lambda: int(time.time()))

    def whole(self, answer: Answer) -> dict[str, Any]:
        """The non-streamed ``chat.completion``."""
        message: dict[str, Any] = {"role": "assistant", "content": answer.content, "refusal": None}
        if answer.tool_calls:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}}
                                     for c in answer.tool_calls]
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "system_fingerprint": FINGERPRINT,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": answer.finish_reason}],
                "usage": usage(answer)}

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                "model": self.model, "system_fingerprint": FINGERPRINT,
                                "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                             "finish_reason": finish_reason}]}
        if self.include_usage:
            body["usage"] = None
        return body

    def first_chunk(self) -> dict[str, Any]:
        return self.chunk({"role": "assistant", "content": ""})

    def content_chunk(self, text: str) -> dict[str, Any]:
        return self.chunk({"content": text})

    def call_chunk(self, delta: CallDelta) -> dict[str, Any]:
        """A call's first chunk (``id``, ``type``, ``function.name``) or one of its ``arguments`` fragments."""
        if delta.id is not None:
            part = {"index": delta.index, "id": delta.id, "type": "function",
                    "function": {"name": delta.name, "arguments": delta.arguments}}
        else:
            part = {"index": delta.index, "function": {"arguments": delta.arguments}}
        return self.chunk({"tool_calls": [part]})

    def final_chunks(self, answer: Answer) -> list[dict[str, Any]]:
        """The finish reason and (when asked) the usage: the content and calls were streamed before."""
        chunks = [self.chunk({}, answer.finish_reason)]
        if self.include_usage:
            chunks.append({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                           "model": self.model, "system_fingerprint": FINGERPRINT, "choices": [],
                           "usage": usage(answer)})
        return chunks


def usage(answer: Answer) -> dict[str, Any]:
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": answer.cached_tokens}}
