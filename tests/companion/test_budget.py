"""The per-document lifetime budget: the individual Rényi filter, its SQLite state, the API."""

from __future__ import annotations

import contextlib
import math
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from dp_accounting import dp_event, rdp
from fastapi.testclient import TestClient

from companion.app import create_app
from companion.decoding.config import DefenseConfig
from companion.rag.budget import DocumentBudget, UnknownDocumentError, planned_charge
from companion.rag.service import RagService
from companion.rag.store import DocumentStore
from companion.settings import Settings
from py_core import accounting
from py_core.errors import InsufficientBudgetError, InvalidParameterError
from tests.companion.fakes import KeywordEmbedder, WordTokenizer

ROOT = Path(__file__).resolve().parents[2]
BASE = "http://127.0.0.1:8765"
DOCS = {
    "gout.txt": b"gout is eased by colchicine and rest",
    "asthma.txt": b"asthma is treated with inhaled steroids",
    "cats.txt": b"cats sleep sixteen hours a day",
    "gout-fever.txt": b"gout with fever needs a doctor",
}


def _rag(path: Path) -> RagService:
    rag = RagService(DocumentStore(path), KeywordEmbedder())
    for name, data in DOCS.items():
        if not any(d.name == name for d in rag.store.documents("med")):
            rag.ingest(name, data, "med")
    return rag


def _budget(rag: RagService, epsilon: float = 10.0, threshold: float = 0.5) -> DocumentBudget:
    return DocumentBudget(rag.store, epsilon=epsilon, delta=1e-6, threshold=threshold)


def _ask(budget, rag, question, defense, *, k=3, max_tokens=16, guest=False, answer="a"):
    return budget.retrieve(
        rag,
        question,
        "med",
        k,
        defense=defense,
        max_tokens=max_tokens,
        is_guest=guest,
        answer_id=answer,
    )


def _spent(budget: DocumentBudget) -> dict[str, float]:
    return {d["document"]: d["spent_rdp"] for d in budget.status("med")["documents"]}


BOUNDED_8 = DefenseConfig.from_options("bounded", {"epsilon": 8.0})
BOUNDED_1 = DefenseConfig.from_options("bounded", {"epsilon": 1.0})


# --------------------------------------------------------------- the pure filter


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0, 10.0, 32.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-6, 1e-9])
def test_rdp_budget_inverts_the_conversion_at_its_order(epsilon, delta):
    """B(alpha) converts back to exactly epsilon; a hair more converts to more."""
    order = accounting.filter_order(epsilon, delta)
    assert order in accounting.DEFAULT_ORDERS
    budget = accounting.rdp_budget(epsilon, delta, order)
    back, _ = accounting.rdp_to_dp([budget], [order], delta)
    assert back == pytest.approx(epsilon, rel=1e-12)
    over, _ = accounting.rdp_to_dp([budget * (1 + 1e-9)], [order], delta)
    assert over > epsilon


def test_filter_order_fits_the_most_gaussian_charges_whatever_the_noise():
    """The order maximising B(a)/a admits at least as many equal Gaussian charges as any other."""
    epsilon, delta = 10.0, 1e-6
    best = accounting.filter_order(epsilon, delta)
    for sigma in (3.0, 30.0, 300.0):
        event = accounting.GaussianEvent(sigma, 8.0)

        def fits(order, event=event):
            try:
                return accounting.rdp_budget(epsilon, delta, order) / event.rdp(order)
            except InvalidParameterError:
                return 0.0

        assert fits(best) >= max(fits(a) for a in accounting.DEFAULT_ORDERS if a > 1.01)
    with pytest.raises(InvalidParameterError, match="no RDP budget"):
        accounting.rdp_budget(1e-4, 1e-6, 2.0)


