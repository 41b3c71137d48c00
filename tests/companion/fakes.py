"""Stand-ins the companion tests share: embedders that load nothing, a PDF, a served app."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_chat_model(folder: Any) -> Any:
    """The tiny random llama (companion.audit.tiny) with a chat template, in ``folder``."""
    from transformers import AutoTokenizer

    from companion.audit.tiny import make_tiny_model

    made = make_tiny_model(folder)
    tokenizer = AutoTokenizer.from_pretrained(made)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(made)
    return made


class KeywordEmbedder:
    """Counts of a few keywords (and a small constant): texts on one topic have cosine ~1."""

    WORDS = ("gout", "asthma", "cats", "fever")

    def encode(self, texts: Any, **kwargs: Any) -> Any:
        import numpy as np  # inside: the kill -9 test sends this class's source to a child

        out = np.zeros((len(texts), len(self.WORDS) + 1), dtype=np.float32)
        for i, text in enumerate(texts):
            words = text.lower().replace("?", " ").replace(".", " ").split()
            for j, word in enumerate(self.WORDS):
                out[i, j] = words.count(word)
            out[i, -1] = 0.01
        return out


class ConstantEmbedder:
    """Every text gets the same 384-dimensional vector (0: retrieval unused; 1: all equal)."""

    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def encode(self, texts: Any, **kwargs: Any) -> Any:
        import numpy as np

        return np.full((len(texts), 384), self.value, dtype=np.float32)


class WordTokenizer:
    """One token per whitespace-separated word; a chat template that joins the messages."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [len(word) for word in text.split()]

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return " ".join("x" * int(i) for i in ids)

    def apply_chat_template(self, messages: Any, **kwargs: Any) -> dict[str, list[int]]:
        text = " ".join(f"<{m['role']}> {m['content']}" for m in messages)
        return {"input_ids": self.encode(text)}


def pdf_pages(pages: list[str]) -> bytes:
    """A valid PDF with one line of Helvetica text per page (offsets computed, no library)."""
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode(),
    ]
    font = 3 + 2 * n
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return pdf_file(objects)


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of these objects (1-based, in order; object 1 the catalog) with its xref."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_http(app: Any, port: int, *, timeout: float = 30.0, config: Any = None) -> Iterator[str]:
    """Run ``app`` with uvicorn in a thread (``config``: a ``uvicorn.Config`` of its own);
    yields its base URL."""
    import threading
    import time

    import uvicorn

    config = config or uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + timeout
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
