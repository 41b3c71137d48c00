"""Issue 24's hostile inputs against a real companion process, before and after.

    python bench/ingest_bench.py                          # this tree only
    python bench/ingest_bench.py --baseline-rev ef54117   # and the tree before, same run
    python bench/ingest_bench.py --only audit --repeat 3 --nice -5  # docs/bench/ingest.md

Each tree's companion runs as its own process the way ``veil serve`` runs it
(``python -m tests.companion.hardening_server PORT HOME``: the real app, token, Host
and Origin checks, a tiny model behind the audit routes, a fake embedder), a fresh one
for each case.  For each case the bench prints the time until the answer, its status,
the server process's resident memory growth (peak during the case, sampled every
50 ms, over the value just before it; a parser child's memory is its own, bounded by
``parse_memory_mb``) and the slowest ``/healthz`` answered meanwhile (a client in a
process of its own asking every 50 ms).  Cases:

* ``idle``: nothing for 10 s, the slowest /healthz of a machine as loaded as it is;
* ``docx bomb``: a ~45 KB .docx of 3 M empty paragraphs (the probe's file);
* ``pdf text bomb``: a ~24 KB PDF whose page draws 200,000 text runs;
* ``scan 100 pages``: a PDF of 100 pages showing one picture (~290 bytes a page);
* ``client gives up``: a 12-page scan of different pictures whose client leaves after
  3 s; then whether it was stored anyway;
* ``40 audit setups``: 40 concurrent ``POST /v1/audit/setup`` (and how many jobs they
  made), from one client's 40 connections, then from 40 clients of their own (each
  ``httpx.post`` builds a client and its SSL context: the client's CPU, not the server);
* ``half-open x200``: 200 connections that send half a request head; how many are
  still open after 12 s;
* ``100 KB header``: the status (or ``closed``).

Every request has a 240 s client timeout (``>240 s`` in the table).  Figures vary
with the machine's load; the ratios between the two trees in one run are what count
(``--nice -5``, as root, keeps other work's load mostly out of them; ``--repeat``
reports the median run).  Results: docs/bench/ingest.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.companion.fakes import free_port  # noqa: E402
from tests.companion.hostile import docx_bomb, scan_pdf, text_bomb_pdf  # noqa: E402

CLIENT_TIMEOUT = 240.0
NICE = 0  # --nice: the server's and the pinger's priority (below 0: root only)


def _niced() -> None:
    if NICE:
        os.nice(NICE)


# /healthz every 50 ms until stdin closes; prints the slowest and median answers (ms) as JSON.
PINGER = """
import json, sys, threading, time, httpx
url, times, stop = sys.argv[1], [], threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
with httpx.Client(timeout=120) as client:
    client.get(url + "/healthz")
    print("ready", flush=True)
    while not stop.is_set():
        started = time.perf_counter()
        try:
            client.get(url + "/healthz")
        except httpx.HTTPError:
            pass
        times.append(time.perf_counter() - started)
        stop.wait(0.05)
