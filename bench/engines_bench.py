"""Concurrent chats on the in-process engine and on vLLM: answers per second, latency, 5xx.

The companion is started twice in this process (uvicorn in a thread, the real HTTP API),
once per engine, with the same model (SmolLM2-135M-Instruct by default, float32), and asked
the same questions by 1, 8 and 32 concurrent guests: each guest has a key of its own
(collection "clinic", three short notes, copy_aware) and asks for 32 tokens; retrieval
uses a keyword embedder (the engines are what is compared, not the embedder).  Printed per engine and concurrency: answers/s,
p50/p95 latency, how many 503s and other 5xx, and the memory of the serving processes
(the companion's RSS; for vLLM also its server's process tree).  The ratio vLLM /
in-process of answers per second is the figure issue 28 asks for; the in-process engine
answers one chat at a time and turns clients away (503) once ``queue_size`` (8) wait.
Then, on vLLM, the prefix cache as a timing channel between principals
(:func:`cache_timing`): the time of a prompt another principal sent first, beside a fresh
one and the first principal's own repeat; and on both engines a guest's padded prefill
(:func:`padding_timing`): a short and a long context padded to the same length.

Run: ``python bench/engines_bench.py [--model M] [--requests-per-client 2] [--out docs/engines]``
(needs ``scripts/setup.sh --vllm``).  ``--smoke``: 1 and 2 clients, 4 tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

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


DOCUMENTS = {
    "visit.txt": "Clinic visit, 3 March. The patient has gout of the left toe and started "
    "allopurinol 100 mg daily. Review in six weeks with urate levels.",
    "referral.txt": "Referral to rheumatology. Recurrent gout despite allopurinol; eGFR 58. "
    "Please advise on febuxostat.",
    "asthma.txt": "Asthma review. Peak flow 420 L/min; inhaler technique checked; continue the "
    "steroid inhaler twice daily.",
}
QUESTIONS = [
    "Which medicine was started for the gout?",
    "When is the gout review?",
    "What was the peak flow?",
    "Why was the patient referred?",
    "How often is the inhaler used?",
    "What is the eGFR?",
    "Which toe has gout?",
    "What should rheumatology advise on?",
]


def setup_guests(url: str, token: str, count: int) -> list[str]:
    """The documents in collection "clinic", and one guest key per client (copy_aware)."""
    import httpx

    owner = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=owner, timeout=300) as http:
        for name, text in DOCUMENTS.items():
            files = [("files", (name, text.encode(), "text/plain"))]
            response = http.post("/v1/documents", files=files, data={"collection": "clinic"})
            response.raise_for_status()
        keys = []
        for n in range(count):
            body = {"collection": "clinic", "defense": "copy_aware", "label": f"bench {n}"}
            response = http.post("/v1/keys", json=body)
            response.raise_for_status()
            keys.append(response.json()["key"])
    return keys


async def _load(url: str, keys: list[str], clients: int, per_client: int, tokens: int) -> dict:
    import httpx

    latencies: list[float] = []
    codes: list[int] = []

    async def client(n: int, http: httpx.AsyncClient) -> None:
        guest = {"Authorization": f"Bearer {keys[n % len(keys)]}"}
        for i in range(per_client):
            question = QUESTIONS[(n * per_client + i) % len(QUESTIONS)]
            body = {
                "messages": [{"role": "user", "content": question}],
                "max_tokens": tokens,
            }
            start = time.perf_counter()
            response = await http.post("/v1/chat/completions", json=body, headers=guest)
            codes.append(response.status_code)
            if response.status_code == 200:
                latencies.append(time.perf_counter() - start)

    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
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


def run_engine(
    engine: Literal["inprocess", "vllm"], args: argparse.Namespace, home: Path
) -> dict[str, Any]:
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
    rows, timing, padding = [], None, None
    with serve_http(app, port, timeout=1200) as url:
        ready = time.perf_counter() - started
        keys = setup_guests(url, app.state.token, max(args.clients))
        asyncio.run(_load(url, keys, 1, 1, 2))  # warm-up, not counted
        for clients in args.clients:
            row = asyncio.run(_load(url, keys, clients, args.requests_per_client, args.tokens))
            row["engine"] = engine
            rows.append(row)
            print(_line(row), flush=True)
        loaded = app.state.engine.load()
        if engine == "vllm":
            timing = cache_timing(loaded, args.timing_reps)
        padding = padding_timing(loaded, args.timing_reps)
        memory = _rss(os.getpid(), tree=False)
        server = getattr(app.state.engine, "server", None)
        server_memory = _rss(server.process.pid, tree=True) if server is not None else 0
    return {
        "engine": engine,
        "ready_s": ready,
        "cache_timing": timing,
        "padding_timing": padding,
        "rows": rows,
        "companion_rss": memory,
        "server_rss": server_memory,
    }


def _long_text(rng: random.Random, words: int) -> str:
    vocabulary = [w for q in QUESTIONS for w in q.rstrip("?").split()]
    vocabulary += [w for d in DOCUMENTS.values() for w in d.split()]
    return " ".join(rng.choice(vocabulary) for _ in range(words))


def _prompt(tokenizer: Any, text: str) -> list[int]:
    messages = [{"role": "user", "content": "Summarise: " + text}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(prompt, add_special_tokens=False))


def _timed(
    loaded: Any, prompt_ids: list[int], principal: str, pad: int | None = None
) -> tuple[float, int]:
    """(seconds, cached prompt tokens) of a one-token answer: its prefill, on either engine."""
    from companion.decoding.config import DefenseConfig
    from companion.decoding.generate import GenerationConfig, generate_text
    from companion.decoding.noise import SecureNoise
    from companion.vllm.engine import VllmGeneration

    config = GenerationConfig(
        prompt_ids=prompt_ids,
        defense=DefenseConfig.from_options("none", None),
        generator=SecureNoise(),
        max_new_tokens=1,
        pad_prefill_to=pad,
    )
    start = time.perf_counter()
    if loaded.backend == "vllm":
        run = VllmGeneration(loaded.model, loaded.tokenizer, config, principal=principal)
        for _ in run:
            pass
        result = run.result
    else:
        result = generate_text(loaded.model, loaded.tokenizer, config)
    return time.perf_counter() - start, int(result.details.get("cached_prompt_tokens", 0))


CACHE_KINDS = (
    "same principal, same prompt",
    "other principal, same prompt",
    "other principal, fresh prompt",
)


def cache_timing(loaded: Any, reps: int) -> dict[str, Any]:
    """Whether vLLM's prefix cache tells one principal what another sent, by timing.

    Per repetition a fresh long prompt (~1,000 tokens of random words): principal A sends
    it once (filling the cache under A's salt), then, in random order, A sends it again,
    principal B sends the same prompt, and B sends another fresh prompt of the same
    length.  Each is one token, so its time is the prefill.  A's repeat is the channel a
    shared cache would open (the positive control); B's same-prompt time must look like
    B's fresh one, with no cached tokens.  The prompts are not secrets: ``random`` is fine.
    """
    rng = random.Random(28)
    times: dict[str, list[float]] = {k: [] for k in CACHE_KINDS}
    cached: dict[str, list[int]] = {k: [] for k in CACHE_KINDS}
    prompt_tokens = 0
    for rep in range(reps):
        ids = _prompt(loaded.tokenizer, _long_text(rng, 700))
        fresh = _prompt(loaded.tokenizer, _long_text(rng, 700))
        a, b = f"guest:timing-a{rep}", f"guest:timing-b{rep}"
        _timed(loaded, ids, a)
        plan = dict(zip(CACHE_KINDS, ((ids, a), (ids, b), (fresh, b)), strict=True))
        order = list(CACHE_KINDS)
        rng.shuffle(order)
        for kind in order:
            seconds, hits = _timed(loaded, *plan[kind])
            times[kind].append(seconds)
            cached[kind].append(hits)
        prompt_tokens = len(ids)
    return {
        "reps": reps,
        "prompt_words": 700,
        "prompt_tokens": prompt_tokens,
        "median_s": {k: statistics.median(v) for k, v in times.items()},
        "times_s": times,
        "cached_tokens": cached,
    }


PAD_KINDS = ("short context, padded", "long context, padded", "short context, not padded")


def padding_timing(loaded: Any, reps: int) -> dict[str, Any]:
    """Whether a guest's formal answer's first token tells how much context it had.

    A guest's formal answer pads its prefill to the longest context it could have had
    (``pad_prefill_to``; on vLLM a throwaway request of the missing tokens that the first
    token waits for).  Per repetition, fresh prompts in random order: a short one
    (~100 tokens) padded to the pad length, a long one (just under it) padded, and the
    short one without padding (what the padding hides).  Padded short and long should
    take the same time; unpadded short is the channel the padding closes.
    """
    rng = random.Random(29)
    times: dict[str, list[float]] = {k: [] for k in PAD_KINDS}
    pad = 0
    for rep in range(reps):
        short = _prompt(loaded.tokenizer, _long_text(rng, 60))
        long = _prompt(loaded.tokenizer, _long_text(rng, 650))
        again = _prompt(loaded.tokenizer, _long_text(rng, 60))
        pad = len(long) + 8
        plan = dict(zip(PAD_KINDS, ((short, pad), (long, pad), (again, None)), strict=True))
        order = list(PAD_KINDS)
        rng.shuffle(order)
        for kind in order:
            ids, to = plan[kind]
            seconds, _ = _timed(loaded, ids, f"guest:padding-{rep}", to)
            times[kind].append(seconds)
    return {
        "reps": reps,
        "pad_to": pad,
        "median_s": {k: statistics.median(v) for k, v in times.items()},
        "times_s": times,
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
        f"float32, {args.tokens} tokens per answer, one guest key per client (copy_aware, "
        f"three notes), {args.requests_per_client} chats per client, {os.cpu_count()} CPU "
        "cores).",
        "",
        "| guests | engine | answered | answers/s | p50 latency | p95 latency | 503 | other 5xx |",
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
    lines += ["", "| guests | vLLM / in-process answers per second |", "|---|---|"]
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
    for r in results:
        timing = r.get("cache_timing")
        if not timing:
            continue
        lines += [
            "",
            "## The prefix cache as a timing channel",
            "",
            f"{timing['reps']} repetitions of a fresh prompt of {timing['prompt_tokens']} "
            "tokens that principal A sent first; then, in random order, A again, principal B "
            "with A's prompt, and B with a fresh prompt of the same length (one token each: "
            "the time is the prefill). vLLM's cache is salted per principal (HMAC of the "
            "principal), so B's guess of A's prompt must take as long as a fresh prompt.",
            "",
            "| request | median time | cached prompt tokens (per repetition) |",
            "|---|---|---|",
        ]
        for kind, median in timing["median_s"].items():
            hits = ", ".join(str(h) for h in timing["cached_tokens"][kind])
            lines.append(f"| {kind} | {median * 1000:.0f} ms | {hits} |")
    padded = [r for r in results if r.get("padding_timing")]
    if padded:
        first = padded[0]["padding_timing"]
        lines += [
            "",
            "## A guest's padded prefill as a timing channel",
            "",
            f"{first['reps']} repetitions per engine of fresh prompts, one token each, in random "
            f"order: a short prompt (~100 tokens) and a long one padded to {first['pad_to']} "
            "tokens (a guest's formal answer: `pad_prefill_to`; on vLLM a throwaway request of "
            "the missing tokens that the first token waits for), and a short one not padded "
            "(what the padding hides). Padded short and long should take the same time.",
            "",
            "| engine | " + " | ".join(PAD_KINDS) + " |",
            "|---|---|---|---|",
        ]
        for r in padded:
            medians = r["padding_timing"]["median_s"]
            cells = " | ".join(f"{medians[k] * 1000:.0f} ms" for k in PAD_KINDS)
            lines.append(f"| {r['engine']} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument(
        "--engines", nargs="+", choices=["inprocess", "vllm"], default=["inprocess", "vllm"]
    )
    parser.add_argument("--timing-reps", type=int, default=8)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.smoke:
        args.clients, args.requests_per_client, args.tokens, args.timing_reps = [1, 2], 1, 4, 1
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
