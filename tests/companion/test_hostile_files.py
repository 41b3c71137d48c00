"""Issue 24: hostile documents are refused with a 4xx naming the limit, read by a limited
child process that is killed when its time is spent or its client leaves."""

from __future__ import annotations

import asyncio
import email.message
import io
import time

import psutil
import pytest
from fastapi.testclient import TestClient

import companion.rag.ingest as ingest_module
from companion.rag.ingest import (
    DocumentLimitError,
    DocumentLimits,
    DocumentTooLargeError,
    extract_text,
    ocr_available,
)
from companion.rag.parse_worker import ClientGoneError, ParseLimits, parse_document
from tests.companion.fakes import pdf_pages
from tests.companion.hostile import docx_bomb, docx_with_body, plain_app, scan_pdf, text_bomb_pdf

BASE = "http://127.0.0.1:8765"
RELAXED = DocumentLimits(
    max_compression_ratio=1e9, max_unpacked_bytes=2**40, max_xml_elements=10**9
)
needs_ocr = pytest.mark.skipif(not ocr_available(), reason="tesseract-ocr / pytesseract missing")


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return docx_bomb(3_000_000)  # ~45 KB: the probe's size


def _parse(name, data, limits=None, **kwargs):
    return asyncio.run(parse_document(name, data, limits or ParseLimits(), **kwargs))


def _parsers_left() -> list[psutil.Process]:
    """Parse workers (and Tesseracts) still running under this test process."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "parse_worker" in line or "tesseract" in line:
            found.append(child)
    return found


def _is_tesseract(process: psutil.Process) -> bool:
    try:
        return "tesseract" in process.name()
    except psutil.Error:
        return False


def _wait_gone(seconds: float = 3.0) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while (left := _parsers_left()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


# -- .docx: the zip directory and the XML are checked before python-docx parses ----------


def test_a_docx_bomb_is_refused_from_its_zip_directory(bomb):
    """The probe's ~45 KB bomb of empty paragraphs is refused by its compression ratio."""
    assert len(bomb) < 100_000
    with pytest.raises(DocumentLimitError, match=r"^bomb\.docx: .*max_compression_ratio"):
        extract_text("bomb.docx", bomb)


def test_a_docx_bomb_under_the_ratio_is_refused_by_its_element_count(bomb):
    """With the ratio and size checks out of the way, the XML element count stops it."""
    limits = DocumentLimits(max_compression_ratio=1e9, max_unpacked_bytes=2**40)
    with pytest.raises(DocumentLimitError, match=r"1,000,000 XML elements \(max_xml_elements\)"):
        extract_text("bomb.docx", bomb, limits=limits)


@pytest.mark.parametrize(
    ("limits", "needle"),
    [
        (DocumentLimits(max_archive_members=3), "max_archive_members"),
        (DocumentLimits(max_unpacked_bytes=10_000), "max_unpacked_bytes"),
        (DocumentLimits(max_xml_elements=20), "max_xml_elements"),
    ],
)
def test_each_docx_limit_refuses_and_says_which(limits, needle):
    """Members, unpacked bytes and elements each refuse a small real .docx when set low."""
    data = docx_with_body(b"<w:p><w:r><w:t>Gout is eased by rest.</w:t></w:r></w:p>" * 5)
    assert "Gout is eased by rest." in extract_text("ok.docx", data).text
    with pytest.raises(DocumentLimitError, match=needle):
        extract_text("ok.docx", data, limits=limits)


def test_the_limits_refuse_a_value_that_is_not_positive():
    """A zero or negative limit is a clear error quoting it."""
    with pytest.raises(ValueError, match="ocr_max_images must be positive, got 0"):
        DocumentLimits(ocr_max_images=0)


# -- the child process --------------------------------------------------------------------


def _eml() -> bytes:
    message = email.message.EmailMessage()
    message["From"] = "a@example.org"
    message["Subject"] = "Visit"
    message.set_content("The gout clinic is on Monday.")
    return message.as_bytes()


