"""Turning uploaded files into plain text: .txt, .md, .html, .eml, .pdf and .docx.

Each reader returns the text, a small metadata dict (title, e-mail headers,
page count) and the text's sections: the span of each PDF page (1-based page
numbers) and of each heading of a .md, .html or .docx file with its heading path
("Title > Section > Subsection"), which chunks and citations carry.

A PDF page without a text layer (a scan) is read by OCR when Debian's
``tesseract-ocr`` and the ``pytesseract`` package are installed (scripts/setup.sh
installs both): the page's images go to Tesseract.  Without them a PDF with no
text at all is refused with a message saying what to install; pages of a mixed
PDF that could not be read are listed in the metadata (``unread_pages``).  Unsupported types and unreadable files raise
:class:`~py_core.errors.InvalidParameterError` naming the file and what to do --
whatever the parser raised (pypdf's limits, an unknown e-mail charset, nesting
too deep), never an internal error.

``max_chars`` limits the extracted text and is enforced while extracting: a PDF
stops at the page (and inside the page) where the text passes it, HTML stops
feeding the parser, and the file is refused with
:class:`DocumentTooLargeError` naming the file and the limit.

:class:`DocumentLimits` bounds what a file may cost to read, before and while it is
read, and a file past one gets :class:`DocumentLimitError` (the upload route answers
413) naming the limit and what to do: a .docx is checked before it is opened (its
members, the sum of their uncompressed sizes and each member's compression ratio,
from the zip directory, which Python's zipfile holds the data to; then the XML
elements of its parts, counted while streaming them), a PDF whose pages' drawing
instructions expand past the same ratio is refused before pypdf parses them, and OCR
reads each distinct
image once (its stored bytes hashed), at most ``ocr_max_images`` of them per file
within ``ocr_timeout_s`` (Tesseract is stopped when that is spent).  Memory, CPU and
wall-clock limits are the parsing process's (:mod:`companion.rag.parse_worker`).
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import io
import re
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePath
from typing import Any

from companion.rag.archive import check_archive
from companion.rag.chunking import Section
from companion.rag.limits import (
    DEFAULT_LIMITS,
    RATIO_FLOOR,
    DocumentLimitError,
    DocumentLimits,
    DocumentTooLargeError,
    too_large,
)
from py_core.errors import InvalidParameterError

__all__ = [
    "DEFAULT_LIMITS",
    "SUPPORTED_SUFFIXES",
    "DocumentLimitError",
    "DocumentLimits",
    "DocumentTooLargeError",
    "ExtractedText",
    "check_archive",
    "extract_text",
    "too_large",
]

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".eml", ".pdf", ".docx")
DEFAULT_MAX_CHARS = 1_000_000
MAX_EMAIL_PARTS = 200  # parts of a multipart e-mail that are looked at
HTML_FEED = 65_536  # characters of HTML fed to the parser at a time


class _Budget:
    """Counts extracted characters and stops the extraction once they pass the limit."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.used = 0

    def add(self, count: int) -> None:
        self.used += count
        if self.used > self.limit:
            raise too_large(self.name, self.limit)


@dataclass(frozen=True, slots=True)
class ExtractedText:
    text: str
    kind: str
    metadata: dict[str, Any] = field(default_factory=dict)
    sections: tuple[Section, ...] = ()  # none: the whole text, no page or heading


# Heading marks put around a heading's text by the HTML and .docx readers and taken
# out (with their offsets kept) after tidying: private-use characters, never in text.
_H_OPEN, _H_CLOSE = "\ue000", "\ue001"
_H_MARK = re.compile(_H_OPEN + r"(\d)(.*?)" + _H_CLOSE, re.S)
_MD_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)


def _unmark(text: str) -> tuple[str, list[tuple[int, int, str]]]:
    """The text without heading marks, and each heading's (offset, level, title)."""
    out: list[str] = []
    headings: list[tuple[int, int, str]] = []
    pos = length = 0
    for m in _H_MARK.finditer(text):
        out.append(text[pos : m.start()])
        length += m.start() - pos
        title = m.group(2).replace(_H_OPEN, "").replace(_H_CLOSE, "")
        headings.append((length, int(m.group(1)), " ".join(title.split())))
        out.append(title)
        length += len(title)
        pos = m.end()
    out.append(text[pos:])
    clean = "".join(out).replace(_H_OPEN, "").replace(_H_CLOSE, "")
    return clean, headings


