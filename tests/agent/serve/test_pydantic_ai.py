"""pydantic-ai's OpenAI model as a second real client of `ember serve`: an agent with two tools, each question
answered by calling the tool that fits and then answering from its result.

The model is the default 0.5B one, greedy, one call per turn (``parallel_tool_calls=False``: with several allowed it
also calls the other tool for the same city). A question that needs both tools gets only the first one's answer
(measured); that is the model's planning, not the protocol, and is not asserted here.
"""

from __future__ import annotations

import pytest

from agent.serve import BackgroundServer, create_app, load_worker

pytest.importorskip("pydantic_ai")

pytestmark = pytest.mark.model

MODEL = "qwen2.5-coder-0.5b-instruct"


def test_a_pydantic_ai_agent_with_two_tools_answers_from_the_tool_that_fits():
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.usage import UsageLimits

    worker = load_worker(MODEL, n_ctx=2048, n_threads=1, prefix_cache=False)
    calls: list[tuple[str, str]] = []
    outputs = {}
    try:
        with BackgroundServer(create_app(worker)) as server:
            model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=server.base_url, api_key="unused"))
            agent = Agent(model, system_prompt="You are a helpful assistant. Use a tool when it helps, then answer "
                                               "the user.",
                          model_settings=ModelSettings(max_tokens=80, parallel_tool_calls=False))

            @agent.tool_plain
            def get_weather(city: str) -> str:
                """Current weather in a city."""
                calls.append(("get_weather", city))
                return f"{city}: sunny, 21 degrees Celsius"

            @agent.tool_plain
            def get_time(city: str) -> str:
                """Current local time in a city."""
                calls.append(("get_time", city))
                return f"{city}: 14:05"

            for question in ("What is the weather in Paris right now?", "What time is it in Tokyo?"):
                outputs[question] = agent.run_sync(question, usage_limits=UsageLimits(request_limit=3)).output
    finally:
        worker.close(unload=True)
    assert calls == [("get_weather", "Paris"), ("get_time", "Tokyo")]
    assert "21" in outputs["What is the weather in Paris right now?"]
    assert "14:05" in outputs["What time is it in Tokyo?"]
