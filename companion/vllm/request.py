"""What one answer asks of the vLLM engine: one JSON value in ``vllm_xargs["veil"]``.

Both sides import this module (the companion, and Veil's logits processor inside
vLLM's own environment), so it needs only the standard library.  The processor
rebuilds the answer's defense from it with the in-process engine's own code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from py_core.errors import InvalidParameterError

XARG = "veil"  # the vllm_xargs key
VERSION = 1
LEDGER_ENV = "VEIL_LEDGER_DIR"  # where the processor writes each answer's noise records

# The defenses whose every step is one function of one row's logits: they run inside
# vLLM's sampler.  The others run passes of their own (bounded: a public pass beside the
# private one; dp_vote and dp_answer: one pass per document group) and are served by the
# in-process engine only (docs/methods/engines.md).
SINGLE_PASS = ("none", "static", "pad", "copy_aware")


@dataclass(frozen=True)
class VeilRequest:
    """One answer's settings for the processor; ``key`` seeds its noise stream (hex)."""

    id: str  # the ledger file's name: 32 hex digits
    defense: str
    params: dict[str, Any]
    key: str  # 64 hex digits: companion.decoding.noise.KeyedNoise's key
    max_tokens: int
    temperature: float = 0.0
    repetition_penalty: float = 1.0
    repetition_window: int = 64
    context_text: str = ""
    public_ids: list[int] = field(default_factory=list)
    tokenizer: str = ""  # tokenizer_fingerprint() of the companion's tokenizer
    version: int = VERSION

    def __post_init__(self) -> None:
        if self.version != VERSION:
            raise InvalidParameterError(
                f"this Veil processor reads request version {VERSION}; got {self.version!r} "
                "(the companion and the vLLM server run different Veil versions)"
            )
        if self.defense not in SINGLE_PASS:
            raise InvalidParameterError(
                f"the {self.defense!r} defense does not run on the vLLM engine (it runs "
                f"passes of its own); choose one of {', '.join(SINGLE_PASS)}, or serve it with "
                "the in-process engine (veil serve without --engine vllm)"
            )
        if len(self.id) != 32 or any(c not in "0123456789abcdef" for c in self.id):
            raise InvalidParameterError("the request id must be 32 lowercase hex digits")
        if len(self.key) != 64 or any(c not in "0123456789abcdef" for c in self.key):
            raise InvalidParameterError("the noise key must be 64 lowercase hex digits")
        if self.max_tokens < 1 or self.temperature < 0 or self.repetition_penalty < 1.0:
            raise InvalidParameterError("max_tokens >= 1, temperature >= 0, penalty >= 1")

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: object) -> VeilRequest:
        if not isinstance(text, str):
            raise InvalidParameterError(f"vllm_xargs[{XARG!r}] must be a JSON string")
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InvalidParameterError(f"vllm_xargs[{XARG!r}] is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidParameterError(f"vllm_xargs[{XARG!r}] must be a JSON object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidParameterError(f"unknown fields in the Veil request: {unknown}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise InvalidParameterError(f"the Veil request is incomplete: {exc}") from None


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of the tokenizer's vocabulary: both sides must tokenize the context alike."""
    cached = getattr(tokenizer, "_veil_fingerprint", None)
    if isinstance(cached, str):
        return cached
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    digest = hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:32]
    with contextlib.suppress(AttributeError):  # a tokenizer with __slots__: not cached
        tokenizer._veil_fingerprint = digest
    return digest
