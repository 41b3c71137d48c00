"""Repeated disclosure: q sends of one prompt, a vote per character, then the restorer.

A person who sends the same prompt q times (a re-send of a prompt that "did not
work", or their own name in many prompts) gives a site q perturbed copies.  The
adversary here sees all q copies of each prompt, takes a **plurality vote per
character** (k-RR keeps every character's position, so the copies are aligned;
ties are broken at random with a seeded generator -- this generator is the
attacker's, it protects nobody) and runs the offline noisy-channel restorer of
:mod:`evals.krr.restorers` on the voted text.

Two ways of sending:

* **fresh** -- every send is a new draw (``sanitize_prompt`` without a memo):
  the noise averages out and the vote converges to the original;
* **memo** -- the q sends go through one :class:`py_core.memo.WordMemo` store the
  way the extension does (after each send the caller stores ``memo.added``), so
  every word already released is sent again as its stored draw: the q copies are
  identical, the vote is one send, and recovery must not grow with q.

Three adversaries are measured on the same votes: the vote alone (the voted
word must equal the original), the vote + restorer told the per-send ε (the
brief's attack), and the vote + restorer told the ε of the *voted* channel (the
adversary knows q: the keep probability of a plurality of q k-RR draws,
simulated with the mechanism itself, turned back into an ε for k = 94).

Recovery is exact (the word at its position equals the original), per word,
reported for the corpus's gold labels (sensitive = overlaps a gold PII span,
i2b2 categories; "rare sensitive" = sensitive and not in the word-frequency
table: rare names, IDs, numbers, e-mails) with a standard error clustered by
document (a document's words share its sends).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from evals.krr.corpus import Document, Word
from evals.krr.metrics import restored_flags
from py_core import krr
from py_core.errors import InvalidParameterError
from py_core.memo import WordMemo
from py_core.sanitize import sanitize_prompt

__all__ = [
    "ADVERSARIES",
    "GROUPS",
    "SITE",
    "cluster_rate",
    "repeat_section",
    "repeated_sends",
    "run_repeat",
    "vote",
    "voted_keep_probability",
]

#: The site name the evaluation's memo store records its sends under.
SITE = "eval.invalid"

#: Adversary name -> what it does with the voted text.
ADVERSARIES = {
    "vote": "the per-character plurality vote alone",
    "vote + restorer": "the vote, then the noisy-channel restorer told the per-send ε",
    "vote + restorer (voted ε)": (
        "the vote, then the restorer told the ε of the voted channel (the adversary knows q)"
    ),
}

#: Word group -> membership test, over the corpus's gold labels and the frequency table.
GROUPS: dict[str, Callable[[Word, float | None], bool]] = {
    "sensitive": lambda w, z: w.sensitive,
    "rare sensitive (not in table)": lambda w, z: w.sensitive and z is None,
    "non-sensitive": lambda w, z: not w.sensitive,
}


def _rng(seed: int, *parts: object) -> random.Random:
    # str seeds are hashed with SHA-512 by random.Random: stable across runs and platforms.
    return random.Random("/".join(str(p) for p in (seed, *parts)))


def vote(copies: Sequence[str], rng: random.Random) -> str:
    """The per-character plurality of ``copies`` (equal lengths); ties drawn with ``rng``."""
    if not copies:
        raise InvalidParameterError("vote needs at least one copy")
    length = len(copies[0])
    if any(len(c) != length for c in copies):
        raise InvalidParameterError(
            "the copies to vote over must have equal lengths (k-RR keeps every character's "
            f"position); got lengths {sorted({len(c) for c in copies})}"
        )
    if len(copies) == 1 or all(c == copies[0] for c in copies):
        return copies[0]
    out = []
    for column in zip(*copies, strict=True):
        first = column[0]
        if column.count(first) == len(column):
            out.append(first)
            continue
        counts = Counter(column)
        top = max(counts.values())
        tied = sorted(ch for ch, n in counts.items() if n == top)
        out.append(tied[0] if len(tied) == 1 else rng.choice(tied))
    return "".join(out)


def repeated_sends(
    text: str,
    epsilon: float,
    q: int,
    *,
    memo: bool,
    seed: int,
    tag: object = "",
    alphabets_mode: str = "scripts",
) -> list[str]:
    """The perturbed texts of ``q`` sends of ``text`` (seeded; evaluation only).

    ``memo=False``: each send is a fresh ``sanitize_prompt`` draw.  ``memo=True``:
    the sends share one store; after each send its ``memo.added`` is stored (with
    the site that saw it), as the extension does, and the next send reads it.
    Send j draws from the same seeded generator either way, so the first send is
    the same draw in both, except that with the memo a word repeated within the
    prompt is sent as its first occurrence's draw.
    """
    if isinstance(q, bool) or not isinstance(q, int) or q < 1:
        raise InvalidParameterError(f"the number of sends must be a positive integer; got {q!r}")
    store: dict[str, list[dict[str, Any]]] = {}
    out = []
    for j in range(q):
        m = WordMemo(store) if memo else None
        sent = sanitize_prompt(
            text,
            epsilon,
            header=None,
            rng=_rng(seed, "send", tag, epsilon, j),
            secure=False,
            compose=False,
            alphabets_mode=alphabets_mode,
            memo=m,
        )
        if m is not None:
            for release in m.added:
                store.setdefault(release["word"], []).append(
                    {**release["variant"], "sites": [SITE]}
                )
        out.append(sent.perturbed)
    return out


def voted_keep_probability(
    epsilon: float,
    sends: Sequence[int],
    *,
    trials: int = 20_000,
    seed: int = 0,
    alphabets_mode: str = "scripts",
) -> dict[int, float]:
    """Pr[the plurality of q fresh k-RR draws of a letter is the letter], simulated, per q.

    What an adversary who knows the mechanism and q can compute without any data:
    ``trials`` independent letters, each sent ``max(sends)`` times through
    ``sanitize_prompt``; the vote over the first q sends, for each q.
    """
    text = "a" * trials
    copies = repeated_sends(
        text, epsilon, max(sends), memo=False, seed=seed, tag="keep", alphabets_mode=alphabets_mode
    )
    return {
        q: vote(copies[:q], _rng(seed, "keep-vote", epsilon, q)).count("a") / trials
        for q in sorted(set(sends))
    }


def _epsilon_for(p_keep: float) -> float:
    """The k-RR ε (k = 94) whose keep probability is ``p_keep``, within the implementable range."""
    top = krr.max_implemented_epsilon()
    if p_keep >= krr.keep_probability(top):
        return top
    p = max(p_keep, 1.0 / krr.K + 1e-9)
    return min(top, max(0.01, krr.epsilon_for_keep_probability(p)))


def cluster_rate(hits: Sequence[int], counts: Sequence[int]) -> tuple[float, float]:
    """(rate, standard error) of ``sum(hits) / sum(counts)``, clustered by unit (document).

    The linearised (ratio-estimator) standard error with the small-sample factor
    ``D / (D - 1)``; 0 for fewer than two units with words.
    """
    total = sum(counts)
    if total == 0:
        return (math.nan, math.nan)
    rate = sum(hits) / total
    units = [(h, n) for h, n in zip(hits, counts, strict=True) if n]
    d = len(units)
    if d < 2:
        return (rate, 0.0)
    spread = sum((h - rate * n) ** 2 for h, n in units)
    return (rate, math.sqrt(d / (d - 1) * spread) / total)


def _log(message: str) -> None:
    print(f"[krr repeat {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_repeat(
    docs: Sequence[Document],
    doc_words: Sequence[Sequence[Word]],
    doc_zipfs: Sequence[Sequence[float | None]],
    restorer: Any,
    *,
    epsilons: Sequence[float],
    sends: Sequence[int],
    seed: int,
    alphabets_mode: str = "scripts",
    keep_trials: int = 20_000,
    word_trials: int = 1_000,
    word: str = "Lovelace",
) -> dict[str, Any]:
    """The repeated-disclosure attack on ``docs``; returns the ``repeat`` part of results.json."""
    qs = sorted(set(sends))
    if not qs or qs[0] != 1:
        raise InvalidParameterError(f"the sends must include q = 1 (the baseline); got {sends!r}")
    q_max = qs[-1]
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    voted_channel: list[dict[str, Any]] = []
    restored_cache: dict[tuple[str, float], str] = {}

    def restore(text: str, eps: float) -> str:
        key = (text, eps)  # the restorer is deterministic: identical votes, one decoding
        if key not in restored_cache:
            restored_cache[key] = restorer.restore_one(text, eps)
        return restored_cache[key]

    for eps in epsilons:
        restored_cache.clear()
        p_votes = voted_keep_probability(
            eps, qs, trials=keep_trials, seed=seed, alphabets_mode=alphabets_mode
        )
        # The ε the restorer is told after a vote over q copies (not all identical).
        eps_by_q = {q: eps if q == 1 else _epsilon_for(p) for q, p in p_votes.items()}
        for q, p_vote in p_votes.items():
            voted_channel.append(
                {
                    "epsilon": eps,
                    "q": q,
                    "keep_probability_one_send": krr.implementation(eps).keep_probability,
                    "keep_probability_voted": p_vote,
                    "epsilon_voted": eps_by_q[q],
                }
            )
        for memo in (False, True):
            # per (adversary, q, group): hits and word counts per document
            hits: dict[tuple[str, int, str], list[int]] = {}
            counts: dict[str, list[int]] = {g: [] for g in GROUPS}
            identical = 0
            for i, doc in enumerate(docs):
                words = doc_words[i]
                originals = [w.text for w in words]
                members = {
                    g: [test(w, z) for w, z in zip(words, doc_zipfs[i], strict=True)]
                    for g, test in GROUPS.items()
                }
                for g in GROUPS:
                    counts[g].append(sum(members[g]))
                copies = repeated_sends(
                    doc.text,
                    eps,
                    q_max,
                    memo=memo,
                    seed=seed,
                    tag=doc.doc_id,
                    alphabets_mode=alphabets_mode,
                )
                identical += all(c == copies[0] for c in copies)
                for q in qs:
                    voted = vote(copies[:q], _rng(seed, "vote", eps, doc.doc_id, memo, q))
                    # Identical copies are one draw, and the adversary sees that they are.
                    told = eps if len(set(copies[:q])) == 1 else eps_by_q[q]
                    outputs = {
                        "vote": voted,
                        "vote + restorer": restore(voted, eps),
                        "vote + restorer (voted ε)": restore(voted, told),
                    }
                    for adversary, text in outputs.items():
                        flags = restored_flags(originals, text)
                        for g, member in members.items():
                            hits.setdefault((adversary, q, g), []).append(
                                sum(f for f, m in zip(flags, member, strict=True) if m)
                            )
            for (adversary, q, g), h in hits.items():
                rate, se = cluster_rate(h, counts[g])
                base = hits[(adversary, 1, g)]
                diff = [a - b for a, b in zip(h, base, strict=True)]
                _, paired_se = cluster_rate(diff, counts[g])  # SE of the paired difference
                rows.append(
                    {
                        "memo": memo,
                        "epsilon": eps,
                        "q": q,
                        "adversary": adversary,
                        "group": g,
                        "n_words": sum(counts[g]),
                        "documents": len(docs),
                        "recovered": rate,
                        "se": se,
                        "minus_q1": rate - sum(base) / sum(counts[g]) if sum(counts[g]) else 0.0,
                        "paired_se": paired_se,
                    }
                )
            _log(
                f"eps={eps:g} {'memo' if memo else 'fresh'}: {len(docs)} documents x {q_max} sends"
                f" ({identical} with all copies identical)"
            )
            rows.append(
                {
                    "memo": memo,
                    "epsilon": eps,
                    "q": q_max,
                    "adversary": "-",
                    "group": "documents with identical copies",
                    "n_words": identical,
                    "documents": len(docs),
                    "recovered": identical / len(docs),
                    "se": 0.0,
                    "minus_q1": 0.0,
                    "paired_se": 0.0,
                }
            )
    single = _single_word(word, word_trials, qs, seed, alphabets_mode)
    return {
        "alphabets": alphabets_mode,
        "sends": qs,
        "epsilons": list(epsilons),
        "documents": len(docs),
        "seed": seed,
        "adversaries": ADVERSARIES,
        "rows": rows,
        "voted_channel": voted_channel,
        "single_word": single,
        "seconds": time.perf_counter() - t_start,
    }


def _single_word(
    word: str, trials: int, qs: Sequence[int], seed: int, alphabets_mode: str
) -> list[dict[str, Any]]:
    """The issue's check: ``word`` alone at ε = 5, exact recovery by the vote over q sends."""
    out = []
    eps = 5.0
    for memo in (False, True):
        wins = dict.fromkeys(qs, 0)
        for t in range(trials):
            copies = repeated_sends(
                word,
                eps,
                qs[-1],
                memo=memo,
                seed=seed,
                tag=f"word-{t}",
                alphabets_mode=alphabets_mode,
            )
            for q in qs:
                wins[q] += vote(copies[:q], _rng(seed, "word-vote", t, memo, q)) == word
        for q in qs:
            p = wins[q] / trials
            out.append(
                {
                    "word": word,
                    "epsilon": eps,
                    "memo": memo,
                    "q": q,
                    "trials": trials,
                    "recovered": p,
                    "se": math.sqrt(p * (1 - p) / trials),
                }
            )
    return out


def repeat_section(
    config: Any,
    docs: Sequence[Document],
    doc_words: Sequence[Sequence[Word]],
    doc_zipfs: Sequence[Sequence[float | None]],
    restorer: Any,
) -> dict[str, Any]:
    """:func:`run_repeat` as ``config`` (:class:`evals.krr.config.Config`) sizes it."""
    n = min(config.repeat_documents, len(docs))
    if n < 1 or not config.repeat_epsilons:
        return {}
    _log(f"{n} documents, eps {list(config.repeat_epsilons)}, q {list(config.repeat_sends)}")
    return run_repeat(
        docs[:n],
        doc_words[:n],
        doc_zipfs[:n],
        restorer,
        epsilons=config.repeat_epsilons,
        sends=config.repeat_sends,
        seed=config.seed,
        alphabets_mode=config.repeat_alphabets,
        keep_trials=config.repeat_keep_trials,
        word_trials=config.repeat_word_trials,
    )
