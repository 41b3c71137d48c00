"""Run ``veil eval answers``: the companion's own HTTP API, in process, per model.

The documents are stored as ``veil ingest`` stores them, into one collection; guest keys
are made with ``POST /v1/keys``; every question is a streamed
``POST /v1/chat/completions`` -- the owner's with the defense named in the request, a
guest's with the key's -- so retrieval, admission, the prompt, the defense and the
receipt are exactly what a person or a guest gets.  The first streamed delta times the
first token; the usage's completion tokens over the time after it give tokens/s.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from evals.answers.config import Config
from evals.answers.corpus import Corpus, Question, corpus_for, declines, is_right, repeats
from evals.answers.report import goals, write_report
from evals.common import environment, report_with_goals, write_results
from py_core.errors import InvalidParameterError

BASE = "http://127.0.0.1:8765"
COLLECTION = "answers"


def _rss_gb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1e6, 2)
    except OSError:
        pass
    return None


def _ask(client: Any, body: dict[str, Any], token: str) -> dict[str, Any]:
    """One streamed answer: text, veil, usage, first-token and total seconds."""
    t0 = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    final: dict[str, Any] = {}
    error: str | None = None
    headers = {"Authorization": f"Bearer {token}"}
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        if response.status_code != 200:
            response.read()
            return {"error": f"{response.status_code} {response.text[:300]}", "text": ""}
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                error = str(event["error"].get("message", event["error"]))
                continue
            delta = event["choices"][0]["delta"].get("content") or ""
            if delta:
                if first is None:
                    first = time.perf_counter()
                text.append(delta)
            if "veil" in event:
                final = event
    end = time.perf_counter()
    usage = final.get("usage") or {}
    completion = int(usage.get("completion_tokens") or 0)
    decode_s = end - first if first is not None else None
    return {
        "text": "".join(text),
        "error": error,
        "first_token_s": round(first - t0, 3) if first is not None else None,
        "total_s": round(end - t0, 3),
        "completion_tokens": completion,
        "prompt_tokens": int(usage.get("prompt_tokens") or 0),
        "tokens_per_s": (
            round((completion - 1) / decode_s, 2) if decode_s and completion > 1 else None
        ),
        "finish_reason": (final.get("choices") or [{}])[0].get("finish_reason"),
        "veil": final.get("veil") or {},
    }


def _cited(question: Question, veil: dict[str, Any]) -> bool | None:
    """Whether the answering document is among the citations (None: nothing to cite)."""
    if question.document is None:
        return None
    return any(c.get("document") == question.document for c in veil.get("citations") or [])


def _ingest(app: Any, corpus: Corpus) -> None:
    """Store the documents the way ``veil ingest`` does (the companion's RagService).

    The upload route reads each file in a child process of its own; for some hundred
    small text files that costs minutes on a loaded machine and measures nothing this
    evaluation is about, so the store is filled in process with the same chunking,
    embedder and store.
    """
    for document in corpus.documents:
        app.state.rag.ingest(document.name, document.text.encode(), COLLECTION)


def _load(client: Any, token: str, model: str, timeout_s: float) -> float:
    headers = {"Authorization": f"Bearer {token}"}
    t0 = time.perf_counter()
    started = client.post(f"/v1/models/{model}/load", headers=headers)
    if started.status_code != 202:
        raise RuntimeError(f"could not load {model}: {started.status_code} {started.text[:300]}")
    while True:
        state = client.get(f"/v1/models/{model}", headers=headers).json()["load"]
        if state["state"] == "loaded":
            return round(time.perf_counter() - t0, 1)
        if state["state"] == "failed":
            raise RuntimeError(f"{model} failed to load: {state['error']}")
        if time.perf_counter() - t0 > timeout_s:
            raise RuntimeError(f"{model} did not load in {timeout_s:g} s ({state['stage']})")
        time.sleep(0.5)


def run_evaluation(
    config: Config, out: Path, *, threads: int | None = None, echo: bool = True
) -> Path:
    import torch
    from fastapi.testclient import TestClient

    from companion.app import create_app
    from companion.models import model_catalog
    from companion.settings import Settings

    if threads:
        torch.set_num_threads(threads)
    corpus = corpus_for(config)
    questions = corpus.questions[: config.limit] if config.limit else corpus.questions
    if not corpus.documents or not questions:
        raise InvalidParameterError(
            "no Debian changelogs or machine-readable copyright files were found under "
            "/usr/share/doc: this evaluation reads the installed system's records"
        )
    results: dict[str, Any] = {
        "config": {
            "smoke": config.smoke,
            "models": list(config.models),
            "cells": [list(c) for c in config.cells],
            "max_tokens": config.max_tokens,
            "seed": config.seed,
            "limit": config.limit,
            "changelog_packages": config.changelog_packages,
            "copyright_packages": config.copyright_packages,
        },
        "environment": {**environment(device="cpu"), "llamacpp": _llamacpp_environment()},
        "packages": corpus.packages,
        "documents": {
            body: sum(1 for d in corpus.documents if d.body == body)
            for body in ("changelog", "copyright")
        },
        "questions_built": len(corpus.questions),
        "questions": [
            {
                "text": q.text,
                "kind": q.kind,
                "body": q.body,
                "gold": list(q.gold),
                "doc": q.document,
            }
            for q in questions
        ],
        "models": [],
        "answers": [],
        "notes": [],
    }
    with tempfile.TemporaryDirectory(prefix="veil-answers-") as tmp:
        home = Path(tmp)
        for index, model in enumerate(config.models):
            settings = Settings(
                home=home,
                model=model,
                preload_model=False,
                default_collection=COLLECTION,
                max_loaded_models=1,
                generation_timeout_s=config.generation_timeout_s,
                queue_timeout_s=config.generation_timeout_s,
                # The evaluation measures answers, not the lifetime budget: a document asked
                # about by several guest questions must not run out part-way.
                document_budget_epsilon=1e9,
            )
            app = create_app(settings)
            with TestClient(app, base_url=BASE) as client:
                owner = app.state.token
                if index == 0:
                    t0 = time.perf_counter()
                    _ingest(app, corpus)
                    results["ingest_s"] = round(time.perf_counter() - t0, 1)
                    keys = {}
                    for principal, defense in config.cells:
                        if principal != "guest":
                            continue
                        key_body = {
                            "collection": COLLECTION,
                            "defense": defense,
                            "allow_titles": True,
                            "label": f"veil eval answers ({defense})",
                        }
                        made = client.post(
                            "/v1/keys", json=key_body, headers={"Authorization": f"Bearer {owner}"}
                        )
                        if made.status_code != 201:
                            raise RuntimeError(f"guest key: {made.status_code} {made.text[:300]}")
                        keys[defense] = made.json()["key"]
                entry = next(e for e in model_catalog(model, (), home) if e.id == model)
                load_s = _load(client, owner, model, config.generation_timeout_s * 4)
                loaded = app.state.engine.loaded
                info = {
                    "model": model,
                    "description": entry.description,
                    "load_s": load_s,
                    "rss_gb": _rss_gb(),
                    "dtype": getattr(loaded, "dtype", None),
                    # llama.cpp's model holds no torch tensors: its own count
                    "parameters": getattr(loaded.model, "n_params", None)
                    or sum(p.numel() for p in loaded.model.parameters()),
                    "source": os.path.basename(getattr(loaded, "source", "")),
                }
                results["models"].append(info)
                if echo:
                    print(f"{model}: loaded in {load_s} s, RSS {info['rss_gb']} GB", flush=True)
                for qi, question in enumerate(questions):
                    for principal, defense in config.cells:
                        body: dict[str, Any] = {
                            "model": model,
                            "messages": [{"role": "user", "content": question.text}],
                            "max_tokens": config.max_tokens,
                            "stream": True,
                            "collection": COLLECTION,
                        }
                        token = owner
                        if principal == "owner":
                            body["defense"] = defense
                        else:
                            token = keys[defense]
                        got = _ask(client, body, token)
                        text = got.pop("text")
                        veil = got.pop("veil", {})
                        row = {
                            "model": model,
                            "principal": principal,
                            "defense": defense,
                            "q": qi,
                            "kind": question.kind,
                            "body": question.body,
                            "answerable": question.answerable,
                            "answer": text[:400],
                            "right": is_right(question, text) if not got.get("error") else False,
                            "declined": declines(text),
                            "cited": _cited(question, veil),
                            "citations": len(veil.get("citations") or []),
                            "repeats": repeats(text),
                            "epsilon": (veil.get("receipt") or {}).get("epsilon"),
                            **got,
                        }
                        results["answers"].append(row)
                    if echo and (qi + 1) % 10 == 0:
                        done = [r for r in results["answers"] if r["model"] == model]
                        right = sum(r["right"] for r in done)
                        print(
                            f"  {model}: {qi + 1} questions, {right}/{len(done)} right", flush=True
                        )
                    write_results(out, results)  # a long run keeps what it has
    wrapped = _Results(results)
    path = report_with_goals(wrapped, out, write_report, goals, echo=echo)
    write_results(out, dict(wrapped))  # with the goal notes
    return path


def _llamacpp_environment() -> str | None:
    """Which llama.cpp build a GGUF model of this run computes on, with how many threads."""
    from companion import llamacpp, llamacpp_runtime

    if not llamacpp.available():
        return None
    return f"{llamacpp_runtime.chosen()}, {llamacpp.default_threads()} thread(s)"


class _Results(dict[str, Any]):
    """``results`` with the ``notes`` attribute report_with_goals extends."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.notes: list[str] = data.setdefault("notes", [])
