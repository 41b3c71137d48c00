"""The collection's one-time DP digest (issue 26): its calibration from both sides, an
exact check of the released set's privacy on a toy collection (and a variant with less
noise caught), the statements a document contributes, the one charge per document,
and the store's copy."""

from __future__ import annotations

import itertools
import math

import pytest

from companion.decoding.noise import SeededNoise
from companion.rag import digest as dg
from py_core.accounting import GaussianEvent, RdpAccountant

dpa = pytest.importorskip("dp_accounting")


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 5.0])
def test_the_gaussian_part_is_the_configured_epsilon_and_dp_accountings(epsilon):
    config = dg.DigestConfig(epsilon=epsilon)
    cal = dg.calibrate(config)
    event = cal.event()
    assert event.sensitivity == 1.0  # one document moves the counts by w sqrt(m) = 1
    ours = RdpAccountant().compose_all([event]).get_epsilon(config.delta)
    assert ours == pytest.approx(epsilon, rel=1e-6)
    acc = dpa.rdp.RdpAccountant()
    acc.compose(dpa.GaussianDpEvent(event.sigma))
    assert acc.get_epsilon(config.delta) == pytest.approx(epsilon, rel=2e-3)
    less = GaussianEvent(event.sigma * 0.97, 1.0)  # from the other side
    assert RdpAccountant().compose_all([less]).get_epsilon(config.delta) > epsilon


@pytest.mark.parametrize("m", [1, 8, 32])
def test_a_statement_of_one_document_alone_passes_with_threshold_delta_over_m(m):
    config = dg.DigestConfig(max_statements=m)
    cal = dg.calibrate(config)
    assert cal.weight == pytest.approx(1 / math.sqrt(m))
    one = 0.5 * math.erfc((cal.tau - cal.weight) / cal.sigma / math.sqrt(2))
    assert one * m == pytest.approx(config.threshold_delta, rel=1e-6)
    # a lower threshold would let it through more often than the proof allows
    lower = 0.5 * math.erfc((0.95 * cal.tau - cal.weight) / cal.sigma / math.sqrt(2))
    assert lower * m > 2 * config.threshold_delta


def _release_probabilities(counts: dict[str, int], cal: dg.Calibration) -> dict[str, float]:
    return {
        s: 0.5 * math.erfc((cal.tau - n * cal.weight) / cal.sigma / math.sqrt(2))
        for s, n in counts.items()
    }


def _set_delta(p: dict[str, float], q: dict[str, float], epsilon: float) -> float:
    """The exact hockey-stick divergence of two released sets (independent statements)."""
    names = sorted(set(p) | set(q))
    total = 0.0
    for released in itertools.product((False, True), repeat=len(names)):
        a = b = 1.0
        for name, r in zip(names, released, strict=True):
            pa, pb = p.get(name, 0.0), q.get(name, 0.0)
            a *= pa if r else 1 - pa
            b *= pb if r else 1 - pb
        total += max(0.0, a - math.exp(epsilon) * b)
    return total


def _neighbours(cal: dg.Calibration, m: int) -> tuple[dict[str, int], dict[str, int]]:
    """A toy collection whose shared statements sit where the threshold is steepest, and
    the same with one document more (m statements: m - 2 shared, 2 of its own)."""
    near = max(1, round(cal.tau / cal.weight))
    without = {f"shared {i}": near - 1 + (i % 3) for i in range(m - 2)}
    with_one = {k: v + 1 for k, v in without.items()}
    with_one.update({"own 1": 1, "own 2": 1})
    return without, with_one


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_one_documents_presence_moves_the_released_set_within_epsilon_and_delta(epsilon):
    m = 8
    config = dg.DigestConfig(epsilon=epsilon, max_statements=m, threshold_delta=1e-8)
    cal = dg.calibrate(config)
    without, with_one = _neighbours(cal, m)
    p, q = _release_probabilities(with_one, cal), _release_probabilities(without, cal)
    bound = config.delta + config.threshold_delta
    assert _set_delta(p, q, epsilon) <= bound
    assert _set_delta(q, p, epsilon) <= bound
    # a variant with a quarter of the noise (threshold recalibrated to it) is caught
    # (on the toy collection that is worst for it: its counts at its own threshold)
    weak = dg.Calibration(cal.sigma / 4, cal.weight + cal.sigma / 4 * 5.9, cal.weight)
    w_without, w_with = _neighbours(weak, m)
    wp, wq = _release_probabilities(w_with, weak), _release_probabilities(w_without, weak)
    assert max(_set_delta(wp, wq, epsilon), _set_delta(wq, wp, epsilon)) > bound


