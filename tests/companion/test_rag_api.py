"""/v1/search with retrieval_mode and retrieval_min_score; citations carry page and heading."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from companion.app import create_app
from companion.settings import Settings
from tests.companion.fakes import KeywordEmbedder, pdf_pages

BASE = "http://127.0.0.1:8765"


@pytest.fixture
def client(tmp_path):
    app = create_app(Settings(home=tmp_path, preload_model=False), embedder=KeywordEmbedder())
    with TestClient(app, base_url=BASE) as test_client:
        test_client.headers["Authorization"] = f"Bearer {app.state.token}"
        yield test_client


def _upload(client, name, data, kind):
    response = client.post(
        "/v1/documents", files=[("files", (name, data, kind))], data={"collection": "c"}
    )
    assert response.status_code == 200, response.text


def test_search_modes_threshold_and_page_citations(client):
    """A PDF's page reaches the citation; bm25 finds an identifier; the threshold can leave
    nothing; a bad mode is a 400-class error naming the allowed values."""
    _upload(
        client, "plan.pdf", pdf_pages(["Cats page.", "Gout plan MRN-4471203."]), "application/pdf"
    )
    _upload(
        client, "n.md", b"# Clinic\n\n## Asthma\n\nAsthma inhaler twice daily.", "text/markdown"
    )
    hit = client.post("/v1/search", json={"query": "gout", "collection": "c"}).json()["hits"][0]
    assert (hit["document"], hit["page"], hit["heading"]) == ("plan.pdf", 2, None)
    hit = client.post(
        "/v1/search",
        json={"query": "MRN-4471203", "collection": "c", "retrieval_mode": "bm25", "top_k": 1},
    ).json()["hits"]
    assert [h["document"] for h in hit] == ["plan.pdf"] and hit[0]["page"] == 2
    hit = client.post("/v1/search", json={"query": "asthma", "collection": "c"}).json()["hits"][0]
    assert hit["heading"] == "Clinic > Asthma" and hit["page"] is None
    none = client.post(
        "/v1/search",
        json={"query": "fever", "collection": "c", "retrieval_min_score": 0.9},
    ).json()
    assert none["hits"] == []
    bad = client.post(
        "/v1/search", json={"query": "x", "collection": "c", "retrieval_mode": "dense"}
    )
    assert bad.status_code in (400, 422) and "hybrid" in bad.text