def test_filter_spend_equals_the_rdp_accountants_composition_and_dp_accounting():
    """After N interactions the spend is the RdpAccountant's RDP at the order; epsilon agrees."""
    flt = accounting.IndividualRdpFilter(50.0, 1e-6)
    sigmas = [40.0, 55.0, 40.0, 70.0, 90.0]
    acc = accounting.RdpAccountant(orders=(flt.order,))
    theirs = rdp.RdpAccountant(orders=[flt.order])
    for i, sigma in enumerate(sigmas):
        events = [accounting.GaussianEvent(sigma, 8.0)] * 64
        flt.charge([f"doc{j}" for j in range(i % 3 + 1)], events)
        acc.compose(events[0], 64)  # doc0 is in every interaction
        theirs.compose(dp_event.GaussianDpEvent(sigma / 8.0), 64)
    assert flt.spent["doc0"] == pytest.approx(acc.rdp()[0], rel=1e-12)
    assert flt.epsilon_of(flt.spent["doc0"]) == pytest.approx(acc.get_epsilon(1e-6), rel=1e-12)
    assert flt.epsilon_of(flt.spent["doc0"]) == pytest.approx(theirs.get_epsilon(1e-6), rel=1e-9)
    assert flt.spent["doc1"] < flt.spent["doc0"]  # doc1 was not in every interaction


def test_filter_never_exceeds_its_budget_and_charges_all_or_none():
    """Charges stop before the budget; a refused charge changes no key."""
    flt = accounting.IndividualRdpFilter(10.0, 1e-6)
    events = [accounting.GaussianEvent(80.0, 8.0)] * 32
    charges = 0
    with pytest.raises(InsufficientBudgetError) as info:
        while True:
            flt.charge(["a"], events)
            charges += 1
    assert charges >= 1 and flt.spent["a"] <= flt.budget
    assert info.value.requested == pytest.approx(flt.charge_of(events))
    before = dict(flt.spent)
    with pytest.raises(InsufficientBudgetError):
        flt.charge(["fresh", "a"], events)
    assert flt.spent == before and "fresh" not in flt.spent
    assert flt.epsilon_of(flt.spent["a"]) <= 10.0


# ---------------------------------------------------------------- in the store


def test_spend_after_n_answers_equals_the_accountants_composition(tmp_path):
    """N bounded answers over one document: its spend is N calibrated answers composed at alpha."""
    rag = _rag(tmp_path / "s.sqlite3")
    budget = _budget(rag, epsilon=200.0)
    n, max_tokens = 6, 16
    for i in range(n):
        admission = _ask(budget, rag, "cats?", BOUNDED_1, max_tokens=max_tokens, answer=f"q{i}")
        assert [h.document for h in admission.hits] == ["cats.txt"]
    events = BOUNDED_1.defense.calibrated_events(BOUNDED_1.params, max_tokens)
    acc = accounting.RdpAccountant(orders=(budget.filter.order,))
    for _ in range(n):
        acc.compose_all(events)
    cats = next(d for d in budget.status("med")["documents"] if d["document"] == "cats.txt")
    assert cats["spent_rdp"] == pytest.approx(acc.rdp()[0], rel=1e-12)
    assert budget.filter.epsilon_of(cats["spent_rdp"]) == pytest.approx(acc.get_epsilon(1e-6))
    grid = accounting.RdpAccountant()  # every order: the tightest epsilon of the same answers
    for _ in range(n):
        grid.compose_all(events)
    assert cats["spent_epsilon"] == pytest.approx(grid.get_epsilon(1e-6), rel=1e-9)
    assert cats["answers"] == n
    assert cats["remaining_rdp"] == pytest.approx(budget.filter.budget - acc.rdp()[0])
    last = admission.to_dict(is_guest=False)["documents"][0]
    assert last["spent_rdp"] == cats["spent_rdp"] and last["answers"] == n
    assert last["charge_rdp"] == pytest.approx(acc.rdp()[0] / n)
    assert {k: v for k, v in _spent(budget).items() if k != "cats.txt"} == {
        "gout.txt": 0.0,
        "asthma.txt": 0.0,
        "gout-fever.txt": 0.0,
    }


def test_only_documents_above_the_threshold_are_charged_including_beyond_top_k(tmp_path):
    """Documents below the relevance threshold pay nothing; every candidate pays, in context or not."""
    rag = _rag(tmp_path / "s.sqlite3")
    budget = _budget(rag, epsilon=200.0)
    admission = _ask(budget, rag, "gout?", BOUNDED_1, k=1)
    assert [h.document for h in admission.hits] == ["gout.txt"]
    charged = {c.document: c.in_context for c in admission.charged}
    assert charged == {"gout.txt": True, "gout-fever.txt": False}
    spent = _spent(budget)
    assert spent["asthma.txt"] == spent["cats.txt"] == 0.0
    assert spent["gout.txt"] == spent["gout-fever.txt"] == admission.charge_rdp > 0
    assert _ask(budget, rag, "nothing relevant", BOUNDED_1).charged == []


