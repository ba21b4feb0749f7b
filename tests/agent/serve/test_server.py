"""`ember serve` against the official openai SDK: a real server on a loopback port, the default model behind it.

One model load per worker (qwen2.5-coder-0.5b-instruct, one thread), and every test runs against two workers: one
sequence (``parallel=1``) and four slots of one batch (``parallel=4``: the same answers, decoded in a shared
``llama_batch``). Two apps share each worker, one with an API key. Every generation is short (small max_tokens).
Protocol facts are asserted exactly; model quality only where the task leaves the default model no real choice.
"""

from __future__ import annotations

import contextlib
import json
import threading

import httpx2 as httpx  # the HTTP client the openai SDK itself uses
import jsonschema
import pytest
from pydantic import BaseModel

from agent.serve import BackgroundServer, create_app, load_worker

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.model

MODEL = "qwen2.5-coder-0.5b-instruct"
KEY = "test-key-123"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "Current local time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
MARKUP = ("<tool_call>", "</tool_call>", "```json")


@pytest.fixture(scope="module", params=[1, 4], ids=["parallel-1", "parallel-4"])
def worker(request, tmp_path_factory):
    worker = load_worker(MODEL, n_ctx=2048, n_threads=1, max_queue=1, parallel=request.param,
                         prefix_cache=tmp_path_factory.mktemp("kv"))
    yield worker
    worker.close(unload=True)


def rolled_back(worker) -> bool:
    """Every slot's KV ends at its committed prompt: no generated token of any request is left."""
    return all(engine.model.n_past <= engine.committed_tokens for engine in worker.engines)


@pytest.fixture(scope="module")
def server(worker):
    with BackgroundServer(create_app(worker)) as running:
        yield running


@pytest.fixture(scope="module")
def keyed_server(worker):
    with BackgroundServer(create_app(worker, api_key=KEY)) as running:
        yield running


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def arguments_of(call) -> dict:
    return json.loads(call.function.arguments)


# -- endpoints and shapes ------------------------------------------------------------------------------------------


def test_models_lists_the_one_served_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_strict_json_schema_answers_validate_and_report_usage(client):
    for seed in (1, 2):
        response = client.chat.completions.create(
            model=MODEL, messages=ask("Invent a person."), max_tokens=40, temperature=0.9, seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                                    "schema": PERSON}})
        jsonschema.validate(json.loads(response.choices[0].message.content), PERSON)
        assert response.choices[0].finish_reason == "stop"
        assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0
        assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


def test_a_recursive_answer_schema_is_held_at_any_depth(client):
    tree = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "children": {
        "type": "array", "items": {"$ref": "#"}}}, "required": ["name", "children"], "additionalProperties": False}
    response = client.chat.completions.create(
        model=MODEL, messages=ask("A family tree of three generations as JSON."), max_tokens=120, temperature=0.9,
        seed=3, response_format={"type": "json_schema", "json_schema": {"name": "tree", "strict": True,
                                                                        "schema": tree}})
    jsonschema.validate(json.loads(response.choices[0].message.content), tree)


def test_parse_with_a_pydantic_model_returns_the_parsed_object(client):
    class City(BaseModel):
        name: str
        country: str

    response = client.chat.completions.parse(model=MODEL, messages=ask("Name a large city."), max_tokens=40,
                                             response_format=City)
    assert isinstance(response.choices[0].message.parsed, City)


def test_tool_choice_required_is_a_call_whose_arguments_validate(client):
    response = client.chat.completions.create(model=MODEL, messages=ask("Weather in Oslo?"), tools=[WEATHER],
                                              tool_choice="required", max_tokens=40, parallel_tool_calls=False)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    jsonschema.validate(arguments_of(call), WEATHER["function"]["parameters"])
    assert not choice.message.content


def test_a_named_tool_choice_calls_that_tool_even_when_another_fits_better(client):
    response = client.chat.completions.create(
        model=MODEL, messages=ask("Weather in Oslo?"), tools=[WEATHER, CLOCK], max_tokens=40,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    [call] = response.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    jsonschema.validate(arguments_of(call), CLOCK["function"]["parameters"])


def test_auto_calls_the_fitting_tool_and_no_markup_reaches_content(client):
    response = client.chat.completions.create(model=MODEL, messages=ask("What is the weather in Paris right now?"),
                                              tools=[WEATHER, CLOCK], max_tokens=40)
    message = response.choices[0].message
    assert response.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls[0].function.name == "get_weather"
    assert arguments_of(message.tool_calls[0])["city"] == "Paris"
    assert not any(mark in (message.content or "") for mark in MARKUP)


def test_a_tool_result_round_trip_answers_from_the_result(client):
    """The result goes back by ``tool_call_id``; the answer turn is ``tool_choice="none"`` because under ``auto`` the
    0.5B model calls the same tool again after its result (measured), which says nothing about the server."""
    messages = [*ask("How warm is it in Paris? Answer in one sentence."),
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 17, "sky": "cloudy"}'}]
    response = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], tool_choice="none",
                                              max_tokens=40)
    choice = response.choices[0]
    assert choice.finish_reason in ("stop", "length") and not choice.message.tool_calls
    assert "17" in choice.message.content
    assert not any(mark in choice.message.content for mark in MARKUP)


