"""`ember serve` under load: concurrent clients, queue-full behaviour, and TTFT cold / warm / after a restart.

    8 clients x 25 requests (strict json_schema and tool calls mixed) ─► errors, validity, p50/p99, throughput
    a burst past --max-queue ─► how many 429s, each with Retry-After
    1 and 20 tools: TTFT cold (empty prefix cache), warm (same process), after a restart (prefix KV from disk)

Every request goes to a server on 127.0.0.1 started here; every output is validated (json_schema answers with
jsonschema, call arguments against their tool's schema). Results go to benchmarks/RESULTS.md ("Serving").
Run alone: ``python benchmarks/bench_serve.py [--clients 8 --requests 25 --threads 1]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jsonschema  # noqa: E402
from _common import environment_lines, markdown_table, percentiles, write_section  # noqa: E402

MODEL = "qwen2.5-coder-0.5b-instruct"
HEADING = "## Serving: ember serve under load, queue full, TTFT cold / warm / after restart"
TTFT_HEADING = "## Serving: TTFT alone (cold / warm / after restart)"
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
TOPICS = ["weather", "stocks", "flights", "hotels", "recipes", "news", "sports", "movies", "books", "music",
          "traffic", "currency", "translation", "calendar", "email", "maps", "shopping", "jobs", "health", "time"]


def tools(n: int) -> list[dict]:
    return [{"type": "function", "function": {
        "name": f"search_{topic}", "description": f"Search the {topic} database and return the best matches",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 40},
                                                        "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
                       "required": ["query"]}}} for topic in TOPICS[:n]]


def one_request(client, i: int) -> tuple[float, str | None]:
    """(seconds, error or None) for request i: even ones a strict schema, odd ones a required tool call. An error
    is ``invalid: ...`` when the server answered 200 with an output that does not validate."""
    started = time.perf_counter()
    try:
        if i % 2 == 0:
            reply = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"Invent person number {i}."}], max_tokens=40,
                temperature=0.7, seed=i, response_format={"type": "json_schema", "json_schema": {
                    "name": "person", "strict": True, "schema": PERSON}})
            jsonschema.validate(json.loads(reply.choices[0].message.content), PERSON)
        else:
            offered = tools(3)
            reply = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"Find flights to city {i}."}], max_tokens=40,
                tools=offered, tool_choice="required", parallel_tool_calls=False)
            [call] = reply.choices[0].message.tool_calls
            spec = next(t["function"] for t in offered if t["function"]["name"] == call.function.name)
            jsonschema.validate(json.loads(call.function.arguments), spec["parameters"])
    except (jsonschema.ValidationError, json.JSONDecodeError, ValueError) as error:
        return time.perf_counter() - started, f"invalid: {type(error).__name__}: {error}"
    except Exception as error:  # counted, not raised: the benchmark reports errors
        return time.perf_counter() - started, f"{type(error).__name__}: {error}"
    return time.perf_counter() - started, None


def load_phase(base_url: str, clients: int, requests: int) -> dict:
    import openai

    results: list[tuple[float, str | None]] = []
    lock = threading.Lock()

    def run(c: int) -> None:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=3600)
        for r in range(requests):
            outcome = one_request(client, c * requests + r)
            with lock:
                results.append(outcome)

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    seconds = [s for s, _ in results]
    errors = [e for _, e in results if e]
    p50, p99 = percentiles(seconds)
    invalid = [e for e in errors if e.startswith("invalid: ")]
    return {"requests": len(results), "errors": len(errors) - len(invalid), "invalid": len(invalid),
            "first_error": errors[0] if errors else "",
            "p50_s": p50, "p99_s": p99, "throughput_rps": len(results) / wall, "wall_s": wall}


def queue_full_phase(base_url: str, burst: int) -> dict:
    import httpx2 as httpx

    codes: list[int] = []
    retry_after: list[str] = []
    lock = threading.Lock()

    def fire(i: int) -> None:
        response = httpx.post(f"{base_url}/chat/completions", timeout=3600, json={
            "model": MODEL, "messages": [{"role": "user", "content": f"Say {i}."}], "max_tokens": 4})
        with lock:
            codes.append(response.status_code)
            if response.status_code == 429:
                retry_after.append(response.headers.get("retry-after", ""))

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(burst)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"burst": burst, "ok": codes.count(200), "429": codes.count(429),
            "other": len(codes) - codes.count(200) - codes.count(429),
            "all_429_have_retry_after": all(v.isdigit() for v in retry_after)}


def ttft(base_url: str, n_tools: int, question: str) -> float:
    """Seconds to the first streamed event (the server sends it after the first generated token)."""
    import httpx2 as httpx

    started = time.perf_counter()
    with httpx.stream("POST", f"{base_url}/chat/completions", timeout=3600, json={
            "model": MODEL, "stream": True, "max_tokens": 30, "tools": tools(n_tools), "tool_choice": "required",
            "messages": [{"role": "system", "content": "You are a search assistant."},
                         {"role": "user", "content": question}]}) as response:
        first = None
        for line in response.iter_lines():
            if first is None and line.startswith("data: "):
                first = time.perf_counter() - started
    assert first is not None, "no event streamed"
    return first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=25, help="requests per client")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-queue", type=int, default=16)
    parser.add_argument("--no-results", action="store_true", help="print only; do not write RESULTS.md")
    parser.add_argument("--ttft-only", action="store_true",
                        help="only the TTFT phase (its own RESULTS section): for a machine without other load")
    args = parser.parse_args(argv)

    from agent.serve import BackgroundServer, create_app, load_worker

    rows = []
    load = burst = None
    with tempfile.TemporaryDirectory() as cache:
        worker = load_worker(MODEL, n_ctx=4096, n_threads=args.threads, max_queue=args.max_queue,
                             prefix_cache=cache)
        with BackgroundServer(create_app(worker)) as server:
            if not args.ttft_only:
                load = load_phase(server.base_url, args.clients, args.requests)
                print("load", load, flush=True)
                burst = queue_full_phase(server.base_url, args.max_queue + 8)
                print("queue", burst, flush=True)
            for n in (1, 20):
                cold = ttft(server.base_url, n, "Find something for me.")
                warm = ttft(server.base_url, n, "Find something else for me.")
                rows.append([n, cold, warm])
                print("ttft", n, cold, warm, flush=True)
        worker.close()
        worker.engine.model.close()
        restarted = load_worker(MODEL, n_ctx=4096, n_threads=args.threads, prefix_cache=cache)
        with BackgroundServer(create_app(restarted)) as server:
            for row in rows:
                row.append(ttft(server.base_url, row[0], "Find a third thing for me."))
                print("restart", row, flush=True)
        restarted.close()

    ttft_table = markdown_table(["tools", "TTFT cold s", "TTFT warm s", "TTFT after restart (disk prefix) s"],
                                [[n, f"{c:.2f}", f"{w:.2f}", f"{r:.2f}"] for n, c, w, r in rows])
    if load is None or burst is None:
        body = "\n".join([*environment_lines(["llama-cpp-python", "starlette", "uvicorn", "openai"]), "",
                          f"TTFT phase alone, {args.threads} llama.cpp thread(s), model {MODEL}:", "", ttft_table])
        print(body)
        if not args.no_results:
            write_section(Path(__file__).resolve().parent / "RESULTS.md", TTFT_HEADING, body)
        return 0
    body = "\n".join([
        *environment_lines(["llama-cpp-python", "starlette", "uvicorn", "openai"]), "",
        f"{args.clients} clients x {args.requests} requests (strict json_schema and required tool calls alternate), "
        f"{args.threads} llama.cpp thread(s), model {MODEL}:", "",
        markdown_table(["requests", "errors", "invalid outputs", "p50 s", "p99 s", "throughput req/s"],
                       [[load["requests"], load["errors"], load["invalid"], f"{load['p50_s']:.2f}",
                         f"{load['p99_s']:.2f}", f"{load['throughput_rps']:.3f}"]]), "",
        f"Queue full: a burst of {burst['burst']} requests at --max-queue {args.max_queue}: {burst['ok']} answered, "
        f"{burst['429']} refused with 429 (Retry-After on all: {burst['all_429_have_retry_after']}), "
        f"{burst['other']} other.", "", ttft_table,
    ])
    print(body)
    if not args.no_results:
        write_section(Path(__file__).resolve().parent / "RESULTS.md", HEADING, body)
    return 0 if load["errors"] == 0 and load["invalid"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