def test_a_spent_document_is_excluded_for_guests_and_the_owner_is_told(tmp_path):
    """At (10, 1e-6) one bounded eps=8 answer fits; the next gets no cats, and says so."""
    rag = _rag(tmp_path / "s.sqlite3")
    budget = _budget(rag, epsilon=10.0)
    first = _ask(budget, rag, "cats?", BOUNDED_8, guest=True)
    assert [h.document for h in first.hits] == ["cats.txt"] and first.covered
    guest = _ask(budget, rag, "cats?", BOUNDED_8, guest=True)
    assert guest.hits == [] and guest.charged == []
    seen = guest.to_dict(is_guest=True)
    assert not {"documents", "excluded", "documents_charged"} & set(seen)
    first_seen = first.to_dict(is_guest=True)
    assert "cats" not in str(first_seen) and set(first_seen) == set(seen)
    owner = _ask(budget, rag, "cats?", BOUNDED_8).to_dict(is_guest=False)
    assert owner["documents"] == [] and [d["document"] for d in owner["excluded"]] == ["cats.txt"]
    status = {d["document"]: d for d in budget.status("med")["documents"]}
    assert status["cats.txt"]["exhausted"] and status["cats.txt"]["answers"] == 1
    assert status["cats.txt"]["spent_rdp"] <= budget.filter.budget
    assert not status["gout.txt"]["exhausted"]
    # A defense without a guarantee charges nothing: guests still lose cats, the owner is warned.
    copy = DefenseConfig.from_options("copy_aware")
    assert "cats.txt" not in [h.document for h in _ask(budget, rag, "cats?", copy, guest=True).hits]
    warned = _ask(budget, rag, "cats?", copy)
    assert [h.document for h in warned.hits][:1] == ["cats.txt"] and not warned.covered
    body = warned.to_dict(is_guest=False)
    assert body["exhausted_in_context"][0]["document"] == "cats.txt"
    assert "not covered" in body["note"] and body["charge_rdp"] is None
    assert _spent(budget)["cats.txt"] == status["cats.txt"]["spent_rdp"]


def test_a_formal_defense_that_states_no_cost_fails_closed(tmp_path):
    """A formal defense without calibrated events charges infinity: no document is admitted."""
    flt = accounting.IndividualRdpFilter(10.0, 1e-6)
    entry = SimpleNamespace(
        guarantee=SimpleNamespace(formal=True),
        calibrated_events=lambda params, n: [],
        store_events=lambda params, n: [],
    )
    assert planned_charge(SimpleNamespace(defense=entry, params=None), 16, flt) == math.inf
    rag = _rag(tmp_path / "s.sqlite3")
    budget = _budget(rag)
    closed = SimpleNamespace(
        name="future",
        params=None,
        defense=SimpleNamespace(**vars(entry), calibrated_epsilon=lambda p, n: None),
        to_dict=lambda: {"name": "future"},
    )
    admission = _ask(budget, rag, "cats?", closed)
    assert admission.hits == [] and admission.charged == [] and not admission.covered
    body = admission.to_dict(is_guest=False)
    assert body["charge_rdp"] is None and "no document could pay" in body["note"]
    assert [d["document"] for d in body["excluded"]] == ["cats.txt"]
    assert planned_charge(DefenseConfig.from_options("none"), 16, flt) is None


def test_restart_keeps_the_spend_and_the_filters_parameters(tmp_path):
    """Close and reopen the store: the spend is there, and settings cannot change the filter."""
    path = tmp_path / "s.sqlite3"
    rag = _rag(path)
    budget = _budget(rag, epsilon=200.0)
    _ask(budget, rag, "asthma?", BOUNDED_1)
    before, order = _spent(budget), budget.filter.order
    rag.store.close()
    rag = _rag(path)
    again = _budget(rag, epsilon=5.0)  # other settings: reported, not applied
    assert _spent(again) == before and again.filter.order == order
    assert again.filter.epsilon == 200.0
    assert again.status()["filter"]["settings_apply"] is False
    kinds = [e["kind"] for e in rag.store.budget_log()]
    assert kinds.count("setup") == 1 and kinds.count("charge") == 1