times.sort()
print(json.dumps({"max_ms": times[-1] * 1000 if times else 0.0,
                  "p50_ms": times[len(times) // 2] * 1000 if times else 0.0}))
"""


class Server:
    """One tree's companion in its own process, and a /healthz watcher."""

    def __init__(self, tree: Path, home: Path) -> None:
        self.port = free_port()
        self.home = home
        # VEIL_HOME: the audit setup is written under the case's home (a first setup each time)
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
        env["VEIL_HOME"] = str(home)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.companion.hardening_server", str(self.port), str(home)],
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_niced,
        )
        deadline = time.time() + 300
        while not (home / "ready").exists():
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"the companion in {tree} did not start")
            time.sleep(0.2)
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = (home / "token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {self.token}"}
        self.process = psutil.Process(self.proc.pid)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def measure(self, work: Any) -> dict[str, Any]:
        """Run ``work()`` while sampling memory (a thread) and /healthz (a process of its
        own, so the bench's client threads do not delay it); its result and the figures."""
        stop = threading.Event()
        base = self.process.memory_info().rss
        peak = [base]

        def watch() -> None:
            while not stop.is_set():
                try:
                    peak[0] = max(peak[0], self.process.memory_info().rss)
                except psutil.Error:
                    return
                stop.wait(0.05)

        pinger = subprocess.Popen(
            [sys.executable, "-c", PINGER, self.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=_niced,
        )
        assert pinger.stdin is not None and pinger.stdout is not None
        pinger.stdout.readline()  # its first answer: connected
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = time.perf_counter()
        try:
            result = work()
        finally:
            seconds = time.perf_counter() - started
            stop.set()
            watcher.join(timeout=120)
            out, _ = pinger.communicate("", timeout=300)
        pings = json.loads(out.strip().splitlines()[-1])
        return {
            "result": result,
            "seconds": seconds,
            "growth_mb": (peak[0] - base) / 2**20,
            "healthz_ms": pings["max_ms"],
            "healthz_p50_ms": pings["p50_ms"],
        }

    def upload(self, name: str, data: bytes) -> str:
        try:
            r = httpx.post(
                f"{self.url}/v1/documents",
                headers=self.headers,
                files=[("files", (name, data, "application/octet-stream"))],
                timeout=CLIENT_TIMEOUT,
            )
        except httpx.TimeoutException:
            return f">{CLIENT_TIMEOUT:.0f} s"
        return str(r.status_code)

    def documents(self) -> list[Any]:
        r = httpx.get(f"{self.url}/v1/documents", headers=self.headers, timeout=60)
        return list(r.json())


def _idle() -> str:
    time.sleep(10.0)
    return "-"


def _give_up(server: Server, name: str, data: bytes) -> str:
    try:
        httpx.post(
            f"{server.url}/v1/documents",
            headers=server.headers,
            files=[("files", (name, data, "application/pdf"))],
            timeout=3.0,
        )
        return "answered within 3 s"
    except httpx.TimeoutException:
        pass
    time.sleep(20)  # long enough for the old ingest to finish
    names = [d["name"] for d in server.documents()]
    return "stored anyway" if name in names else "not stored"


def _setups(server: Server, shared: bool = True) -> str:
    """40 concurrent ``POST /v1/audit/setup`` from 40 threads: over one client's pool of 40
    connections (``shared``), or each with a client of its own as ``httpx.post`` makes one
    (an SSL context each: ~0.1 s of this process's CPU a request, which on a small machine
    starves the server and the pinger alike -- the probe's 40-client figure)."""
    results: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=40, max_keepalive_connections=40)
    with httpx.Client(headers=server.headers, timeout=120, limits=limits) as client:

        def one(_i: int) -> int:
            if shared:
                r = client.post(f"{server.url}/v1/audit/setup", json={})
            else:
                r = httpx.post(
                    f"{server.url}/v1/audit/setup", headers=server.headers, json={}, timeout=120
                )
            if r.status_code == 202:
                results.append(r.json())
            return r.status_code

        with concurrent.futures.ThreadPoolExecutor(40) as pool:
            codes = list(pool.map(one, range(40)))
    counts = {c: codes.count(c) for c in sorted(set(codes))}
    jobs = len({r["id"] for r in results})
    return " ".join(f"{n}x{c}" for c, n in counts.items()) + f", {jobs} job"


def _half_open(server: Server, count: int = 200, wait: float = 12.0) -> str:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode())
        socks.append(sock)
    time.sleep(wait)
    still_open = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            data = sock.recv(65536)
            while data:  # a 408 then the close
                data = sock.recv(65536)
        except BlockingIOError:
            still_open += 1
        except OSError:
            pass
        sock.close()
    return f"{still_open}/{count} open after {wait:.0f} s"


def _big_header(server: Server) -> str:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Big: ".encode()
            + b"a" * 100_000
            + b"\r\nConnection: close\r\n\r\n"
        )
        try:
            reply = sock.recv(64)
        except OSError:
            return "closed"
    return reply.split(b"\r\n", 1)[0].decode("latin-1").replace("HTTP/1.1 ", "") or "closed"


