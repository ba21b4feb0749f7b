"""`ember serve --parallel 4`: requests decoded together, each held to its own constraints, deadline and connection;
one request's failure or disconnect never reaches another's answer, and its slot serves the next request.

One model load for the module (the default model, one thread, four slots). The protocol itself (streaming, 400s,
401, 429, the repeated-call rule) is tested at one and four slots in test_server.py; here: what only concurrency
shows.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx2 as httpx
import jsonschema
import llama_cpp
import pytest

from agent.serve import BackgroundServer, create_app, load_worker

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.model

MODEL = "qwen2.5-coder-0.5b-instruct"
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
SEARCH = [{"type": "function", "function": {
    "name": f"search_{topic}", "description": f"Search the {topic} database and return the best matches",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 40},
                                                    "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
                   "required": ["query"]}}} for topic in ("flights", "hotels", "weather")]
SYSTEM = "You are a travel assistant. Use the search tools for facts."


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    worker = load_worker(MODEL, n_ctx=2048, n_threads=1, max_queue=16, parallel=4,
                         prefix_cache=tmp_path_factory.mktemp("kv"))
    yield worker
    worker.close(unload=True)


@pytest.fixture(scope="module")
def server(worker):
    with BackgroundServer(create_app(worker)) as running:
        yield running


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def batch_of(worker):
    return worker.engine.model.batch


def at_once(*jobs) -> list[Any]:
    """Run the callables in threads at once; their results (or exceptions) in order."""
    results: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except Exception as error:  # returned, asserted by the test
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    return results


def person(client, i: int, **extra):
    return lambda: client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Invent person number {i}."}], max_tokens=40,
        temperature=0.7, seed=i, response_format={"type": "json_schema", "json_schema": {
            "name": "person", "strict": True, "schema": PERSON}}, **extra)


def search(client, i: int, choice: str = "required"):
    return lambda: client.chat.completions.create(
        model=MODEL, max_tokens=40, tools=SEARCH, tool_choice=choice, parallel_tool_calls=False,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Find flights to city {i}."}])


def assert_valid(reply) -> None:
    message = reply.choices[0].message
    if message.tool_calls:
        for call in message.tool_calls:
            spec = next(t["function"] for t in SEARCH if t["function"]["name"] == call.function.name)
            jsonschema.validate(json.loads(call.function.arguments), spec["parameters"])
    else:
        jsonschema.validate(json.loads(message.content), PERSON)


def all_free(worker) -> bool:
    return worker.wait_idle(timeout=120) and worker.running == 0 and all(
        engine.model.n_past <= engine.committed_tokens and not engine.model.is_generating
        for engine in worker.engines)


def test_eight_requests_are_decoded_four_at_a_time_each_held_to_its_own_schema(client, worker):
    batch = batch_of(worker)
    steps_before = batch.steps
    replies = at_once(*[person(client, i) if i % 2 else search(client, i) for i in range(8)])
    for reply in replies:
        assert not isinstance(reply, Exception), reply
        assert_valid(reply)
    tokens = sum(r.usage.completion_tokens for r in replies)
    assert batch.steps - steps_before < tokens  # steps advanced several sequences at once
    assert all_free(worker)


def test_the_shared_tools_prefix_is_evaluated_once_for_concurrent_requests(client, worker):
    batch = batch_of(worker)
    evaluated = batch.prefixes_evaluated
    tools = [{"type": "function", "function": {**t["function"], "name": t["function"]["name"] + "_v2"}}
             for t in SEARCH]  # a prefix no earlier test evaluated

    def ask(i: int):
        return lambda: client.chat.completions.create(
            model=MODEL, max_tokens=40, tools=tools, tool_choice="required", parallel_tool_calls=False,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Hotels in city {i}."}])

    replies = at_once(*[ask(i) for i in range(4)])
    assert not any(isinstance(r, Exception) for r in replies), replies
    assert batch.prefixes_evaluated == evaluated + 1
    cached = sorted(r.usage.prompt_tokens_details.cached_tokens for r in replies)
    assert cached[0] < 100 < cached[1]  # the request that evaluated it reports none of it as cached, the others all


def test_a_client_that_leaves_mid_stream_cancels_only_its_own_request(server, client, worker):
    cancelled = worker.cancelled
    with httpx.Client(base_url=server.base_url, timeout=120) as http:
        with http.stream("POST", "/chat/completions", json={
                "model": MODEL, "stream": True, "max_tokens": 1000,
                "messages": [{"role": "user", "content": "Count from 1 to 5000, separated by commas."}]}) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            others = at_once(person(client, 1), search(client, 2), person(client, 3, stream=False))
    for reply in others:
        assert not isinstance(reply, Exception), reply
        assert_valid(reply)
    assert all_free(worker)
    assert worker.cancelled == cancelled + 1


def test_past_its_deadline_one_request_is_a_504_and_the_others_are_answered(client, worker):
    deadline = worker.timeout_s
    results: list[Any] = []
    late = threading.Thread(target=lambda: results.append(_status(
        client.chat.completions.create, model=MODEL, max_tokens=600,
        messages=[{"role": "user", "content": "Count from 1 to 5000, separated by commas."}])))
    worker.timeout_s = 1.0
    try:
        late.start()
        for _ in range(400):  # until it is submitted (its deadline is fixed then)
            if worker.running or worker.waiting:
                break
            threading.Event().wait(0.025)
    finally:
        worker.timeout_s = deadline  # the others get the normal deadline
    replies = at_once(person(client, 4), search(client, 5))
    late.join(timeout=300)
    assert results == [504]
    for reply in replies:
        assert not isinstance(reply, Exception), reply
        assert_valid(reply)
    assert all_free(worker)


def _status(create, **request) -> int:
    try:
        create(**request)
    except openai.APIStatusError as error:
        return error.status_code
    return 200


def test_a_failed_decode_is_a_500_for_its_request_only_and_its_slot_serves_on(client, worker, monkeypatch):
    """llama_decode fails whenever it holds slot 2's sequence: the request on slot 2 is answered 500
    ``decode_failed``, the three on the other slots are answered and valid, and slot 2 serves again after.

    The failing decode first waits until all four requests hold a slot: a request placed after slot 2 had failed
    and been freed would take slot 2 too (then the only free one) and fail as well."""
    failing = worker.engines[2].model.seq_id
    real = llama_cpp.llama_decode

    def decode(ctx, batch):
        if any(batch.seq_id[i][0] == failing for i in range(batch.n_tokens)):
            for _ in range(2400):  # the others are placed by the worker's threads, not this one
                if worker.running == 4:
                    break
                threading.Event().wait(0.025)
            return -1
        return real(ctx, batch)

    monkeypatch.setattr(llama_cpp, "llama_decode", decode)
    replies = at_once(*[person(client, i) if i % 2 else search(client, i) for i in range(4)])
    monkeypatch.setattr(llama_cpp, "llama_decode", real)
    errors = [r for r in replies if isinstance(r, Exception)]
    assert len(errors) == 1 and errors[0].status_code == 500 and errors[0].body["code"] == "decode_failed"
    for reply in replies:
        if not isinstance(reply, Exception):
            assert_valid(reply)
    assert all_free(worker)
    replies = at_once(*[person(client, i) for i in range(4)])  # every slot, slot 2 included
    for reply in replies:
        assert not isinstance(reply, Exception), reply
        assert_valid(reply)
