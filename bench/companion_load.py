"""Load test of the companion: concurrent loopback clients for a fixed time, figures printed.

    python bench/companion_load.py                      # start a companion, 8 clients, 60 s
    python bench/companion_load.py --clients 4 --seconds 30
    python bench/companion_load.py --url http://127.0.0.1:8765 --token TOKEN   # a running one

Without ``--url`` it starts ``veil serve`` on a free loopback port with a fresh
``VEIL_HOME`` (the dequantized model cache of ``~/.veil/models`` is linked, not
copied).  Before the clients start it launches the two things that used to starve
the server: an audit job that runs until cancelled (the published gradient method,
K = 100000) and a long generation (``--long-tokens``, default 512: about 30 s on
two busy cores, within the model queue's 60 s wait; longer ones make the chats
queued behind them wait past ``queue_timeout_s`` and get 503, as designed).  Then
``--clients`` clients (at most 32) mix chat (plain and streamed), search, uploads
and audit status for ``--seconds``, while a prober asks ``/healthz`` every 0.25 s
from a process of its own.

Prints the throughput, p50/p95/p99 latency per route, the answers by status code,
and whether ``/healthz`` stayed under 200 ms.  Goal: no 5xx, ``/healthz`` p99 under
200 ms, no request past its timeout.  Loopback only: the script refuses any other host.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

ROOT = Path(__file__).resolve().parents[1]
MAX_CLIENTS = 32
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
QUESTIONS = ("What did the note say about gout?", "Any asthma follow-up?", "Fever advice?")
# The status an error event in a stream stands for (its envelope's type).
STREAM_ERRORS = {"timeout_error": 504, "server_busy_error": 503, "invalid_request_error": 400}
LONG_PROMPT = (
    "Write a long, detailed essay on the history of the Roman Empire, in at least ten paragraphs."
)
WEIGHTS = {"chat": 3, "chat_stream": 3, "search": 4, "upload": 1, "audit_status": 3}


@dataclass
class Record:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    codes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, route: str, code: str, seconds: float) -> None:
        self.latencies[route].append(seconds)
        self.codes[route][code] += 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_server(home: Path, port: int, threads: int | None) -> subprocess.Popen[bytes]:
    models = Path(os.environ.get("VEIL_HOME") or Path.home() / ".veil") / "models"
    home.mkdir(parents=True, exist_ok=True)
    if models.is_dir():
        (home / "models").symlink_to(models)
    env = {**os.environ, "VEIL_HOME": str(home)}
    command = [sys.executable, "-m", "companion", "serve", "--port", str(port)]
    if threads:
        command += ["--threads", str(threads)]
    log = (home / "server.log").open("wb")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


async def _wait_ready(base: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{base}/healthz", timeout=2)).status_code == 200:
                    return
            await asyncio.sleep(0.5)
    raise SystemExit(f"the companion at {base} did not answer /healthz within {timeout:g} s")


def _document(n: int) -> bytes:
    topic = random.choice(("gout", "asthma", "fever", "cats"))
    words = " ".join(random.choice(("joint", "pain", "dose", "rest", "note")) for _ in range(150))
    return f"Note {n} {time.time_ns()}: {topic}. {words}.".encode()


async def _timed(record: Record, route: str, call) -> None:
    start = time.perf_counter()
    try:
        code = str(await call())
    except httpx.TimeoutException:
        code = "timeout"
    except httpx.HTTPError as exc:
        code = type(exc).__name__
    record.add(route, code, time.perf_counter() - start)


async def _client(
    base: str, headers: dict[str, str], stop: float, record: Record, args: argparse.Namespace
) -> None:
    timeout = httpx.Timeout(args.request_timeout)
    routes, weights = zip(*WEIGHTS.items(), strict=True)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=timeout) as client:
        n = 0
        while time.monotonic() < stop:
            n += 1
            route = random.choices(routes, weights)[0]
            ask = {
                "messages": [{"role": "user", "content": random.choice(QUESTIONS)}],
                "collection": "load",
                "max_tokens": args.chat_tokens,
                "defense": random.choice(("none", "copy_aware", "bounded")),
            }

            async def call(route: str = route, ask: dict[str, object] = ask, n: int = n) -> int:
                if route == "chat":
                    return (await client.post("/v1/chat/completions", json=ask)).status_code
                if route == "chat_stream":
                    async with client.stream(
                        "POST", "/v1/chat/completions", json={**ask, "stream": True}
                    ) as response:
                        async for line in response.aiter_lines():
                            if '"error"' in line and line.startswith("data: "):
                                kind = json.loads(line[6:])["error"].get("type", "error")
                                return STREAM_ERRORS.get(kind, 500)  # an error event
                        return response.status_code
                if route == "search":
                    body = {"query": random.choice(QUESTIONS), "collection": "load", "top_k": 3}
                    return (await client.post("/v1/search", json=body)).status_code
                if route == "upload":
                    files = [("files", (f"note{n}.txt", _document(n), "text/plain"))]
                    response = await client.post(
                        "/v1/documents", files=files, data={"collection": "load"}
                    )
                    return response.status_code
                status = await client.get("/v1/audit/setup")
                if status.status_code != 200:
                    return status.status_code
                return (await client.get("/v1/audit/inversion")).status_code

            await _timed(record, route, call)


def _probe_process(base: str, seconds: float, out: Any) -> None:
    """Ask /healthz every 0.25 s from a process of its own (the clients' event loop and GIL
    would otherwise add their own delays to what is measured)."""
    results = []
    stop = time.monotonic() + seconds
    with httpx.Client(base_url=base, timeout=10) as client:
        while time.monotonic() < stop:
            start = time.perf_counter()
            try:
                code = str(client.get("/healthz").status_code)
            except httpx.TimeoutException:
                code = "timeout"
            except httpx.HTTPError as exc:
                code = type(exc).__name__
            results.append((code, time.perf_counter() - start))
            time.sleep(0.25)
    out.put(results)


async def _probe(base: str, seconds: float, record: Record) -> None:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_probe_process, args=(base, seconds, queue), daemon=True)
    process.start()
    results = await asyncio.to_thread(queue.get)
    process.join()
    for code, latency in results:
        record.add("healthz", code, latency)


async def _background(client: httpx.AsyncClient, args: argparse.Namespace) -> dict:
    """The audit job that runs until cancelled, and the long generation."""
    seed = [("files", ("seed.txt", _document(0) * 3, "text/plain"))]
    await client.post("/v1/documents", files=seed, data={"collection": "load"})
    job = await client.post(
        "/v1/audit/inversion",
        json={"text": "Patient Jane Roe, 52", "method": "gradient", "steps": 100_000},
    )

    async def long_generation() -> str:
        start = time.perf_counter()
        response = await client.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": LONG_PROMPT}],
                "max_tokens": args.long_tokens,
                "defense": "none",
            },
        )
        tokens = (
            response.json().get("usage", {}).get("completion_tokens")
            if response.is_success
            else None
        )
        return (
            f"HTTP {response.status_code}, {tokens} tokens in {time.perf_counter() - start:.0f} s"
        )

    long_task = asyncio.create_task(long_generation())
    return {"audit": job, "long": long_task}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(record: Record, seconds: float, clients: int, background: dict[str, str]) -> str:
    lines = [
        f"{clients} clients for {seconds:.0f} s; background: {background}",
        "",
        "| route | requests | per s | p50 ms | p95 ms | p99 ms | answers |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    total = 0
    for route in sorted(record.latencies):
        lat = record.latencies[route]
        total += len(lat)
        answers = ", ".join(f"{c}: {n}" for c, n in sorted(record.codes[route].items()))
        lines.append(
            f"| {route} | {len(lat)} | {len(lat) / seconds:.2f} | {1000 * _pct(lat, 0.5):.0f} | "
            f"{1000 * _pct(lat, 0.95):.0f} | {1000 * _pct(lat, 0.99):.0f} | {answers} |"
        )
    errors: Counter[str] = Counter()
    for counts in record.codes.values():
        for code, n in counts.items():
            if not code.isdigit() or int(code) >= 400:
                errors[code] += n
    five = sum(n for code, n in errors.items() if not code.isdigit() or int(code) >= 500)
    health = record.latencies.get("healthz", [])
    worst = max(health) if health else float("nan")
    lines += [
        "",
        f"throughput: {total / seconds:.2f} requests/s; errors by code: {dict(errors) or 'none'}",
        f"5xx or failed requests: {five}",
        f"/healthz: p99 {1000 * _pct(health, 0.99):.0f} ms, max {1000 * worst:.0f} ms, "
        f"mean {1000 * statistics.fmean(health) if health else float('nan'):.0f} ms; "
        f"stayed under 200 ms throughout: {'yes' if health and worst < 0.2 else 'no'}",
    ]
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> str:
    host = urlparse(args.url).hostname or ""
    if host not in LOOPBACK:
        raise SystemExit(f"--url must be a loopback address, got {host!r}")
    base = args.url.rstrip("/")
    await _wait_ready(base)
    headers = {"Authorization": f"Bearer {args.token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=900) as side:
        return await _run(base, headers, side, args)


async def _run(
    base: str, headers: dict[str, str], side: httpx.AsyncClient, args: argparse.Namespace
) -> str:
    background = await _background(side, args)
    await asyncio.sleep(2.0)  # the audit job and the long generation are running
    record = Record()
    stop = time.monotonic() + args.seconds
    clients = [_client(base, headers, stop, record, args) for _ in range(args.clients)]
    await asyncio.gather(_probe(base, args.seconds, record), *clients)
    audit = background["audit"]
    long_task: asyncio.Task = background["long"]
    state = {"audit job": f"HTTP {audit.status_code}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
        if audit.status_code == 202:
            job_id = audit.json()["id"]
            state["audit job"] = (await client.get(f"/v1/audit/inversion/{job_id}")).json()[
                "status"
            ]
            await client.delete(f"/v1/audit/inversion/{job_id}")
    state["long generation"] = long_task.result() if long_task.done() else "still running"
    long_task.cancel()
    with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
        await long_task
    return report(record, args.seconds, args.clients, state)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running companion (loopback); default: start one")
    parser.add_argument("--token", help="its API token (with --url)")
    parser.add_argument("--clients", type=int, default=8, help=f"1..{MAX_CLIENTS} (default 8)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--chat-tokens", type=int, default=8, help="max_tokens of each chat")
    parser.add_argument(
        "--long-tokens", type=int, default=512, help="max_tokens of the long generation"
    )
    parser.add_argument("--request-timeout", type=float, default=180.0)
    parser.add_argument("--threads", type=int, default=None, help="the started server's threads")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients must be 1..{MAX_CLIENTS}")
    server = None
    with tempfile.TemporaryDirectory(prefix="veil-load-") as tmp:
        if args.url is None:
            port = _free_port()
            server = _start_server(Path(tmp) / "home", port, args.threads)
            args.url = f"http://127.0.0.1:{port}"
            token_file = Path(tmp) / "home" / "token"
            for _ in range(600):
                if token_file.exists() and token_file.read_text().strip():
                    break
                time.sleep(0.1)
            args.token = token_file.read_text().strip()
        elif not args.token:
            parser.error("--url needs --token")
        try:
            text = asyncio.run(run(args))
        finally:
            if server is not None:
                server.terminate()
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    print("the server needed SIGKILL after SIGTERM", file=sys.stderr)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