def _docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Visit", level=1)
    document.add_paragraph("Colchicine for gout.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("plan.pdf", lambda: pdf_pages(["Intro about cats.", "", "The gout plan."])),
        ("notes.md", lambda: b"# Clinic\n\n## Gout\n\nRest and colchicine."),
        ("page.html", lambda: b"<title>T</title><h1>Gout</h1><p>Rest.</p>"),
        ("visit.docx", _docx),
        ("visit.eml", _eml),
        ("plain.txt", lambda: "caf\u00e9 au lait".encode()),
    ],
)
def test_the_child_reads_real_documents_exactly_as_in_process(name, make):
    """Text, kind, metadata and sections from the child equal extract_text's own."""
    data = make()
    stats: dict = {}
    assert _parse(name, data, stats=stats) == extract_text(name, data)
    assert 0 < stats["peak_rss_bytes"] < ParseLimits().memory_bytes


def test_the_childs_refusals_keep_their_class_and_message():
    """A text limit stays DocumentTooLargeError, an unreadable file InvalidParameterError."""
    with pytest.raises(DocumentTooLargeError, match=r"^long\.pdf: .*10,000 characters"):
        _parse("long.pdf", _long_pdf(), ParseLimits(max_chars=10_000))
    with pytest.raises(ValueError, match=r"^junk\.pdf: not a readable PDF"):
        _parse("junk.pdf", b"%PDF-1.4\n" + b"\x00garbage" * 100)


def _long_pdf() -> bytes:
    return pdf_pages(
        [f"Page {i} of the gout clinic letter, lorem ipsum dolor." for i in range(400)]
    )


def test_a_pdf_text_bomb_is_refused_by_its_compression_ratio():
    """The probe's text bomb (36 KB drawing 200,000 text runs) is refused before pypdf
    parses its operators (that took ~90 s in the child); a relaxed ratio reaches the text
    limit as before."""
    with pytest.raises(
        DocumentLimitError, match=r"^bomb\.pdf: .*expand 3\d\d times.*max_compression"
    ):
        extract_text("bomb.pdf", text_bomb_pdf())
    relaxed = DocumentLimits(max_compression_ratio=1e9)
    with pytest.raises(DocumentTooLargeError, match="10,000 characters"):
        extract_text("bomb.pdf", text_bomb_pdf(), max_chars=10_000, limits=relaxed)


def test_a_bomb_past_the_memory_limit_is_refused_by_the_childs_rlimit(bomb):
    """With every document check off, RLIMIT_AS stops python-docx: 413-kind, server unhurt."""
    before = psutil.Process().memory_info().rss
    limits = ParseLimits(document=RELAXED, memory_bytes=256 * 2**20)
    with pytest.raises(DocumentLimitError, match=r"more than 256 MB of memory \(parse_memory_mb\)"):
        _parse("bomb.docx", bomb, limits)
    assert psutil.Process().memory_info().rss - before < 50 * 2**20
    assert not _wait_gone()


