"""The two servers `bench_serve.py` drives, as processes on loopback ports: `ember serve` and llama.cpp's own
`llama-server`, the latter built here from the llama.cpp that the pinned llama-cpp-python sdist vendors.

Owns starting, health-waiting, RSS reading and stopping a server process, and the one-time build of llama-server
(never committed: it lives in ``~/.cache/ember/llama-server``). Refuses to tune the peer: it runs with its documented
options only (``--jinja`` for tool calls, the same model file, threads, per-slot context and ``--parallel``).

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 ─► vendor/llama.cpp
        ─► cmake -DLLAMA_BUILD_SERVER=ON ─► cmake --build --target llama-server ─► bin/llama-server (cached)
    Server.ember(...) | Server.llama_server(...) ─► wait for /health ─► base_url ─► rss_bytes() ─► stop()
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx2 as httpx

LLAMA_CPP_PYTHON = "0.3.36"
BUILD_ROOT = Path(os.environ.get("EMBER_LLAMA_SERVER_DIR", Path.home() / ".cache" / "ember" / "llama-server"))
REPO_ROOT = Path(__file__).resolve().parent.parent
EMBER = REPO_ROOT / ".venv" / "bin" / "ember"


def llama_server_binary(progress=print) -> Path:
    """The llama-server of the pinned llama-cpp-python's vendored llama.cpp, built on first use (minutes)."""
    build = BUILD_ROOT / f"build-{LLAMA_CPP_PYTHON}"
    binary = build / "bin" / "llama-server"
    if binary.is_file():
        return binary
    BUILD_ROOT.mkdir(parents=True, exist_ok=True)
    sdist = BUILD_ROOT / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not sdist.is_file():
        progress(f"downloading the llama-cpp-python {LLAMA_CPP_PYTHON} sdist")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(BUILD_ROOT)], check=True)
    source = BUILD_ROOT / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"
    if not source.is_dir():
        with tarfile.open(sdist) as archive:
            archive.extractall(BUILD_ROOT, filter="data")
    # The flags of the wheel the project builds (Makefile): native CPU code without AMX-INT8.
    flags = "-mno-amx-int8" if os.uname().machine == "x86_64" else ""
    progress(f"building llama-server from {source} (several minutes on 2 cores)")
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                    "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_OPENSSL=OFF", f"-DCMAKE_C_FLAGS={flags}",
                    f"-DCMAKE_CXX_FLAGS={flags}"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
                   check=True, stdout=subprocess.DEVNULL)
    return binary


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    """One server process on 127.0.0.1."""

    name: str
    """``ember`` or ``llama-server``."""
    command: list[str]
    port: int
    log: Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    @classmethod
    def ember(cls, model: str, *, threads: int, parallel: int, n_ctx: int, log_dir: Path,
              prefix_cache: Path | None = None, max_queue: int = 64) -> Server:
        port = free_port()
        command = [str(EMBER), "serve", "--model", model, "--port", str(port), "--threads", str(threads),
                   "--parallel", str(parallel), "--n-ctx", str(n_ctx), "--max-queue", str(max_queue)]
        command += ["--prefix-cache", str(prefix_cache)] if prefix_cache else ["--no-prefix-cache"]
        return cls("ember", command, port, log_dir / f"ember-{port}.log")

    @classmethod
    def llama_server(cls, model_path: Path, *, threads: int, parallel: int, n_ctx: int, log_dir: Path) -> Server:
        """llama-server with its documented options: ``--jinja`` (the model's chat template, tool calls), the
        same threads for generation and batches, ``--parallel`` slots of ``n_ctx`` tokens each (``-c`` is the
        total), continuous batching (its default)."""
        port = free_port()
        command = [str(llama_server_binary()), "-m", str(model_path), "--port", str(port), "--host", "127.0.0.1",
                   "-t", str(threads), "-tb", str(threads), "-c", str(n_ctx * parallel), "-np", str(parallel),
                   "--jinja"]
        return cls("llama-server", command, port, log_dir / f"llama-server-{port}.log")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 300.0) -> Server:
        handle = open(self.log, "wb")
        self.process = subprocess.Popen(self.command, stdout=handle, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.process.returncode}); see {self.log}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name} did not get healthy in {timeout:.0f} s; see {self.log}")

    def rss_bytes(self) -> int:
        """Resident memory of the server process now."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def health(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=30).json()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
