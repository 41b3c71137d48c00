"""The k-RR evaluation: perturb, restore, measure, compare with baselines, report."""

from __future__ import annotations

import json
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.krr.calibrate import WordOutcome, check, fit
from evals.krr.config import EPSILONS, LLM_EPSILONS, SUMMARY_EPSILONS, SUMMARY_PROMPT, Config
from evals.krr.corpus import Word, generate_corpus, words_of
from evals.krr.metrics import rate_with_ci, restored_flags
from evals.krr.repeat import repeat_section
from py_core.krr import implementation, perturb
from py_core.wordfreq import zipf_frequency

__all__ = ["EPSILONS", "Config", "Results", "run_evaluation"]


@dataclass
class Results:
    config: Config
    corpus: dict[str, Any] = field(default_factory=dict)
    restoration: list[dict[str, Any]] = field(default_factory=list)
    by_category: list[dict[str, Any]] = field(default_factory=list)
    llm: list[dict[str, Any]] = field(default_factory=list)
    similarity: list[dict[str, Any]] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)
    baselines: list[dict[str, Any]] = field(default_factory=list)
    calibration_check: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    examples: list[dict[str, str]] = field(default_factory=list)
    repeat: dict[str, Any] = field(default_factory=dict)  # evals.krr.repeat.run_repeat
    notes: list[str] = field(default_factory=list)
    models: dict[str, Any] = field(default_factory=dict)  # role -> evals.common.model_identity
    environment: dict[str, Any] = field(default_factory=dict)  # evals.common.environment()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        """Rebuild from results.json (to re-render a report without re-running)."""
        values = dict(data)
        cfg = dict(values.pop("config"))
        for key in ("epsilons", "metric_dp_epsilons", "repeat_epsilons", "repeat_sends"):
            if key in cfg:
                cfg[key] = tuple(cfg[key])
        values["notes"] = []  # notes are recomputed from the numbers
        return cls(config=Config(**cfg), **values)


def _rng(seed: int, *parts: object) -> random.Random:
    # str seeds are hashed with SHA-512 by random.Random: stable across runs and platforms.
    return random.Random("/".join(str(p) for p in (seed, *parts)))


