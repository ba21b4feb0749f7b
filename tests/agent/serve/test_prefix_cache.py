"""The disk prefix cache: a restarted server loads the system + tools KV state instead of evaluating it again (one
sequence, and a batch of slots whose prefix holder loads it)."""

from __future__ import annotations

import pytest

from agent.serve import BackgroundServer, create_app, load_worker

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.model

MODEL = "qwen2.5-coder-0.5b-instruct"
TOOLS = [{"type": "function", "function": {
    "name": f"lookup_{topic}", "description": f"Look up facts about {topic} in the company knowledge base",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                   "required": ["query"]}}} for topic in ("billing", "shipping", "returns")]
SYSTEM = "You are the support assistant of a small shop. Use the tools for facts; never invent order numbers."


def _ask(worker, question: str):
    with BackgroundServer(create_app(worker)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        return client.chat.completions.create(
            model=MODEL, tools=TOOLS, tool_choice="required", max_tokens=30, parallel_tool_calls=False,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])


@pytest.mark.parametrize("parallel", [1, 4])
def test_a_restarted_server_loads_the_shared_prefix_from_disk(tmp_path, parallel):
    first = load_worker(MODEL, n_ctx=2048, n_threads=1, prefix_cache=tmp_path, parallel=parallel)
    try:
        cold = _ask(first, "Where is my parcel?")
        assert first.prefix_cache.saved == 1 and first.prefix_cache.restored == 0
        assert cold.usage.prompt_tokens_details.cached_tokens == 0
    finally:
        first.close(unload=True)
    assert len(list(tmp_path.glob("*.kv"))) == 1

    second = load_worker(MODEL, n_ctx=2048, n_threads=1, prefix_cache=tmp_path, parallel=parallel)
    try:
        warm = _ask(second, "How do I return a jacket?")
        assert second.prefix_cache.restored == 1
        cached = warm.usage.prompt_tokens_details.cached_tokens
        assert cached > 200 and cached < warm.usage.prompt_tokens  # the prefix, not the new question
        [call] = warm.choices[0].message.tool_calls
        assert call.function.name.startswith("lookup_")
    finally:
        second.close(unload=True)