WEATHER_ROUND = [{"role": "user", "content": "What is the weather in Paris right now?"},
                 {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                     "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "Paris: sunny, 21 degrees Celsius"}]


def test_a_call_repeating_an_answered_one_becomes_the_answer_from_its_result(client, worker):
    city_weather = {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    request_ = {"model": MODEL, "messages": WEATHER_ROUND, "tools": [city_weather], "max_tokens": 60}
    worker.refuse_repeated_calls = False
    try:
        looping = client.chat.completions.create(**request_).choices[0]
    finally:
        worker.refuse_repeated_calls = True
    assert looping.finish_reason == "tool_calls"  # the default model asks for the answered call again (greedy)
    assert ("get_weather", {"city": "Paris"}) in [(c.function.name, arguments_of(c)) for c in looping.message.tool_calls]
    answered = client.chat.completions.create(**request_).choices[0]
    assert answered.finish_reason == "stop" and not answered.message.tool_calls
    assert "21" in answered.message.content
    content, calls, finishes, _ = _streamed(client, **request_)
    assert (content, calls, finishes) == (answered.message.content, [], ["stop"])


# -- streaming -----------------------------------------------------------------------------------------------------


def _streamed(client, **request):
    content, calls, finishes, usage = [], {}, [], None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **request):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            content.append(choice.delta.content or "")
            for part in choice.delta.tool_calls or ():
                entry = calls.setdefault(part.index, {"id": None, "name": None, "arguments": "", "fragments": 0})
                if part.id:
                    assert entry["id"] is None, "a call's id is sent once"
                    entry["id"] = part.id
                if part.function and part.function.name:
                    assert entry["name"] is None, "a call's name is sent once"
                    entry["name"] = part.function.name
                if part.function and part.function.arguments:
                    assert entry["name"] is not None, "arguments come after the call's id and name"
                    entry["arguments"] += part.function.arguments
                    entry["fragments"] += 1
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    return "".join(content), [calls[i] for i in sorted(calls)], finishes, usage


@pytest.mark.parametrize("request_", [
    {"messages": ask("Say hello to Ada in one short sentence."), "max_tokens": 24},
    {"messages": ask("What is the weather in Rome and in Madrid?"), "tools": [WEATHER, CLOCK], "max_tokens": 60},
    {"messages": ask("What is the weather in Rome and in Madrid?"), "tools": [WEATHER, CLOCK], "max_tokens": 60,
     "tool_choice": "required"},  # the model's own call shape, not the tag (docs/codecs.md)
    {"messages": ask("Invent a person."), "max_tokens": 40, "temperature": 0.0,  # greedy: see below
     "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON, "strict": True}}},
], ids=["text", "tools", "tools-required", "json_schema"])
def test_streamed_deltas_concatenate_to_the_non_streamed_answer(client, request_):
    """The json_schema case is greedy: its forced prefix (``{"name": "``) is in the KV from the first request, so
    the second evaluates a different batch and its logits differ in the last bits; sampled at 0.8 with one seed
    that can pick another name, which says nothing about streaming. Greedy still checks every delta."""
    request_ = {"model": MODEL, "temperature": 0.8, "seed": 7, **request_}
    whole = client.chat.completions.create(**request_)
    content, calls, finishes, usage = _streamed(client, **request_)
    message = whole.choices[0].message
    assert content == (message.content or "")
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (c.function.name, c.function.arguments) for c in message.tool_calls or ()]
    assert all(c["id"] for c in calls)
    if request_.get("tool_choice") == "required":
        assert calls
    assert all(c["fragments"] > 1 for c in calls), "arguments stream as the model writes them, not in one piece"
    assert finishes == [whole.choices[0].finish_reason]
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert not any(mark in content for mark in MARKUP)


def test_a_stop_sequence_ends_the_text_before_it_streamed_or_not(client):
    request_ = {"model": MODEL, "messages": ask("Count from 1 to 20, separated by commas."), "max_tokens": 60,
                "stop": [", 5"]}
    whole = client.chat.completions.create(**request_)
    content, _, finishes, _ = _streamed(client, **request_)
    assert whole.choices[0].finish_reason == "stop" and finishes == ["stop"]
    assert "4" in whole.choices[0].message.content and ", 5" not in whole.choices[0].message.content
    assert content == whole.choices[0].message.content


def test_past_the_deadline_a_request_is_a_504_and_the_worker_serves_on(client, worker):
    deadline = worker.timeout_s
    worker.timeout_s = 0.3
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model=MODEL, messages=ask("Write a long story about the sea."),
                                           max_tokens=400)
    finally:
        worker.timeout_s = deadline
    assert caught.value.status_code == 504 and caught.value.body["code"] == "timeout"
    assert worker.wait_idle(timeout=60)
    assert rolled_back(worker)  # the cut turn left nothing in the KV
    assert client.chat.completions.create(model=MODEL, messages=ask("hi"), max_tokens=4).choices[0].message.content


# -- refusals ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("request_", "param", "needle"), [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": {
        "type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}}},
     "response_format.json_schema.schema", "uniqueItems"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}}}]},
     "tools[0].function.parameters", "'uniqueItems' at #/properties/x"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "launch"}}},
     "tool_choice", "launch"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
        "type": "string", "format": "no-such-format-xyz"}}}},
     "response_format.json_schema.schema", "format 'no-such-format-xyz' is not enforced"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"when": {"type": "string", "format": "no-such-format-xyz"}},
        "required": ["when"], "additionalProperties": False}}}]},
     "tools[0].function.parameters", "format 'no-such-format-xyz' is not enforced"),
    ({"n": 2}, "n", "n=2"),
    ({"messages": ask("word " * 3000)}, "messages", "context window"),
    ({"max_tokens": 2047}, "max_tokens", "context window"),
], ids=["unsupported-response-schema", "unsupported-tool-schema", "unknown-tool", "unknown-format-response",
        "unknown-format-tool", "n", "context", "max_tokens"])
