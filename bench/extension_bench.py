"""Benchmark of the Chrome extension: latency Veil adds to a send, and start-up.

Prints Markdown tables (and writes them with a PNG plot to ``--out``):

* warm Enter -> sent latency on a chat page, with protection off (the baseline,
  measured in the same run, interleaved) and on, at 2,000 and 20,000
  characters, each with the network guard on (as shipped) and off (a switch of
  the test build); "added" is on minus off at p50 and at p95, and "guard" is
  what the guard adds to that;
* the network guard's own cost: the time to check a 100 KB request body
  against a 2,000- and a 20,000-character draft (leak-check.js under Node, the
  same V8 as Chromium), and why its run length is 20: the share of pairs of
  unrelated news articles (gensim's Lee corpus) that share a run of n
  non-space characters, for several n;
* browser start -> core ready: from the moment Chromium is launched to the
  moment the offscreen document reports the Python core ready, for the first
  start of a fresh profile (no memory snapshot yet) and for later starts.

Run from the repository root:

    python bench/extension_bench.py --out docs/extension      # full (~10 min)
    python bench/extension_bench.py --smoke                   # CI smoke (~1 min)

Needs Chromium (/usr/bin/chromium), node and ``npm ci``; builds what it needs.
The figures depend on the machine and on its load; they are measured, not
asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from e2e.harness import (  # noqa: E402
    EDITOR_SELECTOR,
    EXTENSION_TEST,
    FIXTURES,
    Browser,
    build_all,
    wait_receipts,
)
from e2e.recorder import FIXTURE_FOR_HOST, Recorder  # noqa: E402

PHRASE = (
    "the patient reported mild pain in the left knee after walking for about twenty minutes "
    "and asked whether she should continue the current dose of ibuprofen or switch to "
    "paracetamol before her appointment with the orthopaedic surgeon next week"
)
WORDS = PHRASE.split()


def prose(n: int, seed: int) -> str:
    """``n`` characters of English-like text (seeded: the benchmark is reproducible)."""
    rng = random.Random(seed)
    out: list[str] = []
    length = 0
    while length < n:
        word = rng.choice(WORDS)
        if rng.random() < 0.08:
            word += rng.choice(".,;")
        out.append(word)
        length += len(word) + 1
    text = " ".join(out)[:n]
    return text[:-1] + "." if text.endswith(" ") else text


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def set_enabled(browser: Browser, site_id: str, enabled: bool) -> None:
    """Flip protection for a site in chrome.storage (what the popup does)."""
    browser.evaluate(
        """async ([siteId, enabled]) => {
            const {settings} = await chrome.storage.local.get('settings');
            const s = settings || {sites: {}};
            s.sites = s.sites || {};
            s.sites[siteId] = {...(s.sites[siteId] || {enabled: true, epsilon: 5, mode: 'text',
                                failOpen: false, header: null}), enabled};
            await chrome.storage.local.set({settings: s});
        }""",
        [site_id, enabled],
    )


def set_guard(browser: Browser, on: bool) -> None:
    """Run with or without the network guard (the test build's switch)."""
    browser.evaluate(
        "(on) => chrome.storage.local.set({veilTestSwitches: {guard: on}})",
        on,
    )


def one_send(page: Any, host: str, text: str) -> float:
    """Fill the editor, press Enter, return ms from the key press to the page's request leaving."""
    selector = EDITOR_SELECTOR[FIXTURE_FOR_HOST[host]]
    page.click(selector)
    page.keyboard.insert_text(text)
    sends = page.evaluate("() => window.__sends || 0")
    start = time.time() * 1000
    page.keyboard.press("Enter")
    page.wait_for_function("n => (window.__sends || 0) > n", arg=sends, timeout=60000, polling=5)
    sent_at = float(page.evaluate("() => window.__lastSendAt"))
    # Let the notice and any storage writes settle before the next send.
    page.wait_for_timeout(50)
    return sent_at - start


CONFIGS = [(False, True), (True, False), (True, True)]  # (protection, guard)


def latency(
    browser: Browser, hosts: list[str], sizes: list[int], iterations: int, warmup: int
) -> list[dict[str, Any]]:
    rows = []
    site_ids = {"chatgpt.com": "chatgpt", "gemini.google.com": "gemini"}
    for host in hosts:
        page = browser.open_site(host)
        for size in sizes:
            samples: dict[tuple[bool, bool], list[float]] = {c: [] for c in CONFIGS}
            for i in range(warmup + iterations):
                text = prose(size, seed=size * 1000 + i)
                # Interleaved: every configuration sees the same load and the same text.
                for enabled, guard in CONFIGS:
                    set_enabled(browser, site_ids[host], enabled)
                    set_guard(browser, guard)
                    page.wait_for_timeout(30)
                    ms = one_send(page, host, text)
                    if enabled:
                        # The composed ε is finished by the core right after a send; a
                        # person does not send again within that time, so wait for it.
                        wait_receipts(browser, site_ids[host], timeout=60)
                    if i >= warmup:
                        samples[(enabled, guard)].append(ms)
                browser.recorder.clear()
            off, bare, on = samples[(False, True)], samples[(True, False)], samples[(True, True)]
            row: dict[str, Any] = {
                "host": host,
                "editor": FIXTURE_FOR_HOST[host],
                "chars": size,
                "n": len(on),
                "off": off,
                "on_noguard": bare,
                "on": on,
            }
            for name, values in (("off", off), ("on_noguard", bare), ("on", on)):
                row[f"{name}_p50"] = percentile(values, 0.5)
                row[f"{name}_p95"] = percentile(values, 0.95)
            for q in ("p50", "p95"):
                row[f"added_{q}"] = row[f"on_{q}"] - row[f"off_{q}"]
                row[f"added_noguard_{q}"] = row[f"on_noguard_{q}"] - row[f"off_{q}"]
                row[f"guard_{q}"] = row[f"on_{q}"] - row[f"on_noguard_{q}"]
            rows.append(row)
            print(
                f"  {host} {size} chars: off p50 {row['off_p50']:.1f} ms, on p50 {row['on_p50']:.1f} "
                f"(no guard {row['on_noguard_p50']:.1f}), p95 {row['on_p95']:.1f} "
                f"(no guard {row['on_noguard_p95']:.1f}) ms",
                flush=True,
            )
        page.close()
    return rows


GUARD_CHECK = r"""
import { LeakIndex } from "./extension/src/leak-check.js";
const [phrase, repeats] = [process.argv[1], Number(process.argv[2])];
const words = phrase.split(" ");
// The conversation in the body is other prose (different words): a draft and a
// body drawn from one 37-word list share 4-word runs by chance.
const other = "weather report rain expected across northern regions tomorrow with strong winds and cooler temperatures while the south stays dry and sunny for the weekend markets".split(" ");
function prose(n, seed, list = words) {
  let x = seed, out = "";
  while (out.length < n) { x = (x * 1103515245 + 12345) % 2147483648; out += list[(x >>> 8) % list.length] + " "; }
  return out.slice(0, n);
}
const items = [];
for (let i = 0; JSON.stringify(items).length < 100000; i++) {
  items.push({ id: i, role: i % 2 ? "assistant" : "user", text: prose(180, i + 1, other), ts: 1700000000 + i });
}
const body = JSON.stringify({ conversation: items }).slice(0, 100000);
const pct = (v, q) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(q * (s.length - 1) + 0.5))]; };
const rows = [];
for (const size of [2000, 20000]) {
  const draft = prose(size, 987654);
  const approved = [prose(size, 4242)];
  const build = [], clean = [], hit = [];
  for (let r = 0; r < repeats; r++) {
    let t = performance.now();
    const index = new LeakIndex([{ text: draft }], approved);
    index.find("x".repeat(64));  // builds the draft's runs
    build.push(performance.now() - t);
    t = performance.now();
    if (index.find(body)) throw new Error("an unrelated body matched");
    clean.push(performance.now() - t);
    const leaking = body.slice(0, 99000) + JSON.stringify(draft.slice(size - 600, size - 400));
    t = performance.now();
    if (!index.find(leaking)) throw new Error("the leak was missed");
    hit.push(performance.now() - t);
  }
  rows.push({ draft: size, body: body.length, build_p50: pct(build, 0.5), clean_p50: pct(clean, 0.5),
              clean_p95: pct(clean, 0.95), hit_p50: pct(hit, 0.5), hit_p95: pct(hit, 0.95), n: repeats });
}
console.log(JSON.stringify(rows));
"""


def guard_check(repeats: int) -> list[dict[str, Any]]:
    """The guard's check time for a 100 KB JSON body (leak-check.js under Node)."""
    node = shutil.which("node") or "node"
    out = subprocess.run(
        [node, "--input-type=module", "-e", GUARD_CHECK, PHRASE, str(repeats)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    for r in rows:
        print(
            f"  draft {r['draft']:,} chars, body {r['body']:,} B: check p50 {r['clean_p50']:.2f} ms, "
            f"p95 {r['clean_p95']:.2f} ms (index {r['build_p50']:.2f} ms)",
            flush=True,
        )
    return rows


def run_lengths(lengths: list[int]) -> dict[str, Any]:
    """Share of pairs of different news articles sharing a run of n non-space characters."""
    import gensim

    corpus = Path(gensim.__file__).parent / "test" / "test_data" / "lee_background.cor"
    articles = ["".join(line.split()) for line in corpus.read_text().splitlines() if line.strip()]
    pairs = len(articles) * (len(articles) - 1) // 2
    shares = {}
    for n in lengths:
        owners: dict[str, set[int]] = {}
        for i, a in enumerate(articles):
            for j in range(len(a) - n + 1):
                owners.setdefault(a[j : j + n], set()).add(i)
        shared: set[tuple[int, int]] = set()
        for ids in owners.values():
            if len(ids) > 1:
                ordered = sorted(ids)
                shared.update((x, y) for k, x in enumerate(ordered) for y in ordered[k + 1 :])
        shares[n] = len(shared) / pairs
        print(f"  run {n}: {100 * shares[n]:.2f}% of {pairs:,} article pairs share one", flush=True)
    return {"articles": len(articles), "pairs": pairs, "share": shares}


def launch_and_wait(
    playwright: Any, extension: Path, profile: Path, recorder: Recorder
) -> dict[str, Any]:
    """Launch Chromium; return the start-up timeline in ms from the launch call."""
    started = time.time() * 1000
    browser = Browser(playwright, extension, profile, recorder)
    sw_origin = float(browser.sw().evaluate("() => performance.timeOrigin"))
    status = browser.wait_core(timeout=120)
    if status.get("state") != "ready":
        browser.close()
        raise RuntimeError(f"the core did not start: {status}")
    # Wait until a first start has stored its snapshot, so the next start can use it.
    deadline = time.time() + 60
    while not status.get("fromSnapshot") and not str(status.get("snapshot", "")).startswith(
        ("stored", "not")
    ):
        if time.time() > deadline:
            break
        time.sleep(0.1)
        status = browser.core_status()
    browser.close()
    return {
        "fromSnapshot": bool(status.get("fromSnapshot")),
        "service_worker": sw_origin - started,
        "offscreen_document": float(status["documentStartedAt"]) - started,
        "core_ready": float(status["readyAt"]) - started,
        "boot_in_document": float(status.get("msSinceDocument", status["ms"])),
        "phases": status.get("phases", {}),
        "snapshot": status.get("snapshot"),
    }


def startup(
    playwright: Any, extension: Path, recorder: Recorder, restarts: int
) -> list[dict[str, Any]]:
    runs = []
    with tempfile.TemporaryDirectory(prefix="veil-bench-") as tmp:
        profile = Path(tmp) / "profile"
        for i in range(restarts + 1):
            run = launch_and_wait(playwright, extension, profile, recorder)
            run["start"] = "first (fresh profile)" if i == 0 else f"restart {i}"
            runs.append(run)
            print(
                f"  {run['start']}: core ready {run['core_ready']:.0f} ms after launch "
                f"(offscreen document at {run['offscreen_document']:.0f} ms, "
                f"boot {run['boot_in_document']:.0f} ms, snapshot: {run['snapshot']})",
                flush=True,
            )
    return runs


def markdown(
    lat: list[dict[str, Any]],
    starts: list[dict[str, Any]],
    guard: list[dict[str, Any]],
    runs: dict[str, Any] | None,
    meta: dict[str, Any],
) -> str:
    lines = [
        "# Extension benchmark",
        "",
        f"Measured {meta['date']} on {meta['machine']}; command: `{meta['command']}`.",
        f"Load average (1 min) at the start and the end: {meta['load_start']:.1f} and "
        f"{meta['load_end']:.1f} on 2 cores (other jobs share the machine).",
        "",
        "## Warm Enter → sent latency",
        "",
        "From the key press (Playwright) to the page's request leaving (its `fetch()` returned,",
        "after the network guard checked the body). *off*: Veil",
        "loaded but protection off for the site (baseline, interleaved with the others); *on*:",
        "k-RR text mode, ε = 5, default header, with the network guard as shipped; *no guard*:",
        "the same with the guard switched off (the test build's switch). *added* = on - off at",
        "the same percentile; *guard* = on - no guard, what the guard adds. Between sends the",
        "run waits until the core has finished the previous receipt's composed ε (computed",
        "right after each send, off the send path).",
        "",
        "| editor (site) | chars | n | off p50 ms | off p95 ms | on p50 ms | on p95 ms "
        "| added p50 ms | added p95 ms | no guard: added p95 ms | guard p50 ms | guard p95 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in lat:
        lines.append(
            f"| {r['editor']} ({r['host']}) | {r['chars']:,} | {r['n']} | {r['off_p50']:.1f} "
            f"| {r['off_p95']:.1f} | {r['on_p50']:.1f} | {r['on_p95']:.1f} "
            f"| **{r['added_p50']:.1f}** | **{r['added_p95']:.1f}** "
            f"| {r['added_noguard_p95']:.1f} | {r['guard_p50']:.1f} | {r['guard_p95']:.1f} |"
        )
    lines += [
        "",
        "## The network guard's check",
        "",
        "Time for leak-check.js to check one 100 KB JSON body (a conversation of unrelated",
        "prose) against an unprotected draft, with one approved text of the same size (what",
        "the guard holds after Veil protected a prompt); under Node, the V8 of Chromium.",
        "*index*: building the draft's and the approved text's run index (once per draft).",
        "*clean*: a body that does not carry the draft (the whole body is scanned, every",
        "decoding); *hit*: one whose last kilobyte carries 200 characters of it.",
        "",
        "| draft chars | body bytes | n | index p50 ms | clean p50 ms | clean p95 ms "
        "| hit p50 ms | hit p95 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g in guard:
        lines.append(
            f"| {g['draft']:,} | {g['body']:,} | {g['n']} | {g['build_p50']:.2f} "
            f"| **{g['clean_p50']:.2f}** | **{g['clean_p95']:.2f}** | {g['hit_p50']:.2f} "
            f"| {g['hit_p95']:.2f} |"
        )
    if runs:
        lines += [
            "",
            "Why the guard matches runs of 20 non-space characters: the share of pairs of",
            f"different news articles ({runs['articles']} articles of gensim's Lee corpus,",
            f"{runs['pairs']:,} pairs) that share at least one run of n non-space characters,",
            "i.e. how often unrelated text would be taken for the draft.",
            "",
            "| n | " + " | ".join(str(n) for n in runs["share"]) + " |",
            "|---|" + "---:|" * len(runs["share"]),
            "| pairs sharing a run | "
            + " | ".join(f"{100 * v:.2f}%" for v in runs["share"].values())
            + " |",
        ]
    lines += [
        "",
        "## Browser start → core ready",
        "",
        "Milliseconds from the launch of Chromium. The first start of a fresh profile boots",
        "Pyodide cold and stores a memory snapshot in IndexedDB; later starts restore it.",
        "",
        "| start | service worker | offscreen document | core ready | ready after the worker "
        "| boot inside the document | phases (ms in document) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for s in starts:
        phases = ", ".join(f"{k} {v}" for k, v in s["phases"].items())
        lines.append(
            f"| {s['start']} | {s['service_worker']:.0f} | {s['offscreen_document']:.0f} "
            f"| **{s['core_ready']:.0f}** | {s['core_ready'] - s['service_worker']:.0f} "
            f"| {s['boot_in_document']:.0f} | {phases} |"
        )
    warm = [s["core_ready"] for s in starts[1:]]
    if warm:
        lines += [
            "",
            f"Later starts: core ready median **{statistics.median(warm):.0f} ms** after launch "
            f"(min {min(warm):.0f}, max {max(warm):.0f}); boot inside the offscreen document "
            f"median {statistics.median(s['boot_in_document'] for s in starts[1:]):.0f} ms.",
        ]
    return "\n".join(lines) + "\n"


def plot(lat: list[dict[str, Any]], starts: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels, data = [], []
    for r in lat:
        for key in ("off", "on_noguard", "on"):
            labels.append(f"{r['editor']}\n{r['chars']:,} {key.replace('_noguard', ' -g')}")
            data.append(r[key])
    ax1.boxplot(data, whis=(5, 95), showfliers=False)
    ax1.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
    ax1.set_ylabel("Enter → sent (ms)")
    ax1.set_title("Send latency: off, on without guard (-g), on (whiskers p5-p95)")
    names = [s["start"].replace(" (fresh profile)", "\n(fresh)") for s in starts]
    sw = [s["service_worker"] for s in starts]
    doc = [s["offscreen_document"] - s["service_worker"] for s in starts]
    boot = [s["core_ready"] - s["offscreen_document"] for s in starts]
    ax2.bar(names, sw, label="launch → service worker")
    ax2.bar(names, doc, bottom=sw, label="→ offscreen document")
    ax2.bar(names, boot, bottom=[a + b for a, b in zip(sw, doc, strict=True)], label="→ core ready")
    ax2.axhline(1000, color="k", ls="--", lw=1, label="1 s target")
    ax2.set_ylabel("ms after browser launch")
    ax2.set_title("Browser start → core ready")
    ax2.legend(fontsize=8)
    ax2.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="a quick run for CI (small counts)")
    parser.add_argument("--out", type=Path, default=None, help="write benchmark.md/.json/.png here")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--sizes", default="2000,20000")
    parser.add_argument("--hosts", default="chatgpt.com,gemini.google.com")
    args = parser.parse_args(argv)
    if args.smoke:
        args.iterations, args.restarts, args.sizes, args.hosts = 3, 1, "2000", "chatgpt.com"
    sizes = [int(s) for s in args.sizes.split(",")]
    hosts = args.hosts.split(",")

    from playwright.sync_api import sync_playwright

    build_all()
    load_start = os.getloadavg()[0]
    recorder = Recorder(FIXTURES).start()
    extension = ROOT / "build" / "extension"
    try:
        with sync_playwright() as playwright:
            print("browser start -> core ready:", flush=True)
            starts = startup(playwright, extension, recorder, args.restarts)
            print("warm Enter -> sent latency:", flush=True)
            with tempfile.TemporaryDirectory(prefix="veil-bench-") as tmp:
                # The test build: the release build plus the switch that turns the guard off.
                browser = Browser(playwright, EXTENSION_TEST, Path(tmp) / "profile", recorder)
                try:
                    browser.wait_core(timeout=120)
                    lat = latency(browser, hosts, sizes, args.iterations, warmup=3)
                finally:
                    browser.close()
    finally:
        recorder.stop()
    print("network guard, check of a 100 KB body:", flush=True)
    guard = guard_check(20 if args.smoke else 200)
    print("network guard, run length:", flush=True)
    runs = None if args.smoke else run_lengths([8, 12, 16, 20, 24, 32])
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": "this machine (2 CPU cores, shared), headless Chromium "
        + "with the extension loaded unpacked",
        "command": "python bench/extension_bench.py" + (" --smoke" if args.smoke else ""),
        "load_start": load_start,
        "load_end": os.getloadavg()[0],
    }
    report = markdown(lat, starts, guard, runs, meta)
    print()
    print(report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "benchmark.md").write_text(report)
        raw = {"latency": lat, "startup": starts, "guard": guard, "runs": runs, "meta": meta}
        (args.out / "benchmark.json").write_text(json.dumps(raw, indent=1))
        plot(lat, starts, args.out / "benchmark.png")
        print(f"wrote {args.out}/benchmark.md, benchmark.json, benchmark.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