_CHILD = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from companion.decoding.config import DefenseConfig
from companion.rag.budget import DocumentBudget
from companion.rag.service import RagService
from companion.rag.store import DocumentStore
from tests.companion.fakes import KeywordEmbedder
store = DocumentStore(Path({path!r}))
rag = RagService(store, KeywordEmbedder())
budget = DocumentBudget(store, epsilon=1e6, delta=1e-6, threshold=0.5)
defense = DefenseConfig.from_options("bounded", {{"epsilon": 1.0}})
for i in range({commits}):
    budget.retrieve(rag, "gout?", "med", 3, defense=defense, max_tokens=16,
                    is_guest=True, answer_id=f"a{{i}}")
    print("committed", i, flush=True)
if {hang}:
    with store.budget_transaction() as tx:
        row = next(iter(tx.document_shas([1]).values()))
        tx.set_spent(row["sha256"], kind="charge", spent_after=123.0, answers=999,
                     detail={{}}, answer_id="never")
        print("inside", flush=True)
        time.sleep(60)
"""


def _child(path: Path, commits: int, hang: bool) -> subprocess.Popen[str]:
    code = _CHILD.format(
        root=str(ROOT),
        path=str(path),
        commits=commits,
        hang=hang,
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _consistent(store: DocumentStore) -> dict[str, tuple[float, int]]:
    """Every spend is the sum of its log's charges since the last reset, and its last row's."""
    conn = sqlite3.connect(store.path)
    conn.row_factory = sqlite3.Row
    result = {}
    for row in conn.execute("SELECT * FROM budget_spend"):
        log = conn.execute(
            "SELECT * FROM budget_log WHERE sha256 = ? ORDER BY id", (row["sha256"],)
        ).fetchall()
        assert log[-1]["id"] == row["last_log_id"]
        assert log[-1]["spent_after"] == row["spent_rdp"]
        total, charges = 0.0, 0
        for entry in log:
            assert entry["spent_before"] == total
            total = entry["spent_after"]
            if entry["kind"] == "charge":
                assert total == entry["spent_before"] + entry["charge_rdp"]
                charges += 1
            else:
                assert entry["kind"] == "reset" and total == 0.0
                charges = 0
        assert charges == row["answers"]
        result[row["sha256"]] = (row["spent_rdp"], row["answers"])
    conn.close()
    return result


@pytest.mark.parametrize("hang", [True, False])
def test_kill_9_keeps_every_committed_charge_and_no_half_charge(tmp_path, hang):
    """SIGKILL inside a charge's transaction, or at any moment: charge and log row, or neither."""
    path = tmp_path / "s.sqlite3"
    _rag(path).store.close()
    marker = "inside" if hang else "committed 5"
    deadline = time.monotonic() + 120
    with _child(path, commits=3 if hang else 10_000, hang=hang) as child:
        assert child.stdout is not None and child.stderr is not None
        for line in child.stdout:
            if line.strip() == marker or time.monotonic() > deadline:
                break
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL, child.stderr.read()
    store = DocumentStore(path)
    spends = _consistent(store)
    answers = {n for _spent, n in spends.values()}
    if hang:
        assert answers == {3}  # the uncommitted fourth charge left no trace
        assert all(e["answer_id"] != "never" for e in store.budget_log(1000))
    else:
        assert len(answers) == 1 and answers.pop() >= 6  # both gout documents, same count
    budget = DocumentBudget(store, epsilon=1e6, delta=1e-6, threshold=0.5)
    assert _spent(budget)["asthma.txt"] == 0.0