def heading_sections(text: str, headings: list[tuple[int, int, str]]) -> tuple[Section, ...]:
    """Sections from each heading to the next, with the path of the headings above it."""
    if not headings:
        return ()
    sections = []
    if headings[0][0] > 0 and text[: headings[0][0]].strip():
        sections.append(Section(0, headings[0][0]))
    path: list[tuple[int, str]] = []
    for i, (offset, level, title) in enumerate(headings):
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title or "(untitled)"))
        end = headings[i + 1][0] if i + 1 < len(headings) else len(text)
        sections.append(Section(offset, end, heading=" > ".join(t for _l, t in path)))
    return tuple(s for s in sections if s.end > s.start)


def _markdown_sections(text: str) -> tuple[Section, ...]:
    heads = [(m.start(), len(m.group(1)), m.group(2).strip()) for m in _MD_HEADING.finditer(text)]
    return heading_sections(text, heads)


class _HTMLText(HTMLParser):
    _SKIP = frozenset({"script", "style", "noscript", "template", "head"})
    _BLOCK = frozenset(
        {
            "p",
            "div",
            "br",
            "li",
            "tr",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "section",
            "article",
            "pre",
            "blockquote",
            "table",
            "ul",
            "ol",
            "hr",
        }
    )

    _HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: str | None = None
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in self._SKIP:
            self._skip += 1
        if tag in self._BLOCK:
            self.parts.append("\n")
        if tag in self._HEADINGS and not self._skip:
            self.parts.append(_H_OPEN + tag[1])

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self._SKIP and self._skip:
            self._skip -= 1
        if tag in self._HEADINGS and not self._skip:
            self.parts.append(_H_CLOSE)
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title = (self.title or "") + data.strip()
        if not self._skip:  # a page's own private-use marks would pass for headings
            self.parts.append(data.replace(_H_OPEN, "").replace(_H_CLOSE, ""))


def html_to_text(html: str, budget: _Budget | None = None) -> tuple[str, str | None]:
    text, title, _sections = _html(html, budget)
    return text, title


def _html(html: str, budget: _Budget | None = None) -> tuple[str, str | None, tuple[Section, ...]]:
    """The text of an HTML page, its title, and the sections of its h1-h6 headings."""
    parser = _HTMLText()
    for start in range(0, len(html), HTML_FEED):
        parser.feed(html[start : start + HTML_FEED])
        if budget is not None:
            budget.used = 0
            budget.add(sum(len(p) for p in parser.parts))
    parser.close()
    text, headings = _unmark(_tidy("".join(parser.parts)))
    return text, parser.title, heading_sections(text, headings)


