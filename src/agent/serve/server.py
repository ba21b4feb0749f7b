"""Starting a server: load the model once, build the worker and the app, run uvicorn (`ember serve` calls `serve`).

Owns the wiring and its defaults only (loopback, port 8000, the disk prefix cache under ``~/.cache/ember/kv``).

    name | path ─► load_chat_model ─► ChatModelEngine ─► ModelWorker(queue, deadline, PrefixCache) ─► create_app
                                                                                                  ─► uvicorn
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from agent.serve.worker import ModelWorker

__all__ = ["load_worker", "serve"]


def load_worker(model: str, *, n_ctx: int = 4096, n_threads: int | None = None, max_queue: int = 16,
                timeout_s: float = 600.0, prefix_cache: str | os.PathLike[str] | None | bool = True,
                refuse_repeated_calls: bool = True, progress: Callable[[str], None] | None = None) -> ModelWorker:
    """Load ``model`` (a store name or a GGUF path) and start its worker thread.

    Args:
        prefix_cache: a directory for the disk KV prefix cache, True for the default one
            (`prefix_cache.default_cache_dir`), False or None for none.
        refuse_repeated_calls: see `ModelWorker.refuse_repeated_calls`.
    """
    from agent.chat import load_chat_model
    from agent.engine import ChatModelEngine
    from agent.serve.prefix_cache import PrefixCache, default_cache_dir

    chat = load_chat_model(model, n_ctx=n_ctx, n_threads=n_threads, progress=progress)
    assert chat.codec is not None
    engine = ChatModelEngine(chat.model, chat.codec)
    cache = None
    if prefix_cache:
        directory = default_cache_dir() if prefix_cache is True else Path(prefix_cache)
        cache = PrefixCache(directory, model_sha256=chat.model.sha256)
    ids = tuple(dict.fromkeys([model, chat.path.name, chat.path.stem]))
    return ModelWorker(engine, model_ids=ids, max_queue=max_queue, timeout_s=timeout_s, prefix_cache=cache,
                       refuse_repeated_calls=refuse_repeated_calls)


def serve(model: str, *, host: str = "127.0.0.1", port: int = 8000, n_ctx: int = 4096, n_threads: int | None = None,
          api_key: str | None = None, max_queue: int = 16, timeout_s: float = 600.0,
          prefix_cache: str | os.PathLike[str] | None | bool = True, refuse_repeated_calls: bool = True,
          progress: Callable[[str], None] | None = None) -> None:
    """Serve ``model`` on ``host:port`` until interrupted."""
    import uvicorn

    from agent.serve.app import create_app

    worker = load_worker(model, n_ctx=n_ctx, n_threads=n_threads, max_queue=max_queue, timeout_s=timeout_s,
                         prefix_cache=prefix_cache, refuse_repeated_calls=refuse_repeated_calls, progress=progress)
    if progress is not None:
        progress(f"serving {worker.model_ids[0]} on http://{host}:{port}/v1"
                 + (" (bearer key required)" if api_key else ""))
    try:
        uvicorn.run(create_app(worker, api_key=api_key), host=host, port=port, log_level="info", lifespan="off")
    finally:
        worker.close()
