"""The companion's side of the vLLM engine: many answers at once, each with its receipt.

:class:`VllmEngine` is the engine behind the API (the :class:`companion.engine.Engine`
protocol) when the companion runs with ``--engine vllm``: it starts (or connects to)
a vLLM server, admits up to ``max_concurrency`` answers at once, and refuses the
defenses that cannot run inside vLLM's sampler before anything is charged.
:class:`VllmGeneration` is one answer: the same
:class:`~companion.decoding.generate.GenerationConfig` the in-process loop reads,
sent as token ids with a :class:`~companion.vllm.request.VeilRequest`, streamed back
token by token.  Stop strings, the end of text, loops and cancellation are decided
here exactly as in the in-process loop; a token is released only when the
processor's ledger holds its noise record naming that token, so a server that lost
its processor (or changed the token) fails the answer instead of sending it
unprotected.  The receipt is built from that ledger, cut at the tokens released.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from companion.decoding.base import NoiseLedger, StepRecord
from companion.decoding.generate import GenerationConfig, GenerationResult, Release, eos_ids
from companion.decoding.receipt import build_receipt
from companion.engine import ModelEngine
from companion.errors import APIError, ErrorCode
from companion.vllm.request import SINGLE_PASS, XARG, VeilRequest, tokenizer_fingerprint
from py_core.errors import InvalidParameterError

LEDGER_WAIT_S = 2.0  # how long a token waits for its record (it is written before the token)


class EngineFailure(APIError):
    """The vLLM engine did not do what the answer needs; nothing more is released (503)."""

    def __init__(self, message: str) -> None:
        super().__init__(503, ErrorCode.MODEL_UNAVAILABLE, message)


@dataclass
class VllmClient:
    """Where the server is, and the secrets the companion keeps for it."""

    url: str
    api_key: str | None
    ledgers: Path
    salt_key: bytes = field(default_factory=lambda: os.urandom(32))
    n_params: int | None = None  # LoadedModel.parameter_count reads it
    eos: tuple[int, ...] = ()  # the model's generation_config end-of-text ids

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def cache_salt(self, principal: str) -> str:
        """The prefix-cache salt of one principal: prompts of different principals never
        share cached blocks (so no one learns from a cache hit's speed what another sent),
        and no one can name another's salt (an HMAC under a key only this process holds)."""
        return hmac.new(self.salt_key, principal.encode(), hashlib.sha256).hexdigest()


def noise_key(generator: Any) -> bytes:
    """The answer's noise key: fresh from the OS CSPRNG, or drawn from a seeded test source."""
    if getattr(generator, "secure", False):
        return os.urandom(32)
    import torch

    seeded = getattr(generator, "generator", None)
    raw = torch.randint(0, 256, (32,), generator=seeded, dtype=torch.int64)
    return bytes(int(b) for b in raw.tolist())


class _Ledger:
    """Reads one answer's ledger file as the processor appends to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: dict[str, Any] | None = None
        self.records: list[dict[str, Any]] = []
        self._handle: Any = None
        self._partial = ""

    def _read(self) -> None:
        if self._handle is None:
            try:
                self._handle = self.path.open("r", encoding="utf-8")
            except FileNotFoundError:
                return
        chunk = self._handle.read()
        if not chunk:
            return
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            record = json.loads(line)
            if record.get("error"):
                raise EngineFailure(f"the vLLM engine's Veil processor failed: {record['error']}")
            if self.header is None and "id" in record:
                self.header = record
            elif "step" in record:
                self.records.append(record)

    def record(self, step: int) -> dict[str, Any]:
        """The record of ``step``, waiting briefly for it; EngineFailure if it never comes."""
        deadline = time.monotonic() + LEDGER_WAIT_S
        while True:
            self._read()
            if len(self.records) > step:
                return self.records[step]
            if time.monotonic() > deadline:
                raise EngineFailure(
                    f"the vLLM engine sent token {step + 1} without a noise record: the server "
                    "does not run Veil's logits processor (or cannot write its ledger); no "
                    "more of this answer is released"
                )
            time.sleep(0.002)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        with contextlib.suppress(OSError):
            self.path.unlink()


class VllmGeneration:
    """One answer on the vLLM engine: iterate it for text deltas, then read ``result``."""

    def __init__(
        self,
        client: VllmClient,
        tokenizer: Any,
        config: GenerationConfig,
        cancel: threading.Event | None = None,
        *,
        principal: str = "owner",
    ) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.config = config
        self.cancel = cancel
        self.principal = principal
        self.result = GenerationResult()

    def request(self) -> tuple[VeilRequest, dict[str, Any]]:
        """The Veil request and the completions body of this answer."""
        config = self.config
        defense = config.defense
        if defense.name not in SINGLE_PASS:
            raise InvalidParameterError(
                f"the {defense.name} defense does not run on the vLLM engine; use one of "
                f"{', '.join(SINGLE_PASS)} or the in-process engine"
            )
        veil = VeilRequest(
            id=os.urandom(16).hex(),
            defense=defense.name,
            params=defense.to_dict()["params"],
            key=noise_key(config.generator).hex(),
            max_tokens=config.max_new_tokens,
            temperature=config.temperature,
            repetition_penalty=config.repetition_penalty,
            repetition_window=config.repetition_window,
            context_text=config.context_text if defense.name == "copy_aware" else "",
            public_ids=[int(t) for t in (config.public_prompt_ids or ())],
            tokenizer=tokenizer_fingerprint(self.tokenizer) if defense.name == "copy_aware" else "",
        )
        stops = sorted(eos_ids(None, self.tokenizer) | set(self.client.eos))
        body: dict[str, Any] = {
            "model": "veil",
            "prompt": [int(t) for t in config.prompt_ids],
            "max_tokens": config.max_new_tokens,
            "temperature": 0.0,  # Veil chooses the token (companion/vllm/rows.py)
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            "skip_special_tokens": True,
            "ignore_eos": config.ignore_eos,
            "stop_token_ids": [] if config.ignore_eos else stops,
            "cache_salt": self.client.cache_salt(self.principal),
            "vllm_xargs": {XARG: veil.to_json()},
        }
        return veil, body

    def __iter__(self) -> Iterator[str]:
        return self._run()

    def _run(self) -> Iterator[str]:
        import httpx

        config, out = self.config, self.result
        veil, body = self.request()
        out.prompt_tokens = len(config.prompt_ids)
        public = config.public_prompt_ids
        out.public_prompt_tokens = len(public) if public is not None else out.prompt_tokens
        stops = set() if config.ignore_eos else set(body["stop_token_ids"])
        ledger = _Ledger(self.client.ledgers / f"{veil.id}.jsonl")
        filler = self._filler(httpx)
        release = Release(self.tokenizer, config.stop, config.stop_loops, out)
        generated = release.generated
        ended_on_eos = False
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(30.0, read=None)) as http,
                http.stream(
                    "POST",
                    f"{self.client.url}/v1/completions",
                    json=body,
                    headers=self.client.headers(),
                ) as response,
            ):
                if response.status_code != 200:
                    raise _refusal(response)
                for token in _tokens(response, out.details):
                    if self.cancel is not None and self.cancel.is_set():
                        out.finish_reason = "cancelled"
                        break
                    record = ledger.record(len(generated))
                    if record["token"] != token or record["step"] != len(generated):
                        raise EngineFailure(
                            f"the vLLM engine returned token {token} where Veil's processor "
                            f"chose {record['token']}: no more of this answer is released"
                        )
                    if filler is not None:  # a guest's formal answer: the first token waits
                        filler.join()
                        filler = None
                    if token in stops:
                        out.finish_reason, ended_on_eos = "stop", True
                        break
                    delta, done = release.add(token)
                    if delta:
                        yield delta
                    if done:
                        break
                else:
                    out.finish_reason = (
                        "length" if len(generated) >= config.max_new_tokens else (out.finish_reason)
                    )
        except httpx.HTTPError as exc:
            raise APIError(
                503,
                ErrorCode.MODEL_UNAVAILABLE,
                f"the vLLM engine at {self.client.url} is not answering ({exc}); try again",
            ) from exc
        finally:
            ledger.close()
        rest = release.finish()
        if rest:
            yield rest
        steps = len(generated) + int(ended_on_eos)  # the in-process loop records the eos step too
        noise = None
        if ledger.header is not None and ledger.header.get("sensitivity") is not None:
            noise = NoiseLedger(
                sensitivity=float(ledger.header["sensitivity"]),
                records=[
                    StepRecord(int(r["step"]), r["sigma"], tuple(r["reasons"]))
                    for r in ledger.records[:steps]
                ],
            )
        counted = len(noise.records) if noise is not None else len(generated)
        out.receipt = build_receipt(config.defense, noise, counted, config.max_new_tokens)

    def _filler(self, httpx: Any) -> threading.Thread | None:
        """A guest's formal answer: throwaway prompt tokens up to ``pad_prefill_to``, as a
        request of their own (salted so that they are never cached), whose end the first
        token waits for -- the in-process loop's padded prefill (docs/methods/engines.md)."""
        config = self.config
        pad = config.pad_prefill_to
        if pad is None or pad <= len(config.prompt_ids):
            return None
        body = {
            "model": "veil",
            "prompt": [0] * (pad - len(config.prompt_ids)),
            "max_tokens": 1,
            "temperature": 0.0,
            "cache_salt": os.urandom(16).hex(),
        }

        def run() -> None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(
                    f"{self.client.url}/v1/completions",
                    json=body,
                    headers=self.client.headers(),
                    timeout=120.0,
                )

        thread = threading.Thread(target=run, name="veil-vllm-filler", daemon=True)
        thread.start()
        return thread


def _tokens(response: Any, details: dict[str, Any]) -> Iterator[int]:
    """The generated token ids of a streamed completion, in order; the prompt tokens the
    server found in its prefix cache go to ``details["cached_prompt_tokens"]``."""
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        chunk = json.loads(data)
        if "error" in chunk:
            raise EngineFailure(f"the vLLM engine stopped the answer: {chunk['error']}")
        usage = chunk.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            details["cached_prompt_tokens"] = int(cached)
        for choice in chunk.get("choices", ()):
            yield from (int(t) for t in choice.get("token_ids") or ())


def _refusal(response: Any) -> APIError:
    """vLLM's 4xx as the companion's 400 (its words), anything else as 503."""
    response.read()
    try:
        message = response.json().get("error", {}).get("message") or response.text
    except ValueError:
        message = response.text
    if 400 <= response.status_code < 500:
        return APIError(400, ErrorCode.INVALID_REQUEST, f"the vLLM engine refused: {message}")
    return APIError(
        503,
        ErrorCode.MODEL_UNAVAILABLE,
        f"the vLLM engine failed ({response.status_code}): {message}",
    )


@dataclass
class VllmEngine(ModelEngine):
    """The engine behind the API on vLLM: ``max_concurrency`` answers decoded at once.

    ``url`` is a running server with Veil's processor; without one the engine starts
    ``vllm serve`` from ``python`` (vLLM's environment) on the first :meth:`load`.
    """

    url: str | None = None
    api_key: str | None = None
    python: str | None = None
    ledgers: Path | None = None
    max_concurrency: int = 32
    server_args: tuple[str, ...] = ()
    server: Any = None  # companion.vllm.server.VllmServer the engine started
    # Where the defenses vLLM cannot run (bounded, dp_vote, dp_answer: passes of their own)
    # are answered: the in-process engine, on the same model, loaded when first needed.
    # None: they are refused with a 400.
    fallback: ModelEngine | None = None

    def __post_init__(self) -> None:
        self._semaphore = asyncio.Semaphore(self.max_concurrency)

    def engine_for(self, plan: Any) -> ModelEngine:
        """This engine for the single-pass defenses; the in-process ``fallback`` for the
        others, or a 400 (before any charge) when there is none."""
        name = plan.defense.name
        if name in SINGLE_PASS:
            return self
        if self.fallback is not None:
            return self.fallback
        raise APIError(
            400,
            ErrorCode.INVALID_REQUEST,
            f"the {name} defense does not run on the vLLM engine (it runs passes of its "
            f"own) and this companion does not answer it in process (vllm_fallback off); "
            f"choose one of {', '.join(SINGLE_PASS)}, or start the companion with "
            "--vllm-fallback or without --engine vllm",
            "defense",
        )

    def _open(self, spec: str | None, progress: Callable[[str], None]) -> Any:
        """The model's transformers folder and tokenizer here, the vLLM server (started now
        unless ``url`` names one), and a probe that it runs Veil's processor."""
        from transformers import AutoTokenizer

        from companion.models import LoadedModel, ensure_chat_template, model_identity
        from companion.vllm import server as vllm_server

        progress("finding the model's transformers files")
        folder = vllm_server.model_folder(spec, progress)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        stops = ensure_chat_template(tokenizer)
        ledgers = self.ledgers or Path(folder).parent / "vllm-ledgers"
        ledgers.mkdir(parents=True, exist_ok=True, mode=0o700)
        _clear_stale(ledgers)
        url, key = self.url, self.api_key
        if url is None:
            progress("starting vllm serve (a minute or two on a CPU)")
            self.server = vllm_server.VllmServer(
                vllm_server.vllm_python(self.python),
                folder,
                ledgers,
                max_seqs=self.max_concurrency,
                dtype=self.dtype,
                extra=self.server_args,
            )
            self.server.wait_ready()
            url, key = self.server.url, self.server.api_key
        client = VllmClient(url=url.rstrip("/"), api_key=key, ledgers=ledgers)
        client.n_params = _parameters(folder)
        client.eos = _generation_eos(folder)
        progress("checking that the server runs Veil's processor")
        probe(client, tokenizer)
        return LoadedModel(
            model=client,
            tokenizer=tokenizer,
            device="vllm",
            identity=model_identity(spec) or str(folder),
            source=str(folder),
            dtype=self.dtype,
            stops=stops,
            backend="vllm",
        )

    def load(self, model: Any = None) -> Any:
        if model is not None and model.id != self.model_id:
            raise APIError(
                400,
                ErrorCode.MODEL_UNAVAILABLE,
                f"the vLLM engine serves one model, {self.model_id!r}; start another companion "
                "for another model",
                "model",
            )
        return super().load(None)

    @contextlib.asynccontextmanager
    async def slot(self, progress: Callable[[int], Any] | None = None) -> AsyncIterator[None]:
        """One of ``max_concurrency`` places; 503 after ``queue_timeout_s`` without one."""
        self.check_queue()
        self._waiting += 1
        try:
            if progress is not None:
                with contextlib.suppress(Exception):
                    progress(self._waiting if self._semaphore.locked() else 0)
            try:
                async with asyncio.timeout(self.queue_timeout_s):
                    await self._semaphore.acquire()
            except TimeoutError:
                raise APIError(
                    503,
                    ErrorCode.BUSY,
                    f"all {self.max_concurrency} places on the vLLM engine stayed taken for "
                    f"{self.queue_timeout_s:g} s; try again",
                ) from None
        finally:
            self._waiting -= 1
        try:
            yield
        finally:
            self._semaphore.release()

    def close(self) -> None:
        super().close()
        if self.fallback is not None:
            self.fallback.close()
        if self.server is not None:
            self.server.stop()


STALE_LEDGER_S = 3600.0


def _clear_stale(ledgers: Path) -> None:
    """Remove records an earlier companion left (it stopped mid-answer): they hold an
    answer's token ids, and no answer lasts an hour (generation_timeout_s is 300 s)."""
    cutoff = time.time() - STALE_LEDGER_S
    for path in ledgers.glob("*.jsonl"):
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < cutoff:
                path.unlink()


def _generation_eos(folder: Path) -> tuple[int, ...]:
    """The end-of-text ids of the folder's generation_config.json (the in-process loop's
    :func:`~companion.decoding.generate.eos_ids` reads the same)."""
    try:
        value = json.loads((Path(folder) / "generation_config.json").read_text()).get(
            "eos_token_id"
        )
    except (OSError, ValueError):
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value) if isinstance(value, list) else ()


def _parameters(folder: Path) -> int | None:
    """The weights' parameter count from the safetensors header(s), without loading them."""
    import struct

    total = 0
    files = sorted(Path(folder).glob("*.safetensors"))
    for path in files:
        with path.open("rb") as handle:
            size = struct.unpack("<Q", handle.read(8))[0]
            header = json.loads(handle.read(size))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= int(dim)
                total += count
    return total or None


def probe(client: VllmClient, tokenizer: Any) -> None:
    """One short answer through the server: its processor must have recorded every token."""
    from companion.decoding.config import DefenseConfig
    from companion.decoding.noise import SecureNoise

    config = GenerationConfig(
        prompt_ids=tokenizer.encode("Hello", add_special_tokens=False) or [0],
        defense=DefenseConfig("none"),
        generator=SecureNoise(),
        max_new_tokens=2,
        ignore_eos=True,
    )
    try:
        run = VllmGeneration(client, tokenizer, config, principal="probe")
        for _ in run:
            pass
    except APIError as exc:  # EngineFailure included
        raise RuntimeError(
            f"the vLLM server at {client.url} cannot serve Veil's answers: {exc}"
        ) from exc
