"""Starting a server: load the model once, build the worker and the app, run uvicorn (`ember serve` calls `serve`).

Owns the wiring and its defaults only (loopback, port 8000, the disk prefix cache under ``~/.cache/ember/kv``,
`DEFAULT_PARALLEL` slots).

    name | path ─► load_chat_model ─► parallel 1: ChatModelEngine(LlamaModel)
                                      parallel N: BatchedModel(N slots) ─► ChatModelEngine per slot
               ─► ModelWorker(engines, queue, deadline, PrefixCache) ─► create_app ─► uvicorn
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from agent.serve.worker import ModelWorker

__all__ = ["DEFAULT_PARALLEL", "load_worker", "serve"]

DEFAULT_PARALLEL = 4
"""Sequences decoded at once by default (``--parallel``): see docs/serve.md, "Many clients", for the measurement."""


def load_worker(model: str, *, n_ctx: int = 4096, n_threads: int | None = None, max_queue: int = 16,
                timeout_s: float = 600.0, prefix_cache: str | os.PathLike[str] | None | bool = True,
                refuse_repeated_calls: bool = True, parallel: int = DEFAULT_PARALLEL,
                progress: Callable[[str], None] | None = None) -> ModelWorker:
    """Load ``model`` (a store name or a GGUF path) and start its worker threads.

    Args:
        n_ctx: the context window of each request.
        prefix_cache: a directory for the disk KV prefix cache, True for the default one
            (`prefix_cache.default_cache_dir`), False or None for none.
        refuse_repeated_calls: see `ModelWorker.refuse_repeated_calls`.
        parallel: requests decoded at once, in one batch (1: one `LlamaModel` sequence, as before batching).
    """
    from agent.chat import load_chat_model
    from agent.engine import ChatModelEngine
    from agent.serve.prefix_cache import PrefixCache, default_cache_dir
    from constrained import BatchedModel

    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    # With several slots the loaded model's own context is only its tokenizer's: the batch has its own.
    chat = load_chat_model(model, n_ctx=n_ctx if parallel == 1 else 256, n_threads=n_threads, progress=progress)
    assert chat.codec is not None
    cache = None
    if prefix_cache:
        directory = default_cache_dir() if prefix_cache is True else Path(prefix_cache)
        cache = PrefixCache(directory, model_sha256=chat.model.sha256)
    if parallel == 1:
        engines = [ChatModelEngine(chat.model, chat.codec)]
    else:
        try:
            batch = BatchedModel(chat.model, n_slots=parallel, n_ctx=n_ctx, n_threads=n_threads)
        except BaseException:
            chat.model.close()
            raise
        engines = [ChatModelEngine(slot, chat.codec, prefix_store=cache) for slot in batch.slots]
    ids = tuple(dict.fromkeys([model, chat.path.name, chat.path.stem]))
    return ModelWorker(engines, model_ids=ids, max_queue=max_queue, timeout_s=timeout_s, prefix_cache=cache,
                       refuse_repeated_calls=refuse_repeated_calls)


def serve(model: str, *, host: str = "127.0.0.1", port: int = 8000, n_ctx: int = 4096, n_threads: int | None = None,
          api_key: str | None = None, max_queue: int = 16, timeout_s: float = 600.0,
          prefix_cache: str | os.PathLike[str] | None | bool = True, refuse_repeated_calls: bool = True,
          parallel: int = DEFAULT_PARALLEL, progress: Callable[[str], None] | None = None) -> None:
    """Serve ``model`` on ``host:port`` until interrupted."""
    import uvicorn

    from agent.serve.app import create_app

    worker = load_worker(model, n_ctx=n_ctx, n_threads=n_threads, max_queue=max_queue, timeout_s=timeout_s,
                         prefix_cache=prefix_cache, refuse_repeated_calls=refuse_repeated_calls, parallel=parallel,
                         progress=progress)
    if progress is not None:
        progress(f"serving {worker.model_ids[0]} on http://{host}:{port}/v1, {parallel} at once"
                 + (" (bearer key required)" if api_key else ""))
    try:
        uvicorn.run(create_app(worker, api_key=api_key), host=host, port=port, log_level="info", lifespan="off")
    finally:
        worker.close()
