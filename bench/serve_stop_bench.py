"""How long ``veil serve`` takes to exit after Ctrl-C once it is up (issue 25.3): figures, not a test.

    python bench/serve_stop_bench.py               # 3 runs of each case
    python bench/serve_stop_bench.py --runs 5 --threads 2

Each run starts ``veil serve`` (the small bundled model, preloaded) on a free loopback
port with a fresh ``VEIL_HOME`` (the dequantized model cache of ``~/.veil/models`` is
linked, not copied, so no run converts the model), waits for ``/healthz``, then sends
SIGINT -- the signal Ctrl-C sends -- and times until the process has exited:

* ``idle``: nothing running;
* ``starting``: an answer was just asked for (SIGINT 0.2 s after its opening event:
  retrieval and the prompt's prefill, one forward pass the cancel flag cannot interrupt),
  a second one is queued behind it, and the chat page's keep-alive connection is open;
* ``streaming``: the same, SIGINT 0.5 s after the answer's first word (up to 512 tokens);

Prints each run's seconds and exit code, the median and the worst per case, and how each
stream ended (an error event "the companion is stopping", [DONE], or a dropped
connection).  The goal is 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
LONG = "Write a long, detailed essay on the history of the Roman Empire, in ten paragraphs."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(
    home: Path, port: int, threads: int | None, backend: str | None = None
) -> subprocess.Popen[bytes]:
    models = Path(os.environ.get("VEIL_HOME") or Path.home() / ".veil") / "models"
    home.mkdir(parents=True, exist_ok=True)
    if models.is_dir():
        (home / "models").symlink_to(models)
    env = {**os.environ, "VEIL_HOME": str(home)}
    env.pop("VEIL_TOKEN_PATH", None)
    command = [sys.executable, "-m", "companion", "serve", "--port", str(port)]
    if threads:
        command += ["--threads", str(threads)]
    if backend:
        command += ["--backend", backend]
    log = (home / "server.log").open("wb")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"veil serve exited with {proc.returncode} before it was up")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"veil serve did not answer /healthz within {timeout:g} s")


def stream(
    base: str, token: str, opened: threading.Event, seen: threading.Event, result: dict
) -> None:
    """One streamed chat answer; sets ``opened`` at its opening event (before the model
    runs: retrieval, the queue, the prefill) and ``seen`` at its first word."""
    body = {"messages": [{"role": "user", "content": LONG}], "stream": True, "max_tokens": 512}
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.stream(
            "POST", f"{base}/v1/chat/completions", json=body, headers=headers, timeout=120
        ) as response:
            result["status"] = response.status_code
            for line in response.iter_lines():
                if line == "data: [DONE]":
                    result.setdefault("end", "[DONE]")
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                opened.set()
                if event.get("error"):
                    result["end"] = "error event: " + event["error"]["message"]
                elif event["choices"][0]["delta"].get("content"):
                    seen.set()
                elif event["choices"][0].get("finish_reason"):
                    result["finish"] = event["choices"][0]["finish_reason"]
        result.setdefault("end", "closed")
    except httpx.HTTPError as exc:
        result["end"] = type(exc).__name__
    finally:
        opened.set()
        seen.set()


def one_run(case: str, threads: int | None, backend: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        proc = start(home, port, threads, backend)
        try:
            wait_ready(base, proc)
            used = httpx.get(f"{base}/healthz", timeout=5).json().get("backend")
            token = (home / "token").read_text().strip()
            results: list[dict] = []
            threads_: list[threading.Thread] = []
            keepalive = None
            if case != "idle":
                keepalive = httpx.Client(base_url=base, timeout=5)
                keepalive.get("/")  # the page's connection, kept alive
                for _ in range(2):  # the running answer and one queued behind it
                    opened, seen = threading.Event(), threading.Event()
                    results.append({})
                    thread = threading.Thread(
                        target=stream, args=(base, token, opened, seen, results[-1]), daemon=True
                    )
                    thread.start()
                    threads_.append(thread)
                    if len(results) == 1:
                        (seen if case == "streaming" else opened).wait(120)
                time.sleep(0.5 if case == "streaming" else 0.2)
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            took = time.monotonic() - sent
            for thread in threads_:
                thread.join(10)
            if keepalive is not None:
                keepalive.close()
            return {
                "case": case,
                "backend": used,
                "exit_s": round(took, 2),
                "code": code,
                "streams": [r.get("end", "still open") for r in results],
            }
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="veil serve --threads")
    parser.add_argument("--backend", default=None, help="veil serve --backend (torch, llama.cpp)")
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"idle": [], "starting": [], "streaming": []}
    for _ in range(args.runs):
        for case in figures:
            run = one_run(case, args.threads, args.backend)
            figures[case].append(run["exit_s"])
            print(json.dumps(run), flush=True)
    for case, values in figures.items():
        print(
            f"{case}: Ctrl-C to exit median {statistics.median(values):.2f} s, "
            f"max {max(values):.2f} s over {len(values)} runs (goal 2 s)"
        )


if __name__ == "__main__":
    main()
