"""Shared pieces of the hostile-input suite: example budgets, a guarded subprocess worker, session builders.

    budget(ci, fuzz)      hypothesis settings: ``ci`` examples by default, ``fuzz`` under the fuzz profile
    Guarded(target)       a long-lived worker process (RLIMIT_AS, per-call wall timeout): a call returns
                          ("ok", value) | ("error", (type, message)) | ("timeout", seconds) | ("died", exit code)
    model_text(codec, a)  what a model generates for an action, cut out of the codec's own rendering
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
CORPUS = HERE / "corpus"

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
               HealthCheck.large_base_example]


def fuzzing() -> bool:
    """Whether the ``fuzz`` profile is active (evaluated at decoration time, after pytest loaded the profile)."""
    return settings.get_current_profile_name() == "fuzz"


def budget(ci: int, fuzz: int | None = None) -> settings:
    """Settings for one boundary: ``ci`` examples normally, ``fuzz`` (default: the profile's) when fuzzing."""
    n = (fuzz or settings.default.max_examples) if fuzzing() else ci
    return settings(max_examples=n, deadline=None, suppress_health_check=_SUPPRESSED, derandomize=False)


# -- a guarded worker process ---------------------------------------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import importlib, os, pickle, resource, struct, sys, traceback
    limit = int(sys.argv[2])
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    module, _, name = sys.argv[1].partition(":")
    fn = getattr(importlib.import_module(module), name)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    def send(obj):
        data = pickle.dumps(obj)
        out.write(struct.pack("<Q", len(data)) + data); out.flush()
    send(("ready", os.getpid()))
    while True:
        head = inp.read(8)
        if len(head) < 8:
            break
        old = sys.getrecursionlimit(); sys.setrecursionlimit(50000)
        payload = pickle.loads(inp.read(struct.unpack("<Q", head)[0]))
        sys.setrecursionlimit(old)
        try:
            send(("ok", fn(payload)))
        except MemoryError:
            send(("error", ("MemoryError", "address-space limit hit")))
        except BaseException as exc:
            send(("error", (type(exc).__name__, (str(exc)[:300] + "\\n" + traceback.format_exc()[-1500:]))))
    """
)


class Guarded:
    """Runs ``module:function`` on pickled payloads in a separate process under an address-space limit and a
    per-call wall timeout; a hung or dead worker is killed and replaced on the next call."""

    def __init__(self, target: str, *, mem_bytes: int = 3 << 30, timeout_s: float = 60.0) -> None:
        self.target = target
        self.mem_bytes = mem_bytes
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.calls = 0
        self.slowest_s = 0.0

    def _spawn(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(HERE)]), EMBER_CACHE_DIR="off",
                   OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER, self.target, str(self.mem_bytes)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        status, _ = self._receive(120.0)
        assert status == "ready", status

    def _receive(self, timeout: float) -> tuple[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        buf = b""
        need = 8
        length = None
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", timeout
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, max(need - len(buf), 1 << 16) if length is None else need - len(buf))
            if not chunk:
                return "died", self.proc.wait()
            buf += chunk
            if length is None and len(buf) >= 8:
                length = struct.unpack("<Q", buf[:8])[0]
                need = 8 + length
        return pickle.loads(buf[8:need])

    def __call__(self, payload: Any) -> tuple[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._spawn()
        assert self.proc is not None and self.proc.stdin is not None
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(50000)
        try:
            data = pickle.dumps(payload)
        finally:
            sys.setrecursionlimit(old)
        started = time.monotonic()
        try:
            self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.close()
            return "died", -1
        status, value = self._receive(self.timeout_s)
        elapsed = time.monotonic() - started
        self.calls += 1
        self.slowest_s = max(self.slowest_s, elapsed)
        if status in ("timeout", "died"):
            self.close()
        return status, value

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()  # type: ignore[union-attr]
                except Exception:
                    pass
            self.proc = None
