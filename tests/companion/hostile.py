"""Hostile documents built in memory (issue 24's probe): a .docx decompression bomb, a
"scan" of many pages showing the same picture, a PDF text bomb; and a plain companion
served the way ``veil serve`` serves it (tests/companion/test_hostile_*.py, bench)."""

from __future__ import annotations

import contextlib
import io
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.companion.fakes import pdf_file

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def docx_with_body(body: bytes) -> bytes:
    """A real .docx (python-docx's template) whose document.xml body is ``body``."""
    import docx

    template = io.BytesIO()
    docx.Document().save(template)
    out = io.BytesIO()
    with zipfile.ZipFile(template) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "word/document.xml":
                data = (
                    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
                    b'<w:document xmlns:w="'
                    + W_NS.encode()
                    + b'"><w:body>'
                    + body
                    + b"</w:body></w:document>"
                )
            dst.writestr(item.filename, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    return out.getvalue()


def docx_bomb(paragraphs: int = 6_000_000) -> bytes:
    """Empty paragraphs, compressed about 1000:1 (the probe's 44.6 KB file held ~6 M)."""
    return docx_with_body(b"<w:p/>" * paragraphs)


def text_bomb_pdf(lines: int = 200_000) -> bytes:
    """A one-page PDF of a few KB whose deflated content stream draws ``lines`` text runs."""
    content = b"BT /F1 12 Tf 72 720 Td (hello world lorem ipsum dolor) Tj ET\n" * lines
    comp = zlib.compress(content, 9)
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(comp) + comp + b"\nendstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        ]
    )


def picture(text: str, width: int = 900, height: int = 160) -> Any:
    """A grey picture of ``text`` in large letters (what a scanner gives)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (width, height), 255)
    ImageDraw.Draw(image).text((40, 40), text, fill=0, font=ImageFont.load_default(size=48))
    return image


def scan_pdf(texts: list[str], *, copies: bool = True) -> bytes:
    """An image-only PDF, one page per entry of ``texts``, each page showing the picture of
    its text.  Equal texts give equal images: as separate copies of the same bytes
    (``copies``) or one image object that every page shares."""
    n = len(texts)
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    shared: dict[str, int] = {}
    kids = []
    for text in texts:
        image = picture(text)
        if copies or text not in shared:
            data = zlib.compress(image.tobytes(), 9)
            objects.append(
                b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray "
                b"/BitsPerComponent 8 /Filter /FlateDecode /Length %d >>\nstream\n"
                % (image.width, image.height, len(data))
                + data
                + b"\nendstream"
            )
            shared[text] = len(objects)
        image_id = shared[text] if not copies else len(objects)
        draw = b"q %d 0 0 %d 36 600 cm /Im0 Do Q" % (image.width // 2, image.height // 2)
        objects.append(b"<< /Length %d >>\nstream\n" % len(draw) + draw + b"\nendstream")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /XObject << /Im0 %d 0 R >> >> >>" % (len(objects), image_id)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [" + b" ".join(kids) + b"] /Count %d >>" % n
    return pdf_file(objects)


def plain_app(home: Path, **settings: Any) -> Any:
    """The real app (every check) with a fake embedder and no chat model loaded."""
    from companion.app import create_app
    from companion.settings import Settings
    from tests.companion.fakes import KeywordEmbedder

    config = Settings(home=home, preload_model=False, **settings)
    return create_app(config, embedder=KeywordEmbedder())


@contextlib.contextmanager
def serve_like_veil(app: Any, port: int, timeout: float = 60.0) -> Iterator[str]:
    """``app`` under uvicorn with ``veil serve``'s own settings, in a thread; its URL."""
    from companion.commands.serve import uvicorn_config
    from tests.companion.fakes import serve_http

    config = uvicorn_config(app, "127.0.0.1", port, log_level="error")
    with serve_http(app, port, timeout=timeout, config=config) as url:
        yield url