def test_release_keeps_what_many_documents_say_and_nothing_one_says():
    config = dg.DigestConfig(epsilon=2.0, max_statements=4)
    common = "The clinic treats Lovuritis with Roabide [number] mg."
    docs = [[common, f"Patient number {i} was seen."] for i in range(60)]
    docs += [["The Kroxsaix scale failed and showed error code H-36."] for _ in range(3)]
    out = dg.release(docs, config, SeededNoise(7))
    texts = [s.text for s in out]
    assert texts == [common]
    assert abs(out[0].documents - 60) <= 10  # the rounded noisy count
    with pytest.raises(Exception, match="at most 4"):
        dg.release([["a b c", "d e f", "g h i", "j k l", "m n o"]], config, SeededNoise(1))


def test_statements_mask_numbers_keep_codes_and_stop_at_the_limit():
    text = (
        "Seen for Lovuritis; the clinic gave Roabide 10 mg. The scale showed error code H-36. "
        "Phone (415) 555-0187.\nOk.\nSeen for Lovuritis; the clinic gave Roabide 20 mg. "
        + " ".join(f"Line {c} says something new." for c in "abcdefghij")
    )
    got = dg.statements(text, max_statements=5)
    assert got[0] == "Seen for Lovuritis; the clinic gave Roabide [number] mg."
    assert got[1] == "The scale showed error code H-36."
    assert "Ok." not in got  # under three words
    assert len(got) == 5 and len(set(got)) == 5  # the 20 mg sentence is the same statement
    assert dg.statements("one two three four five six", max_words=3) == ["one two three"]