def test_a_parser_past_its_time_is_killed():
    """A text bomb read with a huge text limit passes parse_timeout_s: refused, child gone."""
    limits = ParseLimits(max_chars=100_000_000, document=RELAXED, timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(DocumentLimitError, match=r"longer than 1 s \(parse_timeout_s\)"):
        _parse("bomb.pdf", text_bomb_pdf(400_000), limits)
    assert time.monotonic() - started < 8.0  # generous: a start, a second, a kill
    assert not _wait_gone()


def test_a_parse_whose_client_left_is_killed():
    """cancelled() turning true stops the parse and kills the child."""
    started = time.monotonic()

    async def gone() -> bool:
        return time.monotonic() - started > 0.5

    limits = ParseLimits(max_chars=100_000_000, document=RELAXED)
    with pytest.raises(ClientGoneError):
        _parse("bomb.pdf", text_bomb_pdf(400_000), limits, cancelled=gone)
    assert not _wait_gone()


# -- OCR: each distinct image once, at most ocr_max_images, within ocr_timeout_s ----------


@pytest.fixture
def ocr_calls(monkeypatch):
    import pytesseract

    calls = []
    real = pytesseract.image_to_string

    def counted(*args, **kwargs):
        calls.append(kwargs.get("timeout"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pytesseract, "image_to_string", counted)
    return calls


@needs_ocr
@pytest.mark.parametrize("copies", [True, False], ids=["copies", "one-object"])
def test_a_100_page_scan_of_one_picture_is_read_by_ocr_once(ocr_calls, copies):
    """100 pages showing the same picture (100 copies of its bytes, or one shared object):
    Tesseract runs once, with a timeout, and every page gets the text."""
    result = extract_text("scan.pdf", scan_pdf(["Gout clinic letter"] * 100, copies=copies))
    assert len(ocr_calls) == 1 and 0 < ocr_calls[0] <= DocumentLimits().ocr_timeout_s
    assert result.metadata["ocr_pages"] == list(range(1, 101))
    assert [s.page for s in result.sections] == list(range(1, 101))
    assert "Gout clinic letter" in result.text


@needs_ocr
def test_more_distinct_pictures_than_allowed_are_refused_before_any_ocr(ocr_calls):
    """Three different pictures with ocr_max_images=2: refused, Tesseract never started."""
    data = scan_pdf(["Gout", "Asthma", "Cats"])
    with pytest.raises(DocumentLimitError, match=r"more than 2 different .*ocr_max_images"):
        extract_text("scan.pdf", data, limits=DocumentLimits(ocr_max_images=2))
    assert ocr_calls == []


@needs_ocr
def test_ocr_past_its_time_is_refused(monkeypatch):
    """Tesseract stopped by the file's OCR time (pytesseract's timeout kills it)."""
    with pytest.raises(DocumentLimitError, match=r"longer than 0.01 s \(ocr_timeout_s\)"):
        extract_text(
            "scan.pdf", scan_pdf(["Gout", "Asthma"]), limits=DocumentLimits(ocr_timeout_s=0.01)
        )


@needs_ocr
def test_a_cancelled_ocr_kills_tesseract_with_the_child():
    """Tesseract runs in the child's process group: cancelling the parse kills it too."""
    seen = []
    started = time.monotonic()

    async def gone() -> bool:
        seen.extend(p for p in _parsers_left() if _is_tesseract(p))
        return bool(seen) or time.monotonic() - started > 30

    data = scan_pdf([f"Letter {i} about gout and rest" for i in range(12)])
    with pytest.raises(ClientGoneError):
        _parse("scan.pdf", data, cancelled=gone)
    assert seen, "Tesseract never ran"
    assert not _wait_gone()


def test_a_scan_without_ocr_is_still_listed_as_unread(monkeypatch):
    """Without Tesseract nothing changes: the scanned pages are named, a text page is read."""
    monkeypatch.setattr(ingest_module, "ocr_available", lambda: False)
    with pytest.raises(ingest_module.OcrUnavailableError, match="no text layer"):
        extract_text("scan.pdf", scan_pdf(["Gout"] * 3))


# -- over HTTP ----------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path):
    app = plain_app(tmp_path)
    with TestClient(app, base_url=BASE) as test_client:
        test_client.headers["Authorization"] = f"Bearer {app.state.token}"
        yield test_client


def _upload(client, name, data):
    return client.post("/v1/documents", files=[("files", (name, data, "application/octet-stream"))])


def test_an_uploaded_docx_bomb_is_a_413_naming_the_file_and_limit(client, bomb):
    """The bomb gets 413 document_too_large with what to do, and nothing is stored."""
    r = _upload(client, "bomb.docx", bomb)
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["code"] == "document_too_large"
    assert (
        error["message"].startswith("bomb.docx: ") and "max_compression_ratio" in error["message"]
    )
    assert "Save As" in error["message"]
    assert client.get("/v1/documents").json() == []


def test_an_uploaded_pdf_over_the_text_limit_is_still_a_400(tmp_path):
    """A long PDF stops at max_document_chars, as before, in the child; the bomb is a 413."""
    app = plain_app(tmp_path, max_document_chars=10_000)
    with TestClient(app, base_url=BASE) as client:
        client.headers["Authorization"] = f"Bearer {app.state.token}"
        r = _upload(client, "long.pdf", _long_pdf())
        assert r.status_code == 400, r.text
        assert "10,000 characters" in r.json()["error"]["message"]
        r = _upload(client, "bomb.pdf", text_bomb_pdf())
        assert r.status_code == 413, r.text
        assert "max_compression_ratio" in r.json()["error"]["message"]


@needs_ocr
def test_an_uploaded_100_page_scan_of_one_picture_is_stored(client):
    """The probe's scan is read (one OCR) and stored with its 100 pages."""
    r = _upload(client, "scan.pdf", scan_pdf(["Gout clinic letter"] * 100, copies=False))
    assert r.status_code == 200, r.text
    assert r.json()["documents"][0]["document"]["metadata"]["ocr_pages"] == list(range(1, 101))
