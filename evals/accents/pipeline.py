"""Send each language's corpus in the three alphabet modes, restore, measure."""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evals.accents.config import MODES, Config
from evals.accents.corpus import build
from py_core import accents, alphabets
from py_core.sanitize import sanitize_prompt

__all__ = ["Results", "run_evaluation", "slot_epsilon"]


@dataclass
class Results:
    config: dict[str, Any]
    corpus: dict[str, Any] = field(default_factory=dict)
    restoration: list[dict[str, Any]] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)
    examples: list[dict[str, str]] = field(default_factory=list)
    restorers: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        values = dict(data)
        values["notes"] = []  # recomputed from the numbers
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def slot_epsilon(mode: str, letter_epsilon: float) -> float:
    """ε per slot that gives ``letter_epsilon`` per Latin letter (scripts: base + mark slot)."""
    return letter_epsilon / 2 if mode == alphabets.SCRIPTS else letter_epsilon


def _log(message: str) -> None:
    print(f"[accents {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _restorer(language: str, config: Config) -> Any:
    import wordfreq

    from evals.accents.restorer import LatinRestorer

    freq = wordfreq.get_frequency_dict(language, "large")
    top = sorted(freq, key=lambda w: -freq[w])[: config.restorer_words * 2]
    return LatinRestorer(
        language, {w: math.log10(freq[w] * 1e9) for w in top}, words=config.restorer_words
    )


def _rate(rows: list[tuple[bool, ...]], i: int) -> float:
    return sum(r[i] for r in rows) / len(rows) if rows else math.nan


def _measure(language: str, docs: Any, config: Config, restorer: Any, results: Results) -> None:
    for mode in MODES:
        for letter_eps in config.letter_epsilons:
            eps = slot_epsilon(mode, letter_eps)
            started = time.perf_counter()
            groups: dict[str, list[tuple[Any, ...]]] = {"common": [], "sensitive": []}
            epsilons: list[float] = []
            for index, doc in enumerate(docs):
                rng = random.Random(f"{config.seed}/perturb/{language}/{mode}/{letter_eps}/{index}")
                sent = sanitize_prompt(
                    doc.text,
                    eps,
                    header=None,
                    rng=rng,
                    secure=False,
                    compose=False,
                    alphabets_mode=mode,
                )
                tokens = sent.perturbed.split(" ")
                receipt = sent.receipt
                assert len(tokens) == len(doc.words) == len(receipt.words), (language, index)
                restored_tokens = []
                for word, token, survival in zip(doc.words, tokens, receipt.words, strict=True):
                    restored = restorer.restore(token, eps, mode, receipt.latin_marks)
                    restored_tokens.append(restored)
                    exact = restored == word.text
                    same_fold = accents.fold(restored)[0] == accents.fold(word.text)[0]
                    group = "sensitive" if word.sensitive else "common"
                    groups[group].append(
                        (exact, same_fold, survival.survival_probability, word.category)
                    )
                    if any(not c.isascii() for c in word.text):
                        epsilons.append(survival.epsilon / max(1, survival.length))
                if index == 0 and letter_eps == 6.0:
                    results.examples.append(
                        {
                            "language": language,
                            "mode": mode,
                            "original": doc.text[:200],
                            "sent": sent.perturbed[:200],
                            "restored": " ".join(restored_tokens)[:200],
                        }
                    )
            for group, rows in groups.items():
                results.restoration.append(
                    {
                        "language": language,
                        "mode": mode,
                        "letter_epsilon": letter_eps,
                        "slot_epsilon": eps,
                        "group": group,
                        "n_words": len(rows),
                        "restored": _rate(rows, 0),
                        "restored_folded": _rate(rows, 1),
                        "pr_t0": _rate(rows, 2),
                        "epsilon_per_accented_letter": (
                            sum(epsilons) / len(epsilons) if epsilons else math.nan
                        ),
                    }
                )
                if group == "sensitive":
                    for category in sorted({r[3] for r in rows if r[3]}):
                        sub = [r for r in rows if r[3] == category]
                        results.restoration.append(
                            {
                                "language": language,
                                "mode": mode,
                                "letter_epsilon": letter_eps,
                                "slot_epsilon": eps,
                                "group": f"sensitive: {category}",
                                "n_words": len(sub),
                                "restored": _rate(sub, 0),
                                "restored_folded": _rate(sub, 1),
                                "pr_t0": _rate(sub, 2),
                                "epsilon_per_accented_letter": math.nan,
                            }
                        )
            results.timings[f"{language} {mode} ε/letter={letter_eps:g}"] = (
                time.perf_counter() - started
            )
            _log(f"{language} {mode} ε/letter={letter_eps:g} ({eps:g}/slot) restored")


def choose_defaults(rows: list[dict[str, Any]], languages: Any, epsilons: Any) -> dict[str, Any]:
    """Per language: the mode that restores most common words (read as the person meant them:
    accents aside) summed over the ε per letter measured; ties go to the earlier mode."""
    out: dict[str, Any] = {}
    for language in languages:
        score = {}
        for mode in MODES:
            values = [
                r["restored_folded"]
                for r in rows
                if r["language"] == language
                and r["mode"] == mode
                and r["group"] == "common"
                and r["letter_epsilon"] in epsilons
            ]
            score[mode] = sum(values) if values else -1.0
        best = max(MODES, key=lambda m: score[m])
        out[language] = {"mode": best, "score": score}
    return out


def run_evaluation(config: Config, out: Path) -> Results:
    from evals.common import environment, write_results

    results = Results(config=asdict(config), environment=environment())
    for language in config.languages:
        corpus = build(
            language,
            config.common_words,
            seed=config.seed,
            document_words=config.document_words,
            pii_per_document=config.pii_per_document,
            smoke_fallback=config.smoke,
        )
        words = [w for d in corpus.documents for w in d.words]
        results.corpus[language] = {
            "documents": len(corpus.documents),
            "words": len(words),
            "sensitive": sum(w.sensitive for w in words),
            "accented_words": sum(not w.text.isascii() for w in words),
            "catalogs": len(corpus.catalogs),
            "catalog_names": list(corpus.catalogs),
            "sentences_available": corpus.sentences_available,
            "sentences_sha256": corpus.sha256,
        }
        started = time.perf_counter()
        restorer = _restorer(language, config)
        results.restorers[language] = restorer.name
        results.timings[f"{language} restorer build"] = time.perf_counter() - started
        _measure(language, corpus.documents, config, restorer, results)
    results.defaults = choose_defaults(
        results.restoration, config.languages, config.letter_epsilons
    )
    write_results(out, results.to_dict())
    return results
