"""Chunks that know where they came from: PDF pages, heading paths, .docx, OCR, sentences."""

from __future__ import annotations

import io

import numpy as np
import pytest

import companion.rag.ingest as ingest_module
from companion.rag.chunking import Section, approximate_tokens, chunk_document
from companion.rag.ingest import OcrUnavailableError, extract_text, ocr_available
from companion.rag.retrieval import RetrievalOptions
from companion.rag.service import RagService
from companion.rag.store import DocumentStore
from tests.companion.fakes import KeywordEmbedder, pdf_pages


def scanned_pdf(lines: list[str]) -> bytes:
    """An image-only PDF (a 'scan'): the text is drawn into a picture, no text layer."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (1400, 120 + 90 * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=48)
    for i, line in enumerate(lines):
        draw.text((60, 60 + 90 * i), line, fill=0, font=font)
    out = io.BytesIO()
    image.convert("RGB").save(out, format="PDF", resolution=150)
    return out.getvalue()


def _rag(tmp_path) -> RagService:
    return RagService(
        DocumentStore(tmp_path / "s.sqlite3", embedding_model="kw"), KeywordEmbedder()
    )


def test_pdf_pages_become_sections_and_chunk_pages(tmp_path):
    """Each PDF page is a section with its 1-based number; search hits carry the page."""
    data = pdf_pages(["Intro page about cats.", "Nothing here.", "The gout treatment plan."])
    extracted = extract_text("plan.pdf", data)
    assert [s.page for s in extracted.sections] == [1, 2, 3]
    assert extracted.text[extracted.sections[2].start : extracted.sections[2].end] == (
        "The gout treatment plan."
    )
    rag = _rag(tmp_path)
    rag.ingest("plan.pdf", data, "c")
    hits = rag.search("gout treatment", "c", 1, RetrievalOptions(mode="hybrid"))
    assert (hits[0].document, hits[0].page) == ("plan.pdf", 3)


def test_markdown_and_html_headings_give_heading_paths():
    """Heading paths follow the levels: a deeper heading nests, a same-level one replaces."""
    md = (
        b"# Clinic\n\nIntro.\n\n## Asthma\n\nInhaler.\n\n### Dose\n\nTwo puffs.\n\n## Gout\n\nRest."
    )
    result = extract_text("n.md", md)
    found = {
        result.text[s.start : s.end].strip().split("\n")[-1]: s.heading for s in result.sections
    }
    assert found["Two puffs."] == "Clinic > Asthma > Dose"
    assert found["Rest."] == "Clinic > Gout"
    html = (
        b"<html><body><h1>Guide</h1><p>Start.</p><h2>Fever</h2><p>Fluids.</p>"
        b"<h3>Children</h3><p>Less.</p><h2>Cough</h2><p>Honey \xee\x80\x80 tea.</p></body></html>"
    )
    result = extract_text("g.html", html)
    assert "\ue000" not in result.text and "Honey tea." in result.text  # a page's own mark
    by_end = {
        result.text[s.start : s.end].strip().split("\n")[-1]: s.heading for s in result.sections
    }
    assert by_end["Less."] == "Guide > Fever > Children"
    assert by_end["Honey tea."] == "Guide > Cough"


def test_docx_paragraphs_tables_and_headings(tmp_path):
    """A .docx (made with python-docx here) gives its text, table rows and heading paths."""
    import docx

    document = docx.Document()
    document.core_properties.title = "Visit"
    document.add_heading("Visit notes", level=0)
    document.add_heading("Medication", level=1)
    document.add_paragraph("Colchicine for the gout attack.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Drug", "Dose"
    table.cell(1, 0).text, table.cell(1, 1).text = "Colchicine", "0.5 mg"
    document.add_heading("Follow-up", level=1)
    document.add_paragraph("Come back in two weeks.")
    out = io.BytesIO()
    document.save(out)
    result = extract_text("visit.docx", out.getvalue())
    assert result.kind == "docx" and result.metadata["title"] == "Visit"
    assert "Colchicine | 0.5 mg" in result.text
    by_heading = {s.heading: result.text[s.start : s.end] for s in result.sections}
    assert "Colchicine for the gout attack." in by_heading["Visit notes > Medication"]
    assert "two weeks" in by_heading["Visit notes > Follow-up"]
    rag = _rag(tmp_path)
    rag.ingest("visit.docx", out.getvalue(), "c")
    hit = rag.search("gout", "c", 1, RetrievalOptions(mode="bm25"))[0]
    assert hit.heading == "Visit notes > Medication" and hit.page is None


def test_a_scanned_pdf_without_ocr_says_what_to_install(monkeypatch):
    """No text layer and no OCR engine: a clear error naming tesseract-ocr and pytesseract."""
    monkeypatch.setattr(ingest_module, "ocr_available", lambda: False)
    with pytest.raises(OcrUnavailableError, match=r"tesseract-ocr.*pytesseract"):
        extract_text("scan.pdf", scanned_pdf(["Gout clinic letter"]))


@pytest.mark.skipif(not ocr_available(), reason="tesseract-ocr / pytesseract not installed")
def test_a_scanned_pdf_is_read_by_ocr():
    """With Tesseract installed, the scanned page's words are extracted and paged."""
    result = extract_text("scan.pdf", scanned_pdf(["Gout clinic letter", "Patient MRN 4471203"]))
    assert "gout clinic letter" in result.text.lower() and "4471203" in result.text
    assert result.metadata["ocr_pages"] == [1] and result.sections[0].page == 1