def test_what_cannot_be_enforced_is_a_400_in_openai_shape(client, request_, param, needle):
    request_ = {"model": MODEL, "messages": ask("hi"), **request_}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**request_)
    error = caught.value.body
    assert caught.value.status_code == 400
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and needle in error["message"]


def test_annotations_constrain_nothing_and_are_accepted_in_a_strict_schema(client):
    schema = {"type": "object", "title": "T", "description": "d", "examples": [{"n": 1}], "x-vendor": {"a": 1},
              "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9, "x-unit": "count"}},
              "required": ["n"], "additionalProperties": False}
    reply = client.chat.completions.create(model=MODEL, messages=ask("pick a number"), max_tokens=16,
                                           response_format={"type": "json_schema", "json_schema": {
                                               "name": "t", "strict": True, "schema": schema}})
    assert 1 <= json.loads(reply.choices[0].message.content)["n"] <= 9


def test_an_unknown_field_is_refused_not_ignored(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=ask("hi"), extra_body={"guided_json": {}})
    assert caught.value.body["param"] == "guided_json"


def test_with_an_api_key_a_request_without_it_is_401(keyed_server):
    anonymous = openai.OpenAI(base_url=keyed_server.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        anonymous.models.list()
    assert caught.value.status_code == 401 and caught.value.body["code"] == "invalid_api_key"
    assert httpx.get(keyed_server.base_url + "/models").status_code == 401
    keyed = openai.OpenAI(base_url=keyed_server.base_url, api_key=KEY, max_retries=0)
    assert [m.id for m in keyed.models.list().data] == [MODEL]


# -- many clients --------------------------------------------------------------------------------------------------


def test_a_full_queue_is_429_and_a_disconnect_cancels_and_rolls_back(server, worker):
    """Every slot runs a long stream, one request waits, the next is refused; closing the streams cancels them."""
    cancelled_before = worker.cancelled
    lines = []  # each stream's line iterator, kept: a collected one closes its response
    with contextlib.ExitStack() as streams, httpx.Client(base_url=server.base_url, timeout=120) as http:
        for i in range(worker.parallel):
            long_story = {"model": MODEL, "messages": ask(f"Count from {i} to 5000, separated by commas."),
                          "max_tokens": 1000, "stream": True}  # runs until the client leaves
            running = streams.enter_context(http.stream("POST", "/chat/completions", json=long_story))
            lines.append(running.iter_lines())
            assert next(line for line in lines[-1] if line.startswith("data: "))  # it runs now
        assert worker.running == worker.parallel
        answered: list[httpx.Response] = []
        queued = threading.Thread(target=lambda: answered.append(httpx.post(
            server.base_url + "/chat/completions", json={"model": MODEL, "messages": ask("hi"), "max_tokens": 2},
            timeout=120)))
        queued.start()
        for _ in range(400):
            if worker.waiting == 1:
                break
            threading.Event().wait(0.05)
        assert worker.busy and worker.waiting == 1
        refused = http.post("/chat/completions", json={"model": MODEL, "messages": ask("hi"), "max_tokens": 2})
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == "queue_full"
        streams.close()  # the clients are gone
        queued.join(timeout=120)
    assert worker.wait_idle(timeout=120)
    assert worker.cancelled == cancelled_before + worker.parallel
    assert rolled_back(worker)  # the cancelled turns left nothing in the KV
    assert [r.status_code for r in answered] == [200]  # the queued request ran once a slot was free