def test_reset_is_explicit_and_logged_and_the_log_is_append_only(tmp_path):
    """A reset names its documents, keeps its reason in the log; the log cannot be rewritten."""
    rag = _rag(tmp_path / "s.sqlite3")
    budget = _budget(rag, epsilon=200.0)
    _ask(budget, rag, "gout?", BOUNDED_1)
    before = _spent(budget)
    gout = next(d for d in rag.store.documents("med") if d.name == "gout.txt")
    with pytest.raises(UnknownDocumentError, match="9999"):
        budget.reset([gout.id, 9999], "typo")
    assert _spent(budget) == before
    (after,) = budget.reset([gout.id], "the owner re-checked the file")
    assert after["spent_rdp"] == 0.0 and after["answers"] == 0
    assert _spent(budget)["gout-fever.txt"] == before["gout-fever.txt"]
    entry = rag.store.budget_log(1)[0]
    assert entry["kind"] == "reset" and entry["document_id"] == gout.id
    assert entry["detail"]["reason"] == "the owner re-checked the file"
    assert entry["spent_before"] == before["gout.txt"] and entry["spent_after"] == 0.0
    _consistent(rag.store)
    conn = sqlite3.connect(rag.store.path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM budget_log")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE budget_log SET charge_rdp = 0")
    conn.close()


def test_a_store_from_before_the_budget_opens_and_gets_the_tables(tmp_path):
    """An existing store without the budget tables is migrated in place, documents kept."""
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('embedding_model', 'all-MiniLM-L6-v2');"
        "CREATE TABLE collections (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
        "created REAL NOT NULL);"
    )
    conn.close()
    rag = _rag(path)
    assert _spent(_budget(rag)) == dict.fromkeys(DOCS, 0.0)


# ----------------------------------------------------------------------- the API


class FakeEngine:
    """The engine's interface without a model: the answer is one fixed word."""

    model_id = "fake"

    def load(self):
        return SimpleNamespace(tokenizer=WordTokenizer())

    def check_queue(self):
        pass

    @contextlib.asynccontextmanager
    async def slot(self, progress=None):
        yield

    async def run_stream(self, work):
        yield "ok"


@pytest.fixture
def api(tmp_path):
    from companion.api.deps import get_engine

    settings = Settings(
        home=tmp_path,
        preload_model=False,
        document_budget_epsilon=10.0,
        budget_relevance_threshold=0.5,
    )
    app = create_app(settings, embedder=KeywordEmbedder())
    app.dependency_overrides[get_engine] = FakeEngine
    with TestClient(app, base_url=BASE) as client:
        client.headers["Authorization"] = f"Bearer {app.state.token}"
        files = [("files", (name, data, "text/plain")) for name, data in DOCS.items()]
        assert client.post("/v1/documents", files=files, data={"collection": "med"}).is_success
        yield client


def _chat(client, question, **extra):
    body = {
        "messages": [{"role": "user", "content": question}],
        "collection": "med",
        "defense": "bounded",
        "max_tokens": 8,
        **extra,
    }
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["veil"]


def test_api_charges_answers_and_shows_spent_and_remaining(api):
    """Chat charges the context's documents; GET /v1/budget and the log show it; reset is logged."""
    veil = _chat(api, "cats?")
    (doc,) = veil["budget"]["documents"]
    assert doc["document"] == "cats.txt" and doc["answers"] == 1 and veil["budget"]["covered"]
    assert doc["spent_rdp"] + doc["remaining_rdp"] == pytest.approx(veil["budget"]["budget_rdp"])
    assert [c["document"] for c in veil["citations"]] == ["cats.txt"]
    again = _chat(api, "cats?")
    assert again["citations"] == [] and again["budget"]["excluded"][0]["document"] == "cats.txt"
    streamed = api.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "asthma?"}],
            "collection": "med",
            "defense": "bounded",
            "max_tokens": 8,
            "stream": True,
        },
    ).text
    assert '"asthma.txt"' in streamed and '"budget"' in streamed
    status = api.get("/v1/budget", params={"collection": "med"}).json()
    rows = {d["document"]: d for d in status["documents"]}
    assert rows["cats.txt"]["exhausted"] and rows["cats.txt"]["answers"] == 1
    assert rows["asthma.txt"]["answers"] == 1 and rows["gout.txt"]["answers"] == 0
    assert rows["gout.txt"]["remaining_fraction"] == 1.0 and rows["gout.txt"]["spent_epsilon"] == 0
    assert rows["cats.txt"]["spent_epsilon"] == pytest.approx(8.0, abs=0.01)
    assert status["filter"]["epsilon"] == 10.0 and status["filter"]["settings_apply"]
    plain = _chat(api, "gout?", defense="copy_aware")
    assert plain["budget"]["covered"] is False and plain["budget"]["documents"] == []
    cats = rows["cats.txt"]["document_id"]
    assert api.post("/v1/budget/reset", json={"document_ids": []}).status_code == 400
    missing = api.post("/v1/budget/reset", json={"document_ids": [cats, 777], "reason": "x"})
    assert missing.status_code == 404
    reset = api.post("/v1/budget/reset", json={"document_ids": [cats], "reason": "new term"})
    assert reset.json()["reset"][0]["spent_rdp"] == 0.0
    log = api.get("/v1/budget/log", params={"document_id": cats}).json()["entries"]
    assert [e["kind"] for e in log] == ["reset", "charge"]
    assert log[0]["detail"]["reason"] == "new term"
    assert _chat(api, "cats?")["budget"]["documents"][0]["answers"] == 1