def run_cases(
    tree: Path, tmp: Path, label: str, only: str | None = None, repeat: int = 1
) -> dict[str, dict[str, Any]]:
    """Each case against a fresh companion (work an old server keeps doing after its
    client gave up would otherwise slow the next case)."""
    holder: dict[str, Server] = {}
    server: Any = _Current(holder)
    bomb = docx_bomb(3_000_000)
    text_bomb = text_bomb_pdf()
    scan = scan_pdf(["Gout clinic letter"] * 100, copies=False)
    slow = scan_pdf([f"Letter number {i} about gout" for i in range(12)])
    cases = {
        "idle 10 s (the machine's noise)": _idle,
        f"docx bomb ({len(bomb) // 1000} KB)": lambda: server.upload("bomb.docx", bomb),
        f"pdf text bomb ({len(text_bomb) // 1000} KB)": lambda: server.upload(
            "bomb.pdf", text_bomb
        ),
        f"scan 100 pages ({len(scan) // 1000} KB)": lambda: server.upload("scan.pdf", scan),
        f"client gives up at 3 s ({len(slow) // 1000} KB)": lambda: _give_up(
            server, "slow.pdf", slow
        ),
        "40 audit setups (one client, 40 connections)": lambda: _setups(server),
        "40 audit setups (40 clients)": lambda: _setups(server, shared=False),
        "half-open x200": lambda: _half_open(server),
        "100 KB header": lambda: _big_header(server),
    }
    figures = {}
    for i, (name, work) in enumerate(cases.items()):
        if only is not None and only not in name:
            continue
        runs = []
        for run in range(repeat):
            home = tmp / f"home-{label}-{i}-{run}"
            home.mkdir()
            holder["server"] = Server(tree, home)
            try:
                runs.append(holder["server"].measure(work))
            finally:
                holder["server"].close()
            print(f"  {name}: {_cell(runs[-1])}", flush=True)
        figures[name] = _median(runs)
    return figures


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median slowest /healthz, with every run's slowest beside it."""
    ordered = sorted(runs, key=lambda r: r["healthz_ms"])
    median = dict(ordered[len(ordered) // 2])
    if len(runs) > 1:
        median["healthz_runs"] = [r["healthz_ms"] for r in runs]
    return median


class _Current:
    """The case's server, looked up when a case runs (each case starts its own)."""

    def __init__(self, holder: dict[str, Server]) -> None:
        self._holder = holder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._holder["server"], name)


def _cell(f: dict[str, Any]) -> str:
    runs = f.get("healthz_runs")
    each = f"; runs {'/'.join(f'{ms:.0f}' for ms in runs)}" if runs else ""
    return (
        f"{f['result']}, {f['seconds']:.1f} s, +{f['growth_mb']:.0f} MB, "
        f"healthz {f['healthz_ms']:.0f} ms (p50 {f.get('healthz_p50_ms', 0):.0f}{each})"
    )


def _tree_at(rev: str, into: Path) -> Path:
    tree = into / f"tree-{rev}"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", rev], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-rev", help="a git revision to measure first (before)")
    parser.add_argument("--only", help="run only the cases whose name contains this")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="the server's and the pinger's nice value: on a machine shared with other "
        "work, -5 keeps that work's load out of the figures (below 0 needs root)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="run each case this many times")
    args = parser.parse_args()
    global NICE
    NICE = args.nice
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="veil-ingest-bench-") as tmp:
        trees = {"after": ROOT}
        if args.baseline_rev:
            trees = {"before": _tree_at(args.baseline_rev, Path(tmp)), **trees}
        for label, tree in trees.items():
            print(f"{label}: {tree}", flush=True)
            results[label] = run_cases(tree, Path(tmp), label, args.only, args.repeat)
    labels = list(results)
    print()
    print("| case | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for case in results[labels[-1]]:
        cells = [_cell(results[label][case]) for label in labels]
        print(f"| {case} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
