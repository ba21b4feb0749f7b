"""pydantic-ai's OpenAI model as a second real client of `ember serve`: its requests (tools from Python functions,
tool results sent back with their call ids) are served, and its tools receive schema-valid arguments.

What this does not show: an agent run to a correct final answer. Under ``auto`` the default 0.5B model calls a
tool again after its result instead of answering (measured: ``multiply(3, 4)`` repeated until the request limit),
so the run is bounded by a request limit and the test checks the protocol, not the model's planning.
"""

from __future__ import annotations

import pytest

from agent.serve import BackgroundServer, create_app, load_worker

pytest.importorskip("pydantic_ai")

pytestmark = pytest.mark.model

MODEL = "qwen2.5-coder-0.5b-instruct"


def test_a_pydantic_ai_agent_with_two_tools_is_served_and_its_tools_get_valid_arguments():
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.usage import UsageLimits

    worker = load_worker(MODEL, n_ctx=2048, n_threads=1, prefix_cache=False)
    calls: list[tuple[str, int, int]] = []
    try:
        with BackgroundServer(create_app(worker)) as server:
            model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=server.base_url, api_key="unused"))
            agent = Agent(model, system_prompt="Use the tools to compute, then answer with the number.",
                          model_settings=ModelSettings(max_tokens=60, parallel_tool_calls=False))

            @agent.tool_plain
            def add(a: int, b: int) -> int:
                """Add two integers."""
                calls.append(("add", a, b))
                return a + b

            @agent.tool_plain
            def multiply(a: int, b: int) -> int:
                """Multiply two integers."""
                calls.append(("multiply", a, b))
                return a * b

            try:
                agent.run_sync("What is (3 + 4) * 5?", usage_limits=UsageLimits(request_limit=3))
            except UsageLimitExceeded:
                pass  # the model's loop, see the module docstring
    finally:
        worker.close()
        worker.engine.model.close()
    assert len(calls) >= 2  # the second request carried the first call's result and was served
    assert all(name in ("add", "multiply") and isinstance(a, int) and isinstance(b, int) for name, a, b in calls)