def _tidy(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[ \t\f\v]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _decode(data: bytes, name: str) -> str:
    for encoding in (
        ("utf-8-sig", "utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig",)
    ):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError as exc:
        raise InvalidParameterError(
            f"{name}: the file is not UTF-8 text (byte {exc.start} cannot be read); save it "
            "as UTF-8 and upload it again"
        ) from None


def _eml(data: bytes, name: str, budget: _Budget) -> ExtractedText:
    msg = email.message_from_bytes(data, policy=email.policy.default)
    headers = {k: str(msg[k]) for k in ("From", "To", "Cc", "Date", "Subject") if msg[k]}
    body_parts: list[str] = []
    if sum(1 for _ in _walk(msg, MAX_EMAIL_PARTS + 1)) > MAX_EMAIL_PARTS:
        raise InvalidParameterError(
            f"{name}: the e-mail has more than {MAX_EMAIL_PARTS} parts; save its text instead"
        )
    plain = msg.get_body(preferencelist=("plain",))
    if plain is not None:
        body_parts.append(_part_text(plain, name))
    else:
        html = msg.get_body(preferencelist=("html",))
        if html is not None:
            body_parts.append(html_to_text(_part_text(html, name), budget)[0])
    if not body_parts and not msg.is_multipart():
        body_parts.append(_part_text(msg, name))
    budget.used = 0
    budget.add(sum(len(p) for p in body_parts))
    head = "\n".join(f"{k}: {v}" for k, v in headers.items())
    text = _tidy(head + "\n\n" + "\n".join(body_parts))
    meta: dict[str, Any] = {"title": headers.get("Subject") or name, **headers}
    return ExtractedText(text, "eml", meta)


def _walk(msg: Any, limit: int) -> Any:
    """The message's parts, depth first, without recursion (at most ``limit``)."""
    stack = [msg]
    seen = 0
    while stack and seen < limit:
        part = stack.pop()
        seen += 1
        yield part
        payload = part.get_payload() if part.is_multipart() else None
        if isinstance(payload, list):
            stack.extend(reversed(payload))


def _part_text(part: Any, name: str) -> str:
    """The text of one MIME part; a part that is not text is refused by name."""
    if part.get_content_maintype() != "text":
        raise InvalidParameterError(
            f"{name}: the e-mail's body is {part.get_content_type()!r}, not text"
        )
    raw = part.get_payload(decode=True)
    if not isinstance(raw, bytes):
        raise InvalidParameterError(f"{name}: the e-mail's body could not be decoded")
    charset = part.get_content_charset() or "utf-8"
    try:
        return raw.decode(charset, errors="replace")
    except LookupError:  # an unknown charset name: read it as UTF-8, replacing what is not
        return raw.decode("utf-8", errors="replace")


class OcrUnavailableError(InvalidParameterError):
    """A scanned PDF (no text layer) and no OCR engine to read it."""


OCR_INSTALL = (
    "install the OCR engine: apt-get install tesseract-ocr (Debian/Ubuntu) and "
    "pip install pytesseract -- scripts/setup.sh does both -- then upload it again"
)


def ocr_available() -> bool:
    """Whether scanned pages can be read: pytesseract importable and Tesseract on PATH."""
    import importlib.util
    import shutil

    return importlib.util.find_spec("pytesseract") is not None and bool(shutil.which("tesseract"))


def _image_keys(page: Any) -> list[tuple[Any, str]]:
    """Each image of a page with the hash of its stored bytes (an id pypdf can look up)."""
    keys = []
    for key in page.images.keys():  # noqa: SIM118 - a pypdf list of images, not a dict
        keys.append((key, _image_digest(page, key)))
    return keys


def _image_digest(page: Any, key: Any) -> str:
    """sha256 of an image as stored (its encoded stream and how to decode it), so the same
    picture repeated on many pages, as one object or many copies, is read once; images in
    forms or inline are hashed decoded."""
    digest = hashlib.sha256()
    xobj: Any = None
    if isinstance(key, str) and not key.startswith("~"):
        try:
            xobj = page["/Resources"]["/XObject"][key].get_object()
        except (KeyError, TypeError, AttributeError):
            xobj = None
    raw = getattr(xobj, "_data", None)
    if isinstance(raw, bytes):
        for field_name in ("/Width", "/Height", "/BitsPerComponent", "/Filter", "/DecodeParms"):
            digest.update(f"{field_name}={xobj.get(field_name)!s};".encode())
        digest.update(f"/ColorSpace={xobj.get('/ColorSpace')!s};".encode())
        digest.update(raw)
        return "raw:" + digest.hexdigest()
    digest.update(page.images[key].data)
    return "decoded:" + digest.hexdigest()


def _ocr_image(page: Any, key: Any, name: str, deadline: float, limits: DocumentLimits) -> str:
    """The text of one image by Tesseract, killed when the file's OCR time is spent."""
    import pytesseract
    from PIL import Image

    picture = page.images[key].image
    if picture is None or not isinstance(picture, Image.Image):  # pragma: no cover - PIL
        return ""
    left = deadline - time.monotonic()
    if left <= 0:
        raise ocr_too_slow(name, limits)
    try:
        text = pytesseract.image_to_string(picture.convert("L"), timeout=left)
    except RuntimeError as exc:
        if "timeout" in str(exc).lower():
            raise ocr_too_slow(name, limits) from None
        raise
    return str(text)


def ocr_too_slow(name: str, limits: DocumentLimits) -> DocumentLimitError:
    return DocumentLimitError(
        f"{name}: reading the scanned pages by OCR took longer than {limits.ocr_timeout_s:g} s "
        "(ocr_timeout_s); split the PDF into smaller files, or upload a PDF with a text layer"
    )


def _pdf(data: bytes, name: str, budget: _Budget, limits: DocumentLimits) -> ExtractedText:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise InvalidParameterError(
            f"{name}: the PDF is encrypted; remove the password and upload it again"
        )
    pages: list[str] = []

    def count(text: str, *args: Any) -> None:
        budget.add(len(text))  # stops inside a page that passes the limit

    scanned: list[int] = []  # pages with images and no text layer
    ocr_pages: list[int] = []
    can_ocr: bool | None = None
    to_ocr: dict[int, list[tuple[Any, str]]] = {}  # page number -> its images and hashes
    distinct: set[str] = set()
    drawn = [0, 0]  # bytes of the pages' content streams so far: decoded, as stored
    for number, page in enumerate(reader.pages, 1):
        _check_contents(page, drawn, name, limits)
        text = _tidy(page.extract_text(visitor_text=count) or "")
        if not text and _has_images(page):
            if can_ocr is None:
                can_ocr = ocr_available()
            if can_ocr:
                to_ocr[number] = _image_keys(page)
                distinct.update(digest for _key, digest in to_ocr[number])
                if len(distinct) > limits.ocr_max_images:
                    raise DocumentLimitError(
                        f"{name}: the PDF has more than {limits.ocr_max_images} different "
                        "scanned images to read by OCR (ocr_max_images); split it into "
                        "smaller files, or upload a PDF with a text layer"
                    )
            else:
                scanned.append(number)
        pages.append(text)
    deadline = time.monotonic() + limits.ocr_timeout_s
    read: dict[str, str] = {}  # image hash -> its text: each distinct image is read once
    for number, keys in to_ocr.items():
        page = reader.pages[number - 1]
        texts = []
        for key, digest in keys:
            if digest not in read:
                read[digest] = _ocr_image(page, key, name, deadline, limits)
            texts.append(read[digest])
        text = _tidy("\n".join(t for t in texts if t.strip()))
        budget.add(len(text))
        if text:
            ocr_pages.append(number)
        pages[number - 1] = text
    title = None
    if reader.metadata is not None and reader.metadata.title:
        title = str(reader.metadata.title)
    if scanned and not any(pages):
        raise OcrUnavailableError(
            f"{name}: the PDF has no text layer (page(s) {_page_list(scanned)} are images, "
            f"a scan); to read it by OCR, {OCR_INSTALL}"
        )
    parts: list[str] = []
    sections: list[Section] = []
    pos = 0
    for number, text in enumerate(pages, 1):
        if not text:
            continue
        if parts:
            parts.append("\n\n")
            pos += 2
        sections.append(Section(pos, pos + len(text), page=number))
        parts.append(text)
        pos += len(text)
    meta: dict[str, Any] = {"title": title or name, "pages": len(pages)}
    if ocr_pages:
        meta["ocr_pages"] = ocr_pages
    if scanned:
        meta["unread_pages"] = scanned
        meta["unread_reason"] = f"scanned pages without OCR; {OCR_INSTALL}"
    return ExtractedText("".join(parts), "pdf", meta, tuple(sections))


def _check_contents(page: Any, drawn: list[int], name: str, limits: DocumentLimits) -> None:
    """Refuse a PDF whose pages' drawing instructions, all together so far, expand past
    ``max_compression_ratio`` (a text bomb: a few KB that pypdf would take minutes to
    parse), before the page's text is extracted.  The decoded streams are pypdf's own,
    kept for the extraction that follows."""
    contents = page.get("/Contents")
    if contents is None:
        return
    contents = contents.get_object()
    streams = list(contents) if isinstance(contents, list) else [contents]
    for stream in streams:
        stream = stream.get_object()
        raw = getattr(stream, "_data", None)
        if not hasattr(stream, "get_data") or not isinstance(raw, bytes):
            continue
        drawn[0] += len(stream.get_data())
        drawn[1] += len(raw)
    ratio = drawn[0] / max(drawn[1], 1)
    if drawn[0] > RATIO_FLOOR and ratio > limits.max_compression_ratio:
        raise DocumentLimitError(
            f"{name}: the PDF's drawing instructions expand {ratio:,.0f} times when unpacked, "
            f"more than {limits.max_compression_ratio:g} (max_compression_ratio): a "
            "decompression bomb; print it to a new PDF or save its text, and upload that"
        )


def _has_images(page: Any) -> bool:
    try:
        return len(page.images) > 0
    except Exception:  # a broken image dictionary: treated as no image
        return False


def _page_list(pages: list[int]) -> str:
    return ", ".join(str(p) for p in pages[:10]) + (" ..." if len(pages) > 10 else "")


def _docx(data: bytes, name: str, budget: _Budget, limits: DocumentLimits) -> ExtractedText:
    """Paragraphs and tables of a .docx in order; Title / Heading N styles are headings."""
    import docx
    from docx.table import Table

    check_archive(data, name, limits)
    document = docx.Document(io.BytesIO(data))
    parts: list[str] = []
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                cells = [" ".join(c.text.split()) for c in row.cells]
                line = " | ".join(dict.fromkeys(c for c in cells if c))  # merged cells repeat
                if line:
                    parts.append(line)
                    budget.add(len(line))
            continue
        text = block.text.replace(_H_OPEN, "").replace(_H_CLOSE, "").strip()
        if not text:
            continue
        style = (block.style.name if block.style is not None else "") or ""
        level = _docx_level(style)
        parts.append(f"{_H_OPEN}{level}{text}{_H_CLOSE}" if level is not None else text)
        budget.add(len(text))
    text, headings = _unmark(_tidy("\n\n".join(parts)))
    props = document.core_properties
    meta = {"title": props.title or name}
    if props.author:
        meta["author"] = props.author
    return ExtractedText(text, "docx", meta, heading_sections(text, headings))


def _docx_level(style: str) -> int | None:
    if style == "Title":
        return 0
    m = re.fullmatch(r"Heading ([1-9])", style)
    return int(m.group(1)) if m else None


def extract_text(
    name: str,
    data: bytes,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    limits: DocumentLimits = DEFAULT_LIMITS,
) -> ExtractedText:
    """Plain text and metadata of a file, chosen by its suffix (at most ``max_chars``)."""
    suffix = PurePath(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise InvalidParameterError(
            f"{name}: unsupported file type {suffix or '(none)'!r}; supported: "
            + ", ".join(SUPPORTED_SUFFIXES)
        )
    budget = _Budget(name, max_chars)
    try:
        result = _extract(suffix, name, data, budget, limits)
    except InvalidParameterError:
        raise
    except RecursionError:
        raise InvalidParameterError(f"{name}: the file is nested too deeply to read") from None
    except MemoryError:
        raise _needs_memory(name) from None
    except Exception as exc:  # pypdf's limits and parse errors, e-mail parser errors, ...
        if _out_of_memory(exc):
            raise _needs_memory(name) from None
        kind = {".pdf": "PDF", ".eml": "e-mail", ".docx": "Word document"}.get(suffix, "file")
        raise InvalidParameterError(
            f"{name}: not a readable {kind} ({_reason(exc)}); check the file and upload it again"
        ) from None
    if len(result.text) > max_chars:
        raise too_large(name, max_chars)
    if not result.text.strip():
        raise InvalidParameterError(f"{name}: no text could be extracted from the file")
    return result


def _out_of_memory(exc: Exception) -> bool:
    """Whether a parser failed for want of memory (libxml2 says so in its error log)."""
    log = str(getattr(exc, "error_log", ""))
    return "ERR_NO_MEMORY" in log or "memory allocation failed" in str(exc).lower()


class ParserMemoryError(DocumentLimitError):
    """Reading the file ran out of memory (the parsing process's limit, in the child)."""


def _needs_memory(name: str) -> ParserMemoryError:
    return ParserMemoryError(
        f"{name}: reading the file needs more memory than a parser may use "
        "(parse_memory_mb); split it into smaller files or save its text and upload that"
    )


def _extract(
    suffix: str, name: str, data: bytes, budget: _Budget, limits: DocumentLimits
) -> ExtractedText:
    if suffix == ".pdf":
        return _pdf(data, name, budget, limits)
    if suffix == ".eml":
        return _eml(data, name, budget)
    if suffix == ".docx":
        return _docx(data, name, budget, limits)
    if suffix in (".html", ".htm"):
        text, title, sections = _html(_decode(data, name), budget)
        return ExtractedText(text, "html", {"title": title or name}, sections)
    kind = "md" if suffix in (".md", ".markdown") else "txt"
    if len(data) > 4 * budget.limit:  # more bytes than the limit's characters can take
        raise too_large(name, budget.limit)
    text = _tidy(_decode(data, name))
    sections = _markdown_sections(text) if kind == "md" else ()
    return ExtractedText(text, kind, {"title": name}, sections)


def _reason(exc: Exception) -> str:
    """A short, fixed description of a parser failure (never the exception's own text)."""
    from pypdf.errors import LimitReachedError

    if isinstance(exc, LimitReachedError):
        return "it passes the PDF reader's safety limits"
    if isinstance(exc, LookupError):
        return "an unknown character set"
    return type(exc).__name__
