"""Turning uploaded files into plain text: .txt, .md, .html, .eml and .pdf.

Each reader returns the text and a small metadata dict (title, e-mail headers,
page count).  Unsupported types and unreadable files raise
:class:`~py_core.errors.InvalidParameterError` naming the file and what to do --
whatever the parser raised (pypdf's limits, an unknown e-mail charset, nesting
too deep), never an internal error.

``max_chars`` limits the extracted text and is enforced while extracting: a PDF
stops at the page (and inside the page) where the text passes it, HTML stops
feeding the parser, and the file is refused with
:class:`DocumentTooLargeError` naming the file and the limit.
"""

from __future__ import annotations

import email
import email.policy
import io
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePath
from typing import Any

from py_core.errors import InvalidParameterError

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".eml", ".pdf")
DEFAULT_MAX_CHARS = 1_000_000
MAX_EMAIL_PARTS = 200  # parts of a multipart e-mail that are looked at
HTML_FEED = 65_536  # characters of HTML fed to the parser at a time


class DocumentTooLargeError(InvalidParameterError):
    """A file whose extracted text (or chunk count) passes a limit; names the file and limit."""


def too_large(name: str, limit: int, unit: str = "characters") -> DocumentTooLargeError:
    """The file's text passes ``limit`` characters (or chunks): name both, say what to do."""
    setting = "max_document_chars" if unit == "characters" else "max_document_chunks"
    return DocumentTooLargeError(
        f"{name}: the file has more than {limit:,} {unit} of text, the limit per document "
        f"({setting}); split it into smaller files"
    )


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

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self._SKIP and self._skip:
            self._skip -= 1
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title = (self.title or "") + data.strip()
        if not self._skip:
            self.parts.append(data)


def html_to_text(html: str, budget: _Budget | None = None) -> tuple[str, str | None]:
    parser = _HTMLText()
    for start in range(0, len(html), HTML_FEED):
        parser.feed(html[start : start + HTML_FEED])
        if budget is not None:
            budget.used = 0
            budget.add(sum(len(p) for p in parser.parts))
    parser.close()
    return _tidy("".join(parser.parts)), parser.title


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


def _pdf(data: bytes, name: str, budget: _Budget) -> ExtractedText:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise InvalidParameterError(
            f"{name}: the PDF is encrypted; remove the password and upload it again"
        )
    pages = []

    def count(text: str, *args: Any) -> None:
        budget.add(len(text))  # stops inside a page that passes the limit

    for page in reader.pages:
        pages.append(page.extract_text(visitor_text=count) or "")
    title = None
    if reader.metadata is not None and reader.metadata.title:
        title = str(reader.metadata.title)
    return ExtractedText(
        _tidy("\n\n".join(pages)), "pdf", {"title": title or name, "pages": len(pages)}
    )


def extract_text(name: str, data: bytes, *, max_chars: int = DEFAULT_MAX_CHARS) -> ExtractedText:
    """Plain text and metadata of a file, chosen by its suffix (at most ``max_chars``)."""
    suffix = PurePath(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise InvalidParameterError(
            f"{name}: unsupported file type {suffix or '(none)'!r}; supported: "
            + ", ".join(SUPPORTED_SUFFIXES)
        )
    budget = _Budget(name, max_chars)
    try:
        result = _extract(suffix, name, data, budget)
    except InvalidParameterError:
        raise
    except RecursionError:
        raise InvalidParameterError(f"{name}: the file is nested too deeply to read") from None
    except MemoryError:
        raise too_large(name, max_chars) from None
    except Exception as exc:  # pypdf's limits and parse errors, e-mail parser errors, ...
        kind = "PDF" if suffix == ".pdf" else "e-mail" if suffix == ".eml" else "file"
        raise InvalidParameterError(
            f"{name}: not a readable {kind} ({_reason(exc)}); check the file and upload it again"
        ) from None
    if len(result.text) > max_chars:
        raise too_large(name, max_chars)
    if not result.text.strip():
        raise InvalidParameterError(f"{name}: no text could be extracted from the file")
    return result


def _extract(suffix: str, name: str, data: bytes, budget: _Budget) -> ExtractedText:
    if suffix == ".pdf":
        return _pdf(data, name, budget)
    if suffix == ".eml":
        return _eml(data, name, budget)
    if suffix in (".html", ".htm"):
        text, title = html_to_text(_decode(data, name), budget)
        return ExtractedText(text, "html", {"title": title or name})
    kind = "md" if suffix in (".md", ".markdown") else "txt"
    if len(data) > 4 * budget.limit:  # more bytes than the limit's characters can take
        raise too_large(name, budget.limit)
    return ExtractedText(_tidy(_decode(data, name)), kind, {"title": name})


def _reason(exc: Exception) -> str:
    """A short, fixed description of a parser failure (never the exception's own text)."""
    from pypdf.errors import LimitReachedError

    if isinstance(exc, LimitReachedError):
        return "it passes the PDF reader's safety limits"
    if isinstance(exc, LookupError):
        return "an unknown character set"
    return type(exc).__name__