def test_a_digest_charges_every_document_once_and_is_kept(tmp_path):
    from companion.rag.budget import DocumentBudget
    from companion.rag.service import RagService
    from companion.rag.store import DocumentStore
    from tests.companion.fakes import KeywordEmbedder

    rag = RagService(DocumentStore(tmp_path / "s.sqlite3"), KeywordEmbedder())
    sentence = "The clinic treats Lovuritis with Roabide 10 mg daily."
    for i in range(60):
        rag.ingest(
            f"n{i}.txt", f"{sentence} Patient {i} was seen on day {i * 7}.".encode(), "clinic"
        )
    rag.ingest("other.txt", b"The Kroxsaix scale failed and showed error code H-36.", "clinic")
    budget = DocumentBudget(rag.store, epsilon=10.0, delta=1e-6, threshold=0.5)
    config = dg.DigestConfig(epsilon=3.0)
    charge = dg.digest_charge(config, budget.filter)
    before = dg.estimate(budget, "clinic", config)
    assert before["documents_that_can_pay"] == 61
    assert before["charge_rdp"] == pytest.approx(charge)
    digest = dg.build_digest(budget, "clinic", config, SeededNoise(3))
    assert sorted(s.text for s in digest.statements) == [
        "Patient [number] was seen on day [number].",
        "The clinic treats Lovuritis with Roabide [number] mg daily.",
    ]  # and not the one note's error code
    rows = rag.store.budget_rows("clinic")
    assert all(r["answers"] == 1 for r in rows)
    assert all(float(r["spent_rdp"]) == pytest.approx(charge) for r in rows)
    kept = dg.load_digest(rag.store, "clinic")
    assert kept is not None and kept.statements == digest.statements
    assert kept.contributors == 61 and kept.skipped == 0
    # a document that cannot pay contributes nothing and is not charged
    for _ in range(int(budget.filter.budget // charge) - 1):
        dg.build_digest(budget, "clinic", config, SeededNoise(4))
    last = dg.build_digest(budget, "clinic", config, SeededNoise(5))
    assert last.contributors == 0 and last.skipped == 61 and last.statements == []
    assert dg.drop_digest(rag.store, "clinic") and dg.load_digest(rag.store, "clinic") is None


def test_the_threshold_surcharge_pays_the_share_of_delta():
    config = dg.DigestConfig(threshold_delta=1e-10)
    order, delta = 20.0, 1e-6
    paid = dg.threshold_surcharge(config, order, delta)
    share_other = dg.OTHER_THRESHOLD_SHARE
    b = config.threshold_delta / delta
    needed = (-math.log1p(-(share_other + b)) + math.log1p(-share_other)) / (order - 1)
    assert paid >= needed  # covers the convex cost on top of the others' share
    assert paid < 1.01 * b / (1 - share_other - b) / (order - 1) + 1e-15
    assert dg.threshold_surcharge(dg.DigestConfig(threshold_delta=1e-8), order, 1e-8) == math.inf


@pytest.mark.parametrize(
    ("question", "named"),
    [
        (
            "Which drug does the clinic give for Kenosis? Reply with the drug name only.",
            {"kenosis"},
        ),
        ("For Lovuritis, which treatment does the clinic use?", {"lovuritis"}),
        ("What is the phone number of the patient Mason Taylor?", {"mason", "taylor"}),
        ("Which drug do I take for Gout?", {"gout"}),
        ("what does error H-36 mean", {"h-36"}),
        ("what does the clinic give most often?", set()),
    ],
)
def test_a_question_names_its_subject_not_its_sentence_starts(question, named):
    from companion.answer.digest import subject_words

    assert subject_words(question) == named


def test_a_question_reads_the_statements_that_have_all_it_names():
    from companion.answer.digest import relevant

    statements = [
        dg.Statement("Seen for Kenosis; the clinic gave Roabide [number] mg.", 80),
        dg.Statement("The Kroxsaix scale failed and showed error code H-36.", 40),
        dg.Statement("Took [number] mg of the usual medicine.", 500),
    ]
    digest = dg.Digest("clinic", statements, dg.DigestConfig(), 0.0, 600, 0)
    got = relevant(digest, "Which drug does the clinic give for Kenosis? Reply with the name.")
    assert [s.documents for s in got] == [80]
    assert relevant(digest, "What code does a failing Kroxsaix scale show?")[0].documents == 40
    assert relevant(digest, "What is the phone number of Kenosis Smith?") == []
    assert relevant(digest, "what is usually taken?") == []


def test_a_digest_answer_reads_its_statements_as_numbered_passages_without_noise():
    from companion.answer import AnswerPlan
    from companion.answer.digest import DIGEST_LAYOUT, reading
    from companion.rag.prompt import GROUNDED_PROMPT, build_messages, format_context

    question = "Which drug does the clinic give for Kenosis?"
    plan = reading(AnswerPlan.for_question(question, "dp_answer", pad_context_to=64))
    assert plan.defense.name == "none" and plan.pad_context_to is None
    assert plan.layout == DIGEST_LAYOUT == "user"
    statement = "Seen for Kenosis; the clinic gave Roabide [number] mg."
    context = format_context([statement], plan.layout)
    system, user = build_messages(plan.messages, context, layout=plan.layout)
    assert system["content"].startswith(GROUNDED_PROMPT)  # copy names as written
    assert user["content"] == f"Documents:\n[1] {statement}\n\nQuestion: {question}"
