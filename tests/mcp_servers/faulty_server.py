"""A small MCP server (stdio, newline-delimited JSON-RPC, no SDK) that misbehaves on request, for fault tests.

Real servers are used wherever they can show the behaviour (tests/mcp_servers/package.json, mcp-server-time); this
one does what no well-kept server does on purpose: write garbage on stdout mid-call, die mid-call, answer with
structured content that breaks its own output schema, change its tool list, offer a schema the engine refuses. It
records what it received (``tools/call`` with its ``_meta``, ``notifications/cancelled``) as JSON lines in the file
named by ``$FAULTY_LOG``, so a test can see what reached the server.

    python faulty_server.py            tools: sleep, garbage, crash, mismatch, grow, write_note, slow_write, remote_ref
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

LOG = os.environ.get("FAULTY_LOG")
_out = threading.Lock()
_grown = threading.Event()

OBJECT = {"type": "object", "properties": {}, "additionalProperties": False}
TOOLS = [
    {"name": "sleep", "description": "Sleep for some seconds, then say so.",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]},
     "annotations": {"readOnlyHint": True}},
    {"name": "garbage", "description": "Answer with a line that is not JSON-RPC.", "inputSchema": OBJECT,
     "annotations": {"readOnlyHint": True}},
    {"name": "crash", "description": "Die (SIGKILL) in the middle of the call.", "inputSchema": OBJECT,
     "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}},
    {"name": "mismatch", "description": "Return structured content its output schema refuses.", "inputSchema": OBJECT,
     "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
     "annotations": {"readOnlyHint": True}},
    {"name": "grow", "description": "Add a tool and announce the new list.", "inputSchema": OBJECT,
     "annotations": {"readOnlyHint": False, "destructiveHint": False}},
    {"name": "write_note", "description": "Append a note to the notes file.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
     "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}},
    {"name": "slow_write", "description": "Append a note, then take some seconds to answer.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}, "seconds": {"type": "number"}},
                     "required": ["text", "seconds"]},
     "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}},
    {"name": "remote_ref", "description": "A schema with a remote $ref (the engine refuses it).",
     "inputSchema": {"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}},
     "annotations": {"readOnlyHint": True}},
]
EXTRA = {"name": "extra", "description": "The tool grow added.", "inputSchema": OBJECT,
         "annotations": {"readOnlyHint": True}}


def log(record: dict) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def send(message: dict) -> None:
    with _out:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def result(rid: object, value: dict) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": value})


def text(rid: object, body: str, **extra: object) -> None:
    result(rid, {"content": [{"type": "text", "text": body}], "isError": False, **extra})


def call(rid: object, params: dict) -> None:
    name, args = params.get("name"), params.get("arguments") or {}
    log({"call": name, "id": rid, "arguments": args, "meta": params.get("_meta")})
    if name == "sleep":
        time.sleep(float(args["seconds"]))
        text(rid, f"slept {args['seconds']} s")
    elif name == "garbage":
        with _out:
            sys.stdout.write("this is not JSON-RPC\n")
            sys.stdout.flush()
    elif name == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    elif name == "mismatch":
        text(rid, '{"n": "three"}', structuredContent={"n": "three"})
    elif name == "grow":
        _grown.set()
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        text(rid, "grown")
    elif name == "write_note":
        notes = os.environ.get("FAULTY_NOTES")
        if notes:
            with open(notes, "a", encoding="utf-8") as f:
                f.write(args["text"] + "\n")
        text(rid, "noted")
    elif name == "slow_write":
        with open(os.environ["FAULTY_NOTES"], "a", encoding="utf-8") as f:
            f.write(args["text"] + "\n")
        time.sleep(float(args["seconds"]))
        text(rid, "written")
    elif name == "extra":
        text(rid, "extra")
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"Unknown tool: {name}"}})


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            log({"initialize": params.get("protocolVersion")})
            result(rid, {"protocolVersion": params.get("protocolVersion", "2025-11-25"),
                         "capabilities": {"tools": {"listChanged": True}},
                         "serverInfo": {"name": "faulty", "version": "0.0.1"}})
        elif method == "tools/list":
            result(rid, {"tools": TOOLS + ([EXTRA] if _grown.is_set() else [])})
        elif method == "tools/call":
            threading.Thread(target=call, args=(rid, params), daemon=True).start()
        elif method == "ping":
            result(rid, {})
        elif method == "notifications/cancelled":
            log({"cancelled": params.get("requestId"), "reason": params.get("reason")})
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
    print("stdin closed; exiting", file=sys.stderr)


if __name__ == "__main__":
    main()
