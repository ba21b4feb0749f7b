"""`ember serve` under load: concurrent clients, --parallel, the peer (llama-server), faults, queue full, TTFT.

    --phase load (default): 8 clients x 25 requests (strict json_schema and tool calls mixed) ─► errors, validity,
        p50/p99, throughput; a burst past --max-queue ─► 429s with Retry-After; 1 and 20 tools: TTFT cold (empty
        prefix cache), warm (same process), after a restart (prefix KV from disk)
    --phase parallel: the same load against `ember serve --parallel 1, 2, 4, 8` (in two rounds, the second in
        reverse order), each a fresh server process ─► requests/s and its ratio to --parallel 1
    --phase peer: `ember serve --parallel P` and `llama-server -np P` (built here from the llama.cpp that the pinned
        llama-cpp-python vendors: _servers.py), same model file, threads and per-slot context, at 1, 4 and 8
        clients, with 1 and 50 tools, streamed through the official openai SDK: strict json_schema answers and a
        flight search tool under auto, alternating ─► requests/s, p50/p99, time to first token, the share of
        json_schema answers and of returned call arguments that validate (jsonschema), calls returned
    --phase faults: 16 clients for 5 minutes, some leaving mid-stream at random ─► every completed answer
        validated; the same load before and after (no slot leaks: full throughput again); RSS before and after

Every output is validated (json_schema answers with jsonschema, call arguments against their tool's schema).
Results go to benchmarks/RESULTS.md ("Serving"). Run alone: ``python benchmarks/bench_serve.py [--phase peer]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jsonschema  # noqa: E402
from _common import environment_lines, markdown_table, percentiles, write_section  # noqa: E402

MODEL = "qwen2.5-coder-0.5b-instruct"
HEADING = "## Serving: ember serve under load, queue full, TTFT cold / warm / after restart"
TTFT_HEADING = "## Serving: TTFT alone (cold / warm / after restart)"
PARALLEL_HEADING = "## Serving: --parallel (requests decoded together in one llama.cpp batch)"
PEER_HEADING = "## Serving: ember serve against llama-server (same model, threads, slots)"
FAULTS_HEADING = "## Serving: 16 clients for 5 minutes with disconnects mid-stream"
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


def fan_out(base_url: str, clients: int, requests: int, ask) -> tuple[list, float]:
    """``clients`` threads, each with its own official openai client, making ``requests`` requests one after another
    (``ask(client, i)``, request ``i`` numbered across clients); every outcome and the wall seconds."""
    import openai

    results: list = []
    lock = threading.Lock()

    def run(c: int) -> None:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=3600)
        for r in range(requests):
            outcome = ask(client, c * requests + r)
            with lock:
                results.append(outcome)

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - started


def load_phase(base_url: str, clients: int, requests: int) -> dict:
    results, wall = fan_out(base_url, clients, requests, one_request)
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


# -- the peer load: strict json_schema answers and a flight search under auto, streamed --------------------------

FLIGHT = {"type": "function", "function": {
    "name": "search_flights", "description": "Search flights between two airports on a date",
    "parameters": {"type": "object", "properties": {
        "origin": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "IATA code of the departure airport"},
        "destination": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "IATA code of the arrival airport"},
        "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "description": "YYYY-MM-DD"},
        "passengers": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["origin", "destination", "date"]}}}
ROUTES = [("Helsinki", "HEL", "Tokyo", "NRT"), ("Paris", "CDG", "New York", "JFK"), ("Madrid", "MAD", "Rome", "FCO"),
          ("Oslo", "OSL", "Berlin", "BER"), ("London", "LHR", "Dubai", "DXB"), ("Vienna", "VIE", "Lisbon", "LIS")]
OTHER_TOPICS = [f"{a}_{b}" for a in ("hotel", "weather", "news", "stock", "movie", "recipe", "sport")
                for b in ("search", "details", "reviews", "prices", "history", "alerts", "summary")]


def peer_tools(n: int) -> list[dict]:
    """The flight search tool first, then ``n - 1`` others of the same shape as `tools`."""
    others = [{"type": "function", "function": {
        "name": f"get_{topic}", "description": f"Look up {topic.replace('_', ' ')} and return the best matches",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 40},
                                                        "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
                       "required": ["query"]}}} for topic in OTHER_TOPICS[: n - 1]]
    return [FLIGHT, *others]


@dataclass
class Outcome:
    """One streamed request: what came back and whether it holds to its schema."""

    kind: str
    """``json`` (a strict json_schema answer) or ``tool`` (the flight question, tools under auto)."""
    seconds: float
    ttft: float | None
    """Seconds to the first chunk with content or a tool call."""
    error: str | None = None
    valid: bool | None = None
    """json: the content validates; tool: every returned call names an offered tool and its arguments validate
    (None: no call returned)."""
    call_returned: bool = False
    call_in_content: bool = False
    """tool: no call returned, but the content holds one as text (a JSON object naming the tool)."""


def peer_request(client, i: int, offered: list[dict], *, abort_after: int | None = None) -> Outcome:
    """Request ``i`` streamed: even ``i`` a strict json_schema person, odd ``i`` the flight question under auto. With
    ``abort_after``, the client leaves after that many chunks (a disconnect mid-stream)."""
    kind = "json" if i % 2 == 0 else "tool"
    if kind == "json":
        request = {"messages": [{"role": "user", "content": f"Invent person number {i}."}], "max_tokens": 40,
                   "temperature": 0.7, "seed": i, "response_format": {"type": "json_schema", "json_schema": {
                       "name": "person", "strict": True, "schema": PERSON}}}
    else:
        origin, o, destination, d = ROUTES[i % len(ROUTES)]
        request = {"messages": [{"role": "user", "content": f"Find me a flight from {origin} ({o}) to "
                                 f"{destination} ({d}) on 2026-12-{10 + i % 18:02d}."}],
                   "max_tokens": 80, "temperature": 0.0, "tools": offered, "tool_choice": "auto"}
    started = time.perf_counter()
    first = None
    content, calls = [], {}
    try:
        stream = client.chat.completions.create(model=MODEL, stream=True, **request)
        for n, chunk in enumerate(stream):
            for choice in chunk.choices:
                delta = choice.delta
                if first is None and (delta.content or delta.tool_calls):
                    first = time.perf_counter() - started
                content.append(delta.content or "")
                for part in delta.tool_calls or ():
                    entry = calls.setdefault(part.index, {"name": "", "arguments": ""})
                    if part.function and part.function.name:
                        entry["name"] += part.function.name
                    if part.function and part.function.arguments:
                        entry["arguments"] += part.function.arguments
            if abort_after is not None and n + 1 >= abort_after:
                stream.response.close()
                return Outcome(kind, time.perf_counter() - started, first, error="aborted")
    except Exception as error:  # counted, not raised
        return Outcome(kind, time.perf_counter() - started, first, error=f"{type(error).__name__}: {error}")
    outcome = Outcome(kind, time.perf_counter() - started, first)
    text = "".join(content)
    if kind == "json":
        outcome.valid = _validates(text, PERSON)
        return outcome
    outcome.call_returned = bool(calls)
    if calls:
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in offered}
        outcome.valid = all(c["name"] in schemas and _validates(c["arguments"], schemas[c["name"]])
                            for c in calls.values())
    else:
        outcome.call_in_content = '"search_flights"' in text or '"name"' in text
    return outcome


def _validates(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def run_clients(base_url: str, clients: int, requests: int, offered: list[dict], *, start: int = 0) -> dict:
    """``clients`` threads, ``requests`` streamed peer requests each; the summary."""
    outcomes, wall = fan_out(base_url, clients, requests, lambda client, i: peer_request(client, start + i, offered))
    return summarize(outcomes, wall)


def summarize(outcomes: list[Outcome], wall: float) -> dict:
    done = [o for o in outcomes if o.error is None]
    jsons = [o for o in done if o.kind == "json"]
    tools_ = [o for o in done if o.kind == "tool"]
    returned = [o for o in tools_ if o.call_returned]
    invalid = sum(1 for o in jsons if not o.valid) + sum(1 for o in returned if not o.valid)
    p50, p99 = percentiles([o.seconds for o in done]) if done else (float("nan"), float("nan"))
    ttfts = [o.ttft for o in done if o.ttft is not None]
    return {"requests": len(outcomes), "errors": len(outcomes) - len(done),
            "first_error": next((o.error for o in outcomes if o.error), ""),
            "rps": len(done) / wall, "p50": p50, "p99": p99,
            "ttft_p50": percentiles(ttfts)[0] if ttfts else float("nan"),
            "json_valid": sum(1 for o in jsons if o.valid), "json": len(jsons),
            "calls_returned": len(returned), "tool": len(tools_),
            "args_valid": sum(1 for o in returned if o.valid),
            "calls_in_content": sum(1 for o in tools_ if o.call_in_content),
            "invalid": invalid, "checked": len(jsons) + len(returned), "wall": wall}


def peer_row(name: str, clients: int, m: dict) -> list:
    share = f"{100 * m['invalid'] / m['checked']:.0f} % ({m['invalid']}/{m['checked']})" if m["checked"] else "n/a"
    args = f"{m['args_valid']}/{m['calls_returned']}" if m["calls_returned"] else "-"
    return [name, clients, m["requests"], m["errors"], f"{m['rps']:.3f}", f"{m['p50']:.2f}", f"{m['p99']:.2f}",
            f"{m['ttft_p50']:.2f}", f"{m['json_valid']}/{m['json']}", f"{m['calls_returned']}/{m['tool']}", args,
            m["calls_in_content"], share]


PEER_HEADERS = ["server", "clients", "requests", "errors", "req/s", "p50 s", "p99 s", "TTFT p50 s",
                "json_schema valid", "tool calls returned", "call args valid", "call written in content",
                "invalid outputs"]


def peer_phase(args: argparse.Namespace, log_dir: Path) -> str:
    """ember vs llama-server at each client count, with 1 and 50 tools; one server process per (server, tools)."""
    from agent.models import model_path
    from _servers import Server, llama_server_binary

    binary = llama_server_binary()
    path = model_path(MODEL)
    sections = []
    for n_tools in args.tools:
        n_ctx = 4096 if n_tools < 20 else 8192
        offered = peer_tools(n_tools)
        rows = []
        for name in ("ember", "llama-server"):
            server = (Server.ember(MODEL, threads=args.threads, parallel=args.parallel, n_ctx=n_ctx, log_dir=log_dir)
                      if name == "ember" else
                      Server.llama_server(path, threads=args.threads, parallel=args.parallel, n_ctx=n_ctx,
                                          log_dir=log_dir))
            with server:
                run_clients(server.base_url, 1, 2, offered, start=1000)  # warm: one answer of each kind
                for clients in args.client_counts:
                    requests = max(args.requests, 16 // clients)
                    m = run_clients(server.base_url, clients, requests, offered)
                    print(name, n_tools, clients, m, flush=True)
                    rows.append((clients, name, m))
        rows.sort(key=lambda r: (r[0], r[1] != "ember"))
        sections += [f"{n_tools} tool{'s' if n_tools > 1 else ''} offered (n_ctx {n_ctx} per slot):", "",
                     markdown_table(PEER_HEADERS, [peer_row(name, c, m) for c, name, m in rows]), ""]
    import subprocess

    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stderr.strip()
    head = [*environment_lines(["llama-cpp-python", "starlette", "uvicorn", "openai"]),
            f"- llama-server: {' '.join(version.split())[:160]}", "",
            f"Both servers on 127.0.0.1, model {MODEL} (the same GGUF file), {args.threads} llama.cpp thread(s), "
            f"{args.parallel} slots (`ember serve --parallel {args.parallel}`, `llama-server -np {args.parallel} "
            "--jinja`, each slot its own n_ctx), one fresh process per server and tool count, warmed by one request "
            "of each kind. Each client (a thread with its own official `openai` client) streams its requests one "
            "after another, alternating a strict `json_schema` person (max_tokens 40, temperature 0.7, a seed per "
            "request) and a flight question with the tools under `auto` (max_tokens 80, greedy). TTFT: the first "
            "chunk with content or a tool call. Invalid outputs: json_schema answers and returned call arguments "
            "that do not validate (jsonschema), of those returned. Method: benchmarks/bench_serve.py --phase peer.",
            ""]
    return "\n".join(head + sections)


def parallel_phase(args: argparse.Namespace, log_dir: Path) -> str:
    """The load of `load_phase` against fresh `ember serve --parallel N` processes, two rounds (the second
    reversed), so drift on a shared machine shows as the spread between rounds."""
    from _servers import Server

    order = list(args.parallel_levels)
    results: dict[int, list[dict]] = {n: [] for n in order}
    for round_ in (order, list(reversed(order))):
        for n in round_:
            with Server.ember(MODEL, threads=args.threads, parallel=n, n_ctx=4096, log_dir=log_dir) as server:
                load_phase(server.base_url, 1, 2)  # warm
                m = load_phase(server.base_url, args.clients, args.requests)
                print("parallel", n, m, flush=True)
                results[n].append(m)
    base = sum(m["throughput_rps"] for m in results[order[0]]) / len(results[order[0]])
    rows = []
    for n in order:
        ms = results[n]
        rps = [m["throughput_rps"] for m in ms]
        mean = sum(rps) / len(rps)
        rows.append([n, sum(m["requests"] for m in ms), sum(m["errors"] for m in ms), sum(m["invalid"] for m in ms),
                     " / ".join(f"{r:.3f}" for r in rps), f"{mean:.3f}", f"{mean / base:.2f}x",
                     " / ".join(f"{m['p50_s']:.2f}" for m in ms), " / ".join(f"{m['p99_s']:.2f}" for m in ms)])
    return "\n".join([
        *environment_lines(["llama-cpp-python", "starlette", "uvicorn", "openai"]), "",
        f"{args.clients} clients x {args.requests} requests (strict json_schema and required tool calls alternate, "
        f"not streamed), {args.threads} llama.cpp thread(s), model {MODEL}, one fresh `ember serve --parallel N` "
        "process per run, warmed by two requests; two rounds, the second in reverse order (round 1 / round 2):", "",
        markdown_table(["--parallel", "requests", "errors", "invalid outputs", "req/s (rounds)", "req/s mean",
                        f"vs --parallel {order[0]}", "p50 s (rounds)", "p99 s (rounds)"], rows)])


def faults_phase(args: argparse.Namespace, log_dir: Path) -> str:
    """16 clients for ``--minutes``: a third of the requests leave mid-stream after 1-6 chunks; the rest are
    validated. Before and after: the same 8-client load and the server's RSS."""
    import openai
    from _servers import Server

    offered = peer_tools(1)
    with Server.ember(MODEL, threads=args.threads, parallel=args.parallel, n_ctx=4096, log_dir=log_dir) as server:
        run_clients(server.base_url, 1, 2, offered, start=1000)
        before = run_clients(server.base_url, 8, 4, offered)
        rss_before = server.rss_bytes()
        outcomes: list[Outcome] = []
        lock = threading.Lock()
        deadline = time.monotonic() + args.minutes * 60

        def client(c: int) -> None:
            rng = random.Random(c)
            api = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=3600)
            i = c
            while time.monotonic() < deadline:
                abort = rng.randint(1, 6) if rng.random() < 1 / 3 else None
                outcome = peer_request(api, 2000 + i, offered, abort_after=abort)
                with lock:
                    outcomes.append(outcome)
                i += 16

        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(c,)) for c in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        time.sleep(2)
        health = server.health()
        rss_fault = server.rss_bytes()
        after = run_clients(server.base_url, 8, 4, offered)
        rss_after = server.rss_bytes()
    aborted = [o for o in outcomes if o.error == "aborted"]
    completed = [o for o in outcomes if o.error is None]
    errors = [o for o in outcomes if o.error not in (None, "aborted")]
    fault = summarize([o for o in outcomes if o.error != "aborted"], wall)
    mib = 1024 * 1024
    print("faults", fault, health, flush=True)
    return "\n".join([
        *environment_lines(["llama-cpp-python", "starlette", "uvicorn", "openai"]), "",
        f"`ember serve --parallel {args.parallel}`, {args.threads} llama.cpp thread(s), model {MODEL}, the peer load "
        f"(strict json_schema / flight search under auto, streamed). 16 clients for {args.minutes:g} minutes; "
        "before each request a client draws whether to leave mid-stream (1 in 3, after 1-6 chunks, by closing the "
        "connection). Before and after: 8 clients x 4 requests.", "",
        markdown_table(["", "value"], [
            ["requests sent in the fault run", len(outcomes)],
            ["left mid-stream", len(aborted)],
            ["completed", len(completed)],
            ["errors (not a disconnect)", f"{len(errors)} {errors[0].error if errors else ''}".strip()],
            ["completed json_schema answers valid", f"{fault['json_valid']}/{fault['json']}"],
            ["completed flight answers with a call / args valid",
             f"{fault['calls_returned']}/{fault['tool']} / {fault['args_valid']}/{fault['calls_returned']}"],
            ["after the run: running / waiting (GET /health)", f"{health['running']} / {health['waiting']}"],
            ["8-client load before: req/s, p50 s", f"{before['rps']:.3f}, {before['p50']:.2f}"],
            ["8-client load after: req/s, p50 s", f"{after['rps']:.3f}, {after['p50']:.2f}"],
            ["8-client load before / after: invalid outputs, errors",
             f"{before['invalid']}, {before['errors']} / {after['invalid']}, {after['errors']}"],
            ["server RSS before / after the fault run / after the last load",
             f"{rss_before / mib:.0f} / {rss_fault / mib:.0f} / {rss_after / mib:.0f} MiB"],
        ])])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=["load", "parallel", "peer", "faults"], default="load")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=25, help="requests per client (peer: at least 16 in all)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-queue", type=int, default=16)
    parser.add_argument("--parallel", type=int, default=4, help="slots (load, peer, faults phases)")
    parser.add_argument("--parallel-levels", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 4, 8])
    parser.add_argument("--client-counts", type=lambda t: [int(x) for x in t.split(",")], default=[1, 4, 8])
    parser.add_argument("--tools", type=lambda t: [int(x) for x in t.split(",")], default=[1, 50],
                        help="peer phase: tools offered, one table each")
    parser.add_argument("--minutes", type=float, default=5.0, help="faults phase: how long the 16 clients run")
    parser.add_argument("--no-results", action="store_true", help="print only; do not write RESULTS.md")
    parser.add_argument("--ttft-only", action="store_true",
                        help="only the TTFT phase (its own RESULTS section): for a machine without other load")
    args = parser.parse_args(argv)
    if args.phase != "load":
        phases = {"parallel": (parallel_phase, PARALLEL_HEADING), "peer": (peer_phase, PEER_HEADING),
                  "faults": (faults_phase, FAULTS_HEADING)}
        run, heading = phases[args.phase]
        with tempfile.TemporaryDirectory() as logs:
            body = run(args, Path(logs))
        print(body)
        if not args.no_results:
            write_section(Path(__file__).resolve().parent / "RESULTS.md", heading, body)
        return 0

    from agent.serve import BackgroundServer, create_app, load_worker

    rows = []
    load = burst = None
    with tempfile.TemporaryDirectory() as cache:
        worker = load_worker(MODEL, n_ctx=4096, n_threads=args.threads, max_queue=args.max_queue,
                             prefix_cache=cache, parallel=args.parallel)
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
        worker.close(unload=True)
        restarted = load_worker(MODEL, n_ctx=4096, n_threads=args.threads, prefix_cache=cache,
                                parallel=args.parallel)
        with BackgroundServer(create_app(restarted)) as server:
            for row in rows:
                row.append(ttft(server.base_url, row[0], "Find a third thing for me."))
                print("restart", row, flush=True)
        restarted.close(unload=True)

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