def _log(message: str) -> None:
    print(f"[krr {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------ word records


@dataclass(frozen=True, slots=True)
class WordRecord:
    doc: int
    epsilon: float
    sensitive: bool
    category: str | None
    length: int
    zipf: float | None
    survived: bool  # the perturbed word equals the original
    restored: bool  # exact
    restored_lenient: bool


def _records(
    doc_index: int,
    words: Sequence[Word],
    epsilon: float,
    noisy: str,
    restored: str,
    zipfs: Sequence[float | None],
) -> list[WordRecord]:
    originals = [w.text for w in words]
    noisy_words = noisy.split()
    strict = restored_flags(originals, restored)
    loose = restored_flags(originals, restored, strict=False)
    return [
        WordRecord(
            doc=doc_index,
            epsilon=epsilon,
            sensitive=w.sensitive,
            category=w.category,
            length=len(w.text),
            zipf=z,
            survived=i < len(noisy_words) and noisy_words[i] == w.text,
            restored=s,
            restored_lenient=lo,
        )
        for i, (w, z, s, lo) in enumerate(zip(words, zipfs, strict, loose, strict=True))
    ]


def _summarise(
    records: Sequence[WordRecord], epsilon: float, restorer: str, pass_no: int
) -> list[dict[str, Any]]:
    p = implementation(epsilon).keep_probability
    rows = []
    groups: tuple[tuple[str, Callable[[WordRecord], bool]], ...] = (
        ("sensitive", lambda r: r.sensitive),
        ("non-sensitive", lambda r: not r.sensitive),
        ("sensitive, in frequency table", lambda r: r.sensitive and r.zipf is not None),
        ("sensitive, not in table", lambda r: r.sensitive and r.zipf is None),
        ("non-sensitive, not in table", lambda r: not r.sensitive and r.zipf is None),
    )
    for group, member in groups:
        chosen = [r for r in records if r.epsilon == epsilon and member(r)]
        n = len(chosen)
        if not n:
            continue
        hits = sum(r.restored for r in chosen)
        rate, low, high = rate_with_ci(hits, n)
        rows.append(
            {
                "restorer": restorer,
                "pass": pass_no,
                "epsilon": epsilon,
                "keep_probability": p,
                "group": group,
                "n_words": n,
                "restored": rate,
                "ci_low": low,
                "ci_high": high,
                "restored_lenient": sum(r.restored_lenient for r in chosen) / n,
                "pr_t0": statistics.fmean(p**r.length for r in chosen),
                "survived": sum(r.survived for r in chosen) / n,
                "mean_length": statistics.fmean(r.length for r in chosen),
            }
        )
    return rows


# --------------------------------------------------------------------------- run


def run_evaluation(config: Config, out: Path, *, write_calibration: Path | None = None) -> Results:
    import numpy as np
    import torch

    from evals.common import environment, model_identity

    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    results = Results(config, environment=environment(device="cpu"))
    t_start = time.perf_counter()

    # 1. corpus ---------------------------------------------------------------
    docs = generate_corpus(config.n_documents, seed=config.seed)
    doc_words = [words_of(d) for d in docs]
    doc_zipfs = [[zipf_frequency(w.text) for w in ws] for ws in doc_words]
    all_words = [w for ws in doc_words for w in ws]
    categories: dict[str, int] = {}
    for w in all_words:
        if w.category:
            categories[w.category] = categories.get(w.category, 0) + 1
    results.corpus = {
        "documents": len(docs),
        "emails": sum(d.kind == "email" for d in docs),
        "clinical_notes": sum(d.kind == "clinical" for d in docs),
        "words": len(all_words),
        "sensitive_words": sum(w.sensitive for w in all_words),
        "sensitive_by_category": dict(sorted(categories.items())),
        "sensitive_in_wordfreq": sum(
            1
            for ws, zs in zip(doc_words, doc_zipfs, strict=True)
            for w, z in zip(ws, zs, strict=True)
            if w.sensitive and z is not None
        ),
        "nonsensitive_in_wordfreq": sum(
            1
            for ws, zs in zip(doc_words, doc_zipfs, strict=True)
            for w, z in zip(ws, zs, strict=True)
            if not w.sensitive and z is not None
        ),
        "seed": config.seed,
    }
    (out / "corpus_sample.json").write_text(
        json.dumps([d.to_dict() for d in docs[:6]], indent=1), encoding="utf-8"
    )
    _log(f"corpus: {results.corpus['documents']} documents, {results.corpus['words']} words")

    # 2. perturb + offline restorers ------------------------------------------
    from evals.krr.restorers import LocalLLMRestorer, NoisyChannelRestorer

    unigram = NoisyChannelRestorer(context=False)
    bigram = NoisyChannelRestorer(context=True)
    noisy_texts: dict[float, list[str]] = {}
    restored_texts: dict[tuple[str, float, int], list[str]] = {}
    main_records: list[WordRecord] = []
    t0 = time.perf_counter()
    for eps in config.epsilons:
        noisy = [perturb(d.text, eps, rng=_rng(config.seed, "krr", eps, d.doc_id)) for d in docs]
        noisy_texts[eps] = noisy
        recs_by: dict[tuple[str, int], list[WordRecord]] = {}
        for restorer in (unigram, bigram):
            first = restorer.restore(noisy, eps)
            restored_texts[(restorer.name, eps, 1)] = first
            passes = [(1, first)]
            if restorer is bigram:
                second = restorer.restore(first, eps)
                restored_texts[(restorer.name, eps, 2)] = second
                passes.append((2, second))
            for pass_no, texts in passes:
                recs: list[WordRecord] = []
                for i, (ws, zs) in enumerate(zip(doc_words, doc_zipfs, strict=True)):
                    recs.extend(_records(i, ws, eps, noisy[i], texts[i], zs))
                recs_by[(restorer.name, pass_no)] = recs
                results.restoration.extend(_summarise(recs, eps, restorer.name, pass_no))
        # the perturbed text itself, unrestored: restoration = survival
        raw: list[WordRecord] = []
        for i, (ws, zs) in enumerate(zip(doc_words, doc_zipfs, strict=True)):
            raw.extend(_records(i, ws, eps, noisy[i], noisy[i], zs))
        results.restoration.extend(_summarise(raw, eps, "none (perturbed text)", 1))
        main = recs_by[(bigram.name, 1)]
        main_records.extend(main)
        for category in sorted(categories):
            chosen = [r for r in main if r.category == category]
            p = implementation(eps).keep_probability
            results.by_category.append(
                {
                    "epsilon": eps,
                    "category": category,
                    "n_words": len(chosen),
                    "restored": sum(r.restored for r in chosen) / len(chosen),
                    "pr_t0": statistics.fmean(p**r.length for r in chosen),
                    "in_wordfreq": sum(r.zipf is not None for r in chosen) / len(chosen),
                }
            )
        _log(f"eps={eps:g}: perturbed and restored {len(docs)} documents")
    results.timings["offline_restoration_s"] = time.perf_counter() - t0
    results.examples.append(
        {
            "epsilon": "6",
            "original": docs[1].text,
            "perturbed": noisy_texts.get(6.0, noisy_texts[config.epsilons[-1]])[1],
            "restored": restored_texts[
                (bigram.name, 6.0 if 6.0 in noisy_texts else config.epsilons[-1], 1)
            ][1],
        }
    )

    # 2b. repeated disclosure: q sends of each prompt, a vote per character ------
    results.repeat = repeat_section(config, docs, doc_words, doc_zipfs, bigram)
    results.timings["repeat_s"] = results.repeat.get("seconds", 0.0)

    # 3. preview calibration (fit on the first part of the corpus, check on the rest)
    n_cal = max(1, int(len(docs) * config.calibration_fraction))
    train = [
        WordOutcome(r.epsilon, r.length, r.zipf, r.restored) for r in main_records if r.doc < n_cal
    ]
    held = [
        WordOutcome(r.epsilon, r.length, r.zipf, r.restored) for r in main_records if r.doc >= n_cal
    ]
    model = fit(train, config.epsilons, restorer=bigram.name)
    results.calibration_check = check(model, held)
    results.calibration_check["fit_documents"] = n_cal
    full_model = fit(
        [WordOutcome(r.epsilon, r.length, r.zipf, r.restored) for r in main_records],
        config.epsilons,
        restorer=bigram.name,
    )
    (out / "preview_calibration.json").write_text(
        json.dumps(full_model.to_dict()), encoding="utf-8"
    )
    if write_calibration is not None:
        write_calibration.write_text(json.dumps(full_model.to_dict()), encoding="utf-8")
        _log(f"wrote the preview calibration to {write_calibration}")

    # 4. models -----------------------------------------------------------------
    from companion.models import embedder_path, load_causal_lm, load_embedder

    t0 = time.perf_counter()
    embedder = load_embedder(device="cpu")
    lm = load_causal_lm(device="cpu")
    results.models = {
        "restorer and summariser": model_identity(lm.source),
        "embedder": model_identity(embedder_path(), name="all-MiniLM-L6-v2"),
    }
    llm = LocalLLMRestorer(lm, name="SmolLM2-135M-Instruct")
    results.timings["model_load_s"] = time.perf_counter() - t0

    def embed(texts: Sequence[str]) -> Any:
        return np.asarray(
            embedder.encode(
                list(texts), batch_size=32, normalize_embeddings=True, show_progress_bar=False
            )
        )

    # 5. baselines ---------------------------------------------------------------
    from evals.krr.baselines import MetricDPWords, PresidioMasker
    from evals.krr.restorers import load_unigrams

    t0 = time.perf_counter()
    masker = PresidioMasker()
    masked = []
    detected_spans = []
    for d in docs:
        text, spans = masker.mask(d.text)
        masked.append(text)
        detected_spans.append(spans)
    results.timings["presidio_s"] = time.perf_counter() - t0
    vocabulary = [
        w
        for w, _ in sorted(load_unigrams().items(), key=lambda kv: (-kv[1], kv[0]))[
            : config.metric_dp_vocabulary
        ]
    ]
    t0 = time.perf_counter()
    _log(f"presidio: masked {len(docs)} documents")
    mdp = MetricDPWords(embedder, vocabulary)
    _log(f"metric DP: embedded a {len(vocabulary)}-word vocabulary")
    mdp_texts = {
        e: mdp.perturb_texts([d.text for d in docs], e, seed=config.seed * 1000 + int(e))
        for e in config.metric_dp_epsilons
    }
    results.timings["metric_dp_s"] = time.perf_counter() - t0

    # 6. similarity of the text sent/restored to the original -----------------------
    t0 = time.perf_counter()
    _log("metric DP: perturbed the corpus at every epsilon")
    # MiniLM on 2 shared cores is the bottleneck: embed an evenly spaced subset.
    sim_docs = list(range(0, len(docs), max(1, len(docs) // config.similarity_documents)))[
        : config.similarity_documents
    ]
    original_vecs = embed([docs[i].text for i in sim_docs])

    def similarity(texts: Sequence[str]) -> float:
        vecs = embed([texts[i] for i in sim_docs])
        return float(np.mean(np.sum(vecs * original_vecs, axis=1)))

    for eps in config.epsilons:
        results.similarity.append(
            {
                "method": "k-RR perturbed (unrestored)",
                "epsilon": eps,
                "similarity": similarity(noisy_texts[eps]),
            }
        )
        for name, pass_no in ((bigram.name, 1), (bigram.name, 2)):
            results.similarity.append(
                {
                    "method": f"k-RR + {name}" + (" (2nd pass)" if pass_no == 2 else ""),
                    "epsilon": eps,
                    "similarity": similarity(restored_texts[(name, eps, pass_no)]),
                }
            )
    masked_similarity = similarity(masked)
    mdp_similarity = {e: similarity(t) for e, t in mdp_texts.items()}
    results.timings["similarity_s"] = time.perf_counter() - t0
    results.corpus["similarity_documents"] = len(sim_docs)

    # 7. baselines' leaks and utility, next to k-RR's ------------------------------
    def leak_and_keep(per_doc_flags: Sequence[Sequence[bool]]) -> tuple[float, float]:
        sens = keep = n_s = n_k = 0
        for ws, flags in zip(doc_words, per_doc_flags, strict=True):
            for w, f in zip(ws, flags, strict=True):
                if w.sensitive:
                    n_s += 1
                    sens += f
                else:
                    n_k += 1
                    keep += f
        return sens / n_s, keep / n_k

    presidio_flags = [
        [not any(s < w.end and w.start < e for s, e, _ in spans) for w in ws]
        for ws, spans in zip(doc_words, detected_spans, strict=True)
    ]
    leak, keep = leak_and_keep(presidio_flags)
    results.baselines.append(
        {
            "method": "Presidio masking (spaCy sm + recognizers)",
            "parameter": "-",
            "pii_leaked": leak,
            "nonsensitive_kept": keep,
            "similarity": masked_similarity,
        }
    )
    for e, texts in mdp_texts.items():
        leak, keep = leak_and_keep(_lenient_flags(doc_words, texts))
        results.baselines.append(
            {
                "method": "word metric DP (MiniLM, NN decoding)",
                "parameter": f"eps={e:g} per word",
                "pii_leaked": leak,
                "nonsensitive_kept": keep,
                "similarity": mdp_similarity[e],
            }
        )
    for eps in config.epsilons:
        texts = restored_texts[(bigram.name, eps, 1)]
        leak, keep = leak_and_keep(_lenient_flags(doc_words, texts))
        sim = next(
            s["similarity"]
            for s in results.similarity
            if s["epsilon"] == eps and s["method"] == f"k-RR + {bigram.name}"
        )
        results.baselines.append(
            {
                "method": f"k-RR + {bigram.name}",
                "parameter": f"eps={eps:g} per char",
                "pii_leaked": leak,
                "nonsensitive_kept": keep,
                "similarity": sim,
            }
        )
    _log("similarity and baselines done")

    # 8. the local LLM as restorer (bounded subset) ---------------------------------
    t0 = time.perf_counter()
    llm_docs = list(range(0, len(docs), max(1, len(docs) // max(1, config.llm_documents))))[
        : config.llm_documents
    ]
    llm_eps = [e for e in LLM_EPSILONS if e in config.epsilons] if not config.smoke else [6.0]
    for eps in llm_eps:
        per: dict[str, list[WordRecord]] = {
            "SmolLM2 pass 1": [],
            "SmolLM2 pass 2": [],
            bigram.name: [],
        }
        for i in llm_docs:
            ws = doc_words[i][: config.llm_snippet_words]
            zs = doc_zipfs[i][: config.llm_snippet_words]
            snippet_end = ws[-1].end
            original = docs[i].text[:snippet_end]
            snippet = noisy_texts[eps][i][:snippet_end]
            llm_first = _clean_llm(llm.restore([snippet], eps)[0])
            per["SmolLM2 pass 1"].extend(_records(i, ws, eps, snippet, llm_first, zs))
            if eps == 6.0:
                llm_second = _clean_llm(llm.restore([llm_first], eps)[0])
                per["SmolLM2 pass 2"].extend(_records(i, ws, eps, snippet, llm_second, zs))
            offline = bigram.restore_one(snippet, eps)
            per[bigram.name].extend(_records(i, ws, eps, snippet, offline, zs))
            if eps == 6.0 and i == llm_docs[0]:
                results.examples.append(
                    {
                        "epsilon": "6 (SmolLM2 restorer)",
                        "original": original,
                        "perturbed": snippet,
                        "restored": llm_first,
                    }
                )
        for name, recs in per.items():
            if recs:
                for row in _summarise(recs, eps, name, 2 if "pass 2" in name else 1):
                    results.llm.append(row)
    results.timings["llm_restoration_s"] = time.perf_counter() - t0
    _log("LLM restoration done")

    # 9. downstream task: a summary by the local model --------------------------------
    t0 = time.perf_counter()
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    sum_docs = llm_docs[: config.summary_documents]
    sum_eps = [e for e in SUMMARY_EPSILONS if e in config.epsilons] if not config.smoke else [6.0]
    mid_mdp = config.metric_dp_epsilons[len(config.metric_dp_epsilons) // 2]
    variants: dict[str, list[str]] = {}
    for eps in sum_eps:
        variants[f"k-RR eps={eps:g} + {bigram.name}"] = restored_texts[(bigram.name, eps, 1)]
    variants["k-RR eps=6, unrestored"] = noisy_texts.get(6.0, noisy_texts[config.epsilons[-1]])
    variants["Presidio masking"] = masked
    variants[f"metric DP eps={mid_mdp:g}"] = mdp_texts[mid_mdp]

    def summarize(text: str) -> str:
        messages = [{"role": "user", "content": f"{SUMMARY_PROMPT}\n\n{text}"}]
        return llm.generate(
            messages, config.summary_tokens * 4, max_new_tokens=config.summary_tokens
        )

    reference = {i: summarize(docs[i].text) for i in sum_docs}
    ref_vecs = embed([reference[i] for i in sum_docs])
    for name, texts in variants.items():
        outs = [summarize(texts[i]) for i in sum_docs]
        _log(f"summaries: {name}")
        vecs = embed(outs)
        results.summaries.append(
            {
                "input": name,
                "documents": len(sum_docs),
                "summary_similarity": float(np.mean(np.sum(vecs * ref_vecs, axis=1))),
                "rougeL_f": statistics.fmean(
                    scorer.score(reference[i], o)["rougeL"].fmeasure
                    for i, o in zip(sum_docs, outs, strict=True)
                ),
            }
        )
    results.timings["summaries_s"] = time.perf_counter() - t0
    results.timings["total_s"] = time.perf_counter() - t_start
    _log(f"done in {results.timings['total_s']:.0f} s")
    return results


def _lenient_flags(doc_words: Sequence[Sequence[Word]], texts: Sequence[str]) -> list[list[bool]]:
    return [
        restored_flags([w.text for w in ws], text, strict=False)
        for ws, text in zip(doc_words, texts, strict=True)
    ]


def _clean_llm(text: str) -> str:
    """Drop an echoed "Text:" label the small model sometimes writes first."""
    return re.sub(r"^\s*(restored\s+)?text\s*:\s*", "", text, flags=re.IGNORECASE).strip()
