"""`ember serve`: an OpenAI-compatible chat-completions server whose tool calls and JSON answers are constrained.

The server sits on the agent layer's codecs and engine; it constrains every tool call (the codec's grammar, each
tool's parameter schema) and every ``json_schema`` answer, refuses what it cannot enforce with a 400, and never
executes a tool: a call in an answer is a request to the client.

    HTTP ─► app.py (routes, key, SSE) ─► request.py (body ─► ChatRequest, 400s) ─► worker.py (queue, one thread,
    engine.run_turn, cancel, rollback) ─► response.py (chat.completion / chunks)
                                           └─ prefix_cache.py (system + tools KV on disk)
    server.py: load the model, wire the pieces, run uvicorn
"""

from agent.serve.app import BackgroundServer, create_app
from agent.serve.errors import ApiError
from agent.serve.request import ChatRequest, parse_chat_request
from agent.serve.server import load_worker, serve
from agent.serve.worker import ModelWorker

__all__ = ["ApiError", "BackgroundServer", "ChatRequest", "ModelWorker", "create_app", "load_worker",
           "parse_chat_request", "serve"]
