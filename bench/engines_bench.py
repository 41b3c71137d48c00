"""Concurrent chats on the in-process engine and on vLLM: answers per second, latency, 5xx.

The companion is started twice in this process (uvicorn in a thread, the real HTTP API),
once per engine, with the same model (SmolLM2-135M-Instruct by default, float32), and asked
the same questions by 1, 8 and 32 concurrent clients: each chat asks for 32 tokens under
the guests' default defense (copy_aware).  Printed per engine and concurrency: answers/s,
p50/p95 latency, how many 503s and other 5xx, and the memory of the serving processes
(the companion's RSS; for vLLM also its server's process tree).  The ratio vLLM /
in-process of answers per second is the figure issue 28 asks for; the in-process engine
answers one chat at a time and turns clients away (503) once ``queue_size`` (8) wait.

Run: ``python bench/engines_bench.py [--model M] [--requests-per-client 2] [--out docs/engines]``
(needs ``scripts/setup.sh --vllm``).  ``--smoke``: 1 and 2 clients, 4 tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUESTIONS = [
    "Name three colours.",
    "What is a prime number?",
    "Give a synonym for happy.",
    "What is the boiling point of water?",
    "Name a planet in the solar system.",
    "What do bees make?",
    "Say hello in French.",
    "What is two plus two?",
]


def _rss(pid: int, tree: bool) -> int:
    import psutil

    proc = psutil.Process(pid)
    procs = [proc, *proc.children(recursive=True)] if tree else [proc]
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):  # a child that just ended
            total += p.memory_info().rss
    return total


async def _load(url: str, token: str, clients: int, per_client: int, tokens: int) -> dict:
    import httpx

    latencies: list[float] = []
    codes: list[int] = []

    async def client(n: int, http: httpx.AsyncClient) -> None:
        for i in range(per_client):
            question = QUESTIONS[(n * per_client + i) % len(QUESTIONS)]
            body = {
                "messages": [{"role": "user", "content": f"{question} ({n}.{i})"}],
                "max_tokens": tokens,
                "defense": "copy_aware",
                "fresh": True,
            }
            start = time.perf_counter()
            response = await http.post("/v1/chat/completions", json=body)
            codes.append(response.status_code)
            if response.status_code == 200:
                latencies.append(time.perf_counter() - start)

    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=600, limits=limits
    ) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(n, http) for n in range(clients)))
        wall = time.perf_counter() - start
    ok = len(latencies)
    latencies.sort()
    return {
        "clients": clients,
        "requests": len(codes),
        "answered": ok,
        "answers_per_s": ok / wall if wall else 0.0,
        "p50_s": statistics.median(latencies) if latencies else None,
        "p95_s": latencies[min(ok - 1, int(0.95 * ok))] if latencies else None,
        "http_503": codes.count(503),
        "other_5xx": sum(1 for c in codes if c >= 500 and c != 503),
        "wall_s": wall,
    }


def run_engine(engine: str, args: argparse.Namespace, home: Path) -> dict[str, Any]:
    from companion.app import create_app
    from companion.settings import Settings
    from tests.companion.fakes import KeywordEmbedder, free_port, serve_http

    port = free_port()
    settings = Settings(
        home=home / engine,
        port=port,
        model=args.model,
        engine=engine,
        dtype="float32",
        backend="torch",
        vllm_max_concurrency=max(args.clients),
    )
    started = time.perf_counter()
    app = create_app(settings, embedder=KeywordEmbedder())
    rows = []
    with serve_http(app, port, timeout=1200) as url:
        ready = time.perf_counter() - started
        token = app.state.token
        asyncio.run(_load(url, token, 1, 1, 2))  # warm-up, not counted
        for clients in args.clients:
            row = asyncio.run(_load(url, token, clients, args.requests_per_client, args.tokens))
            row["engine"] = engine
            rows.append(row)
            print(_line(row), flush=True)
        memory = _rss(os.getpid(), tree=False)
        server = getattr(app.state.engine, "server", None)
        server_memory = _rss(server.process.pid, tree=True) if server is not None else 0
    return {
        "engine": engine,
        "ready_s": ready,
        "rows": rows,
        "companion_rss": memory,
        "server_rss": server_memory,
    }


def _line(row: dict) -> str:
    p50 = f"{row['p50_s']:.2f}" if row["p50_s"] is not None else "-"
    p95 = f"{row['p95_s']:.2f}" if row["p95_s"] is not None else "-"
    return (
        f"{row['engine']:>9} clients={row['clients']:>2} answered={row['answered']:>3}/"
        f"{row['requests']:<3} answers/s={row['answers_per_s']:.2f} p50={p50} s p95={p95} s "
        f"503={row['http_503']} other5xx={row['other_5xx']}"
    )


def report(results: list[dict], args: argparse.Namespace) -> str:
    by = {(r["engine"], row["clients"]): row for r in results for row in r["rows"]}
    lines = [
        "# Engines: concurrent chats, in-process vs vLLM",
        "",
        f"`python bench/engines_bench.py --out docs/engines` (model {args.model or 'default'}, "
        f"float32, {args.tokens} tokens per answer, copy_aware, {args.requests_per_client} "
        f"chats per client, {os.cpu_count()} CPU cores).",
        "",
        "| clients | engine | answered | answers/s | p50 latency | p95 latency | 503 | other 5xx |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for clients in args.clients:
        for engine in ("inprocess", "vllm"):
            row = by.get((engine, clients))
            if row is None:
                continue
            p50 = f"{row['p50_s']:.2f} s" if row["p50_s"] is not None else "-"
            p95 = f"{row['p95_s']:.2f} s" if row["p95_s"] is not None else "-"
            lines.append(
                f"| {clients} | {engine} | {row['answered']}/{row['requests']} | "
                f"{row['answers_per_s']:.2f} | {p50} | {p95} | {row['http_503']} | "
                f"{row['other_5xx']} |"
            )
    lines += ["", "| clients | vLLM / in-process answers per second |", "|---|---|"]
    for clients in args.clients:
        a, b = by.get(("inprocess", clients)), by.get(("vllm", clients))
        if a and b and a["answers_per_s"]:
            lines.append(f"| {clients} | {b['answers_per_s'] / a['answers_per_s']:.2f}x |")
    lines += [
        "",
        "Memory: the companion's RSS is this one process's after each engine's run (the vLLM "
        "row still holds what the in-process run before it loaded); the vLLM server's is its "
        "process tree, with the KV cache it reserves (VLLM_CPU_KVCACHE_SPACE, 4 GiB by "
        "default). On a CPU vLLM keeps one core for its API server and decodes on the rest "
        "(here: one core); the in-process engine computes on both.",
        "",
        "| engine | ready after | companion RSS | vLLM server RSS |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['engine']} | {r['ready_s']:.0f} s | {r['companion_rss'] / 2**30:.2f} GiB | "
            f"{r['server_rss'] / 2**30:.2f} GiB |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--engines", nargs="+", default=["inprocess", "vllm"])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.smoke:
        args.clients, args.requests_per_client, args.tokens = [1, 2], 1, 4
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as home:
        results = [run_engine(engine, args, Path(home)) for engine in args.engines]
    text = report(results, args)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.md").write_text(text)
        (args.out / "results.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
