"""The k-RR evaluation's parts: corpus, restorers, metrics, baselines, calibration."""

from __future__ import annotations

import gzip
import json
import math
import random
import string
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from evals.krr.baselines import MetricDPWords
from evals.krr.build_wordfreq import build
from evals.krr.calibrate import WordOutcome, check, fit
from evals.krr.corpus import CATEGORIES, generate_corpus, words_of
from evals.krr.metrics import aligned_matches, lenient, rate_with_ci, restored_flags
from evals.krr.pipeline import EPSILONS
from evals.krr.restorers import NoisyChannelRestorer, OpenAICompatibleRestorer, restore_prompt
from py_core import wordfreq
from py_core.errors import InvalidParameterError
from py_core.krr import implementation, perturb


@pytest.fixture(scope="module")
def restorer() -> NoisyChannelRestorer:
    return NoisyChannelRestorer(context=True)


# ----------------------------------------------------------------------- corpus


def test_corpus_is_seeded_and_spans_are_clean() -> None:
    """Same seed -> same corpus; spans lie inside the text, trimmed, with known categories."""
    docs = generate_corpus(20, seed=7)
    assert docs == generate_corpus(20, seed=7)
    assert docs != generate_corpus(20, seed=8)
    assert {d.kind for d in docs} == {"email", "clinical"}
    for d in docs:
        assert d.spans, d.doc_id
        for s in d.spans:
            value = d.text[s.start : s.end]
            assert value and value == value.strip() and s.category in CATEGORIES


def test_words_of_marks_words_overlapping_spans() -> None:
    """A word is sensitive iff it overlaps a gold span; words are whitespace tokens."""
    doc = generate_corpus(2, seed=3)[1]
    words = words_of(doc)
    assert [w.text for w in words] == doc.text.split()
    for w in words:
        overlapping = any(s.start < w.end and w.start < s.end for s in doc.spans)
        assert w.sensitive == overlapping
    assert any(w.sensitive for w in words) and any(not w.sensitive for w in words)


def test_corpus_rejects_bad_size() -> None:
    """A non-positive corpus size is refused with the value in the message."""
    with pytest.raises(InvalidParameterError, match="0"):
        generate_corpus(0)


# -------------------------------------------------------------------- restorers


def test_noisy_channel_keeps_clean_text_and_fixes_substitutions(
    restorer: NoisyChannelRestorer,
) -> None:
    """Clean common words stay; one substituted character in a common word is corrected."""
    assert restorer.restore_one("the patient was seen today.", 6.0) == "the patient was seen today."
    assert restorer.restore_one("thX pati#nt was s)en today.", 6.0) == "the patient was seen today."
    assert restorer.restore_one("Please call me.", 6.0) == "Please call me."


def test_noisy_channel_preserves_layout(restorer: NoisyChannelRestorer) -> None:
    """Whitespace and the number of words are unchanged."""
    noisy = perturb("Dear Anna,\n\n  I am   fine.\tBye", 5.0, rng=random.Random(1))
    out = restorer.restore_one(noisy, 5.0)
    assert [len(p) for p in out.split()] == [len(p) for p in noisy.split()]
    assert [c for c in out if c.isspace()] == [c for c in noisy if c.isspace()]


def test_random_strings_are_restored_at_pr_t0(restorer: NoisyChannelRestorer) -> None:
    """Words the restorer cannot predict come back at Pr[T0] = p^L (within 4 standard errors)."""
    rng = random.Random(2026)
    eps, length, n = 6.0, 7, 1500
    alphabet = string.ascii_letters + string.digits
    words = ["".join(rng.choice(alphabet) for _ in range(length)) for _ in range(n)]
    hits = 0
    for word in words:
        noisy = perturb(word, eps, rng=rng)
        hits += restorer.restore_one(noisy, eps) == word
    p = implementation(eps).keep_probability ** length
    se = math.sqrt(p * (1 - p) / n)
    assert abs(hits / n - p) < 4 * se, (hits / n, p, se)


def test_restorer_rejects_bad_prior() -> None:
    """oov_prior outside (0, 1) is refused."""
    with pytest.raises(InvalidParameterError, match="oov_prior"):
        NoisyChannelRestorer(oov_prior=1.0)


