"""Turning uploaded files into plain text: .txt, .md, .html, .eml and .pdf.

Each reader returns the text and a small metadata dict (title, e-mail headers,
page count).  Unsupported types and unreadable files raise
:class:`~py_core.errors.InvalidParameterError` naming the file and what to do.
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


def html_to_text(html: str) -> tuple[str, str | None]:
    parser = _HTMLText()
    parser.feed(html)
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
            f"{name}: the file is not UTF-8 text ({exc}); save it as UTF-8 and upload it again"
        ) from exc


def _eml(data: bytes, name: str) -> ExtractedText:
    msg = email.message_from_bytes(data, policy=email.policy.default)
    headers = {k: str(msg[k]) for k in ("From", "To", "Cc", "Date", "Subject") if msg[k]}
    body_parts: list[str] = []
    plain = msg.get_body(preferencelist=("plain",))
    if plain is not None:
        body_parts.append(plain.get_content())
    else:
        html = msg.get_body(preferencelist=("html",))
        if html is not None:
            body_parts.append(html_to_text(html.get_content())[0])
    if not body_parts and not msg.is_multipart():
        body_parts.append(msg.get_content())
    head = "\n".join(f"{k}: {v}" for k, v in headers.items())
    text = _tidy(head + "\n\n" + "\n".join(body_parts))
    meta: dict[str, Any] = {"title": headers.get("Subject") or name, **headers}
    return ExtractedText(text, "eml", meta)


def _pdf(data: bytes, name: str) -> ExtractedText:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise InvalidParameterError(
                f"{name}: the PDF is encrypted; remove the password and upload it again"
            )
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError) as exc:
        if isinstance(exc, InvalidParameterError):
            raise
        raise InvalidParameterError(f"{name}: not a readable PDF ({exc})") from exc
    title = None
    if reader.metadata is not None and reader.metadata.title:
        title = str(reader.metadata.title)
    return ExtractedText(
        _tidy("\n\n".join(pages)), "pdf", {"title": title or name, "pages": len(pages)}
    )


def extract_text(name: str, data: bytes) -> ExtractedText:
    """Plain text and metadata of a file, chosen by its suffix."""
    suffix = PurePath(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise InvalidParameterError(
            f"{name}: unsupported file type {suffix or '(none)'!r}; supported: "
            + ", ".join(SUPPORTED_SUFFIXES)
        )
    if suffix == ".pdf":
        result = _pdf(data, name)
    elif suffix == ".eml":
        result = _eml(data, name)
    elif suffix in (".html", ".htm"):
        text, title = html_to_text(_decode(data, name))
        result = ExtractedText(text, "html", {"title": title or name})
    else:
        kind = "md" if suffix in (".md", ".markdown") else "txt"
        result = ExtractedText(_tidy(_decode(data, name)), kind, {"title": name})
    if not result.text.strip():
        raise InvalidParameterError(f"{name}: no text could be extracted from the file")
    return result