@pytest.mark.slow
def test_lifetime_budget_over_twenty_real_answers(tmp_path, capsys):
    """SmolLM2 + MiniLM, 20 bounded eps=8 questions over 4 documents: figures, invariants hold."""
    settings = Settings(home=tmp_path, allow_seed=True)
    app = create_app(settings)
    docs = {
        "gout.txt": b"Gout attacks are eased by colchicine, ice and rest.",
        "asthma.txt": b"Asthma is treated with inhaled corticosteroids and a reliever inhaler.",
        "cats.txt": b"Cats sleep for twelve to sixteen hours a day.",
        "tax.txt": b"The tax return is due on the fifteenth of April.",
    }
    questions = [
        "What eases a gout attack?",
        "How is asthma treated?",
        "How long do cats sleep?",
        "When is the tax return due?",
        "Tell me about gout.",
    ] * 4
    with TestClient(app, base_url=BASE) as client:
        client.headers["Authorization"] = f"Bearer {app.state.token}"
        files = [("files", (name, data, "text/plain")) for name, data in docs.items()]
        assert client.post("/v1/documents", files=files, data={"collection": "med"}).is_success
        contexts = []
        for question in questions:
            veil = _chat(client, question, max_tokens=16, seed=1)
            contexts.append(len(veil["citations"]))
        status = client.get("/v1/budget").json()
    budget = status["filter"]["budget_rdp"]
    with capsys.disabled():
        print(f"\nfilter: {status['filter']}\ncontext sizes: {contexts}")
        for d in status["documents"]:
            print(
                f"{d['document']}: answers {d['answers']}, spent eps {d['spent_epsilon']:.3f} "
                f"(rdp {d['spent_rdp']:.3f}, {d['spent_fraction']:.1%}), remaining rdp "
                f"{d['remaining_rdp']:.3f}, exhausted {d['exhausted']}"
            )
    assert all(d["spent_rdp"] <= budget for d in status["documents"])
    assert all(d["spent_epsilon"] <= 10.0 + 1e-9 for d in status["documents"])
    assert contexts[0] >= 1  # the first gout question had its document


def test_a_guest_key_is_charged_filtered_and_kept_out_of_the_budget_routes(api):
    """A guest's answers charge the documents, lose spent ones, name none; /v1/budget is 403."""
    created = api.post("/v1/keys", json={"collection": "med", "defense": "bounded"})
    assert created.status_code == 201, created.text
    guest = {"Authorization": f"Bearer {created.json()['key']}"}
    body = {"messages": [{"role": "user", "content": "cats?"}], "max_tokens": 8}
    first = api.post("/v1/chat/completions", json=body, headers=guest).json()["veil"]["budget"]
    second = api.post("/v1/chat/completions", json=body, headers=guest).json()["veil"]["budget"]
    assert first["covered"] and set(first) == set(second)
    assert "cats" not in str(first) + str(second)
    rows = {d["document"]: d for d in api.get("/v1/budget").json()["documents"]}
    assert rows["cats.txt"]["answers"] == 1 and rows["cats.txt"]["exhausted"]
    for method, path in (("GET", "/v1/budget"), ("GET", "/v1/budget/log")):
        assert api.request(method, path, headers=guest).status_code == 403
    reset = api.post("/v1/budget/reset", json={"document_ids": [1], "reason": "x"}, headers=guest)
    assert reset.status_code == 403
    assert api.get("/v1/budget").json()["documents"][0]["spent_rdp"] >= 0