def test_openai_compatible_restorer_speaks_the_wire_format() -> None:
    """The API restorer posts the restore prompt to /chat/completions and reads the reply."""
    seen: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers["Authorization"], "body": body})
            text = body["messages"][-1]["content"].rsplit("\n", 1)[-1]
            reply = json.dumps(
                {"choices": [{"message": {"content": f" {text.upper()} "}}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        api = OpenAICompatibleRestorer(f"http://127.0.0.1:{server.server_port}/v1", "m", "secret")
        assert api.restore(["hEllo wor#d"], 6.0) == ["HELLO WOR#D"]
    finally:
        server.shutdown()
        server.server_close()
    assert seen[0]["path"] == "/v1/chat/completions" and seen[0]["auth"] == "Bearer secret"
    assert seen[0]["body"]["messages"] == restore_prompt("hEllo wor#d")  # type: ignore[index]
    with pytest.raises(InvalidParameterError, match="base_url"):
        OpenAICompatibleRestorer("ftp://x", "m", "k")


# ---------------------------------------------------------------------- metrics


def test_alignment_handles_dropped_and_added_words() -> None:
    """Equal lengths compare by position; otherwise difflib blocks decide."""
    assert aligned_matches(["a", "b", "c"], ["a", "x", "c"]) == [True, False, True]
    assert aligned_matches(["a", "b", "c", "d"], ["a", "c", "d"]) == [True, False, True, True]
    assert aligned_matches(["a", "b"], ["z", "a", "b", "q"]) == [True, True]
    assert restored_flags(["Hello,", "World"], "hello world", strict=False) == [True, True]
    assert restored_flags(["Hello,", "World"], "hello world") == [False, False]
    assert lenient('"Smith."') == "smith"


def test_wilson_interval() -> None:
    """The Wilson interval matches a hand-computed value and brackets the rate."""
    rate, low, high = rate_with_ci(30, 100)
    assert (
        rate == 0.3
        and low == pytest.approx(0.2189, abs=1e-3)
        and high == pytest.approx(0.3958, abs=1e-3)
    )
    assert all(math.isnan(x) for x in rate_with_ci(0, 0))


# -------------------------------------------------------------------- baselines


@pytest.mark.slow
def test_metric_dp_extremes() -> None:
    """Huge ε returns in-vocabulary words unchanged; tiny ε scrambles them; punctuation stays."""
    from companion.models import load_embedder

    vocab = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    mech = MetricDPWords(load_embedder(device="cpu"), vocab)
    text = "Alpha, beta (gamma) delta."
    assert mech.perturb_texts([text], 1e6, seed=1) == ["alpha, beta (gamma) delta."]
    outs = [mech.perturb_texts(["alpha beta gamma delta"] * 50, 0.01, seed=s) for s in range(3)]
    changed = sum(o != "alpha beta gamma delta" for batch in outs for o in batch)
    assert changed > 100
    assert all(set(o.split()) <= set(vocab) for batch in outs for o in batch)
    with pytest.raises(InvalidParameterError):
        mech.perturb_texts([text], 0.0, seed=1)


@pytest.mark.slow
def test_presidio_masks_contact_details() -> None:
    """Presidio (spaCy sm re-upload) masks an e-mail address and a phone number."""
    from evals.krr.baselines import PresidioMasker

    masked, spans = PresidioMasker().mask(
        "Write to anna.berg@example.com or call 212-555-0199 today."
    )
    assert "anna.berg@example.com" not in masked and "<EMAIL_ADDRESS>" in masked
    assert "212-555-0199" not in masked
    assert masked.startswith("Write to <") and spans


# ------------------------------------------------------------------ calibration


def test_calibration_fit_smooths_and_is_monotone() -> None:
    """Empty cells fall back to Pr[T0]; rates never fall as ε grows; the check reports accuracy."""
    outcomes = [WordOutcome(6.0, 3, 7.0, True)] * 50 + [WordOutcome(4.0, 3, 7.0, False)] * 50
    model = fit(outcomes, [4.0, 6.0], restorer="test")
    assert model.rate(6.0, 7.0, 3) > 0.9
    assert model.rate(4.0, 7.0, 3) < 0.1
    empty = model.rate(6.0, None, 9)
    assert empty == pytest.approx(implementation(6.0).keep_probability ** 9)
    model2 = fit(
        [WordOutcome(4.0, 3, 7.0, True)] * 50 + [WordOutcome(6.0, 3, 7.0, False)] * 50,
        [4.0, 6.0],
        "t",
    )
    assert model2.rate(6.0, 7.0, 3) >= model2.rate(4.0, 7.0, 3)
    report = check(model, outcomes)
    assert report["n"] == 100 and report["accuracy"] == 1.0


def test_shipped_wordfreq_table_is_reproducible(tmp_path) -> None:
    """Rebuilding the table from symspellpy's dictionary gives the shipped content."""
    rebuilt = build(50_000, tmp_path / "t.tsv.gz")
    # Compare the content: another zlib build may compress the same bytes differently.
    shipped = gzip.decompress(wordfreq.TABLE_PATH.read_bytes())
    assert gzip.decompress(rebuilt.read_bytes()) == shipped


def test_smoke_refuses_to_write_calibration(capsys, tmp_path) -> None:
    """--smoke with --write-calibration is refused (exit 2) before any work."""
    from companion.cli import main

    argv = ["eval", "krr", "--smoke", "--write-calibration", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "refusing" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_eval_registered_in_cli() -> None:
    """`veil eval krr` is registered and runs through the common contract."""
    from companion.cli import build_parser
    from evals import common, krr

    args = build_parser().parse_args(["eval", "krr", "--out", "x", "--smoke"])
    assert args.smoke and args.func.func is common.main and args.func.args == (krr,)
    assert EPSILONS == (2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