def test_chunks_end_on_sentences_within_the_budget():
    """Sentences are packed whole within the token budget; chunks never cross a section and
    consecutive chunks share their last sentence(s) up to the overlap."""
    sentences = [f"Sentence number {i} says something short." for i in range(40)]
    text = " ".join(sentences[:20]) + "\n\n" + " ".join(sentences[20:])
    split = text.index("\n\n")
    sections = [Section(0, split, page=1), Section(split + 2, len(text), page=2)]
    chunks = chunk_document(text, sections, max_tokens=40, overlap_tokens=10)
    for c in chunks:
        assert c.text.endswith(".") and c.text[0] == "S"
        assert approximate_tokens(c.text) <= 40
        assert text[c.start : c.end] == c.text
        assert (c.page == 1) == (c.end <= split)
    assert chunks[0].text.split(". ")[-1] in chunks[1].text  # the overlap
    covered = {s for c in chunks for s in sentences if s in c.text}
    assert covered == set(sentences)


def test_chunking_uses_a_given_tokenizer_and_splits_a_long_sentence():
    """count_tokens is the budget's measure; a sentence over the budget is cut in windows."""
    long = " ".join(f"w{i}" for i in range(300)) + "."
    chunks = chunk_document(
        long, max_tokens=50, overlap_tokens=0, count_tokens=lambda t: len(t.split())
    )
    assert len(chunks) >= 6 and all(len(c.text.split()) <= 50 for c in chunks)
    assert " ".join(c.text for c in chunks) == long  # no overlap asked: the words once each


def test_chunk_bytes_are_bounded():
    """No chunk passes max_bytes, even for a text without spaces."""
    blob = "x" * 5000 + ". Then a sentence."
    for c in chunk_document(blob, max_tokens=200, max_bytes=512):
        assert len(c.text.encode()) <= 512


def test_ingest_records_page_and_heading_in_the_store(tmp_path):
    """RagService.ingest stores each chunk's page and heading (the API's citation fields)."""
    rag = _rag(tmp_path)
    info, _ = rag.ingest("n.md", b"# Notes\n\n## Gout\n\nRest and colchicine for gout.", "c")
    rows = rag.store._conn.execute(
        "SELECT page, heading FROM chunks WHERE document_id = ?", (info.id,)
    ).fetchall()
    assert [(r[0], r[1]) for r in rows][-1] == (None, "Notes > Gout")
    vec = np.asarray(KeywordEmbedder().encode(["gout"]))[0]
    assert rag.search("gout", "c", 1, vector=vec)[0].heading == "Notes > Gout"
