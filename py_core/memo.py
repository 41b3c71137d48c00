r"""Sanitize once, for words: a word already released is sent again as the same draw.

k-RR draws fresh noise on every send, so a word a person types into many prompts
(their name, an employer, an invoice number) is released many times, and a vote
per character over the releases undoes the noise: at ε = 5 per character, nine
sends of "Lovelace" gave it back exactly 96.7% of the time, against 2.4% from one
send.  The **word memo** keeps, for every word Veil has released, the perturbed
form it was released as; sending the word again sends that form again, which is
post-processing of one release and reveals nothing new.  RootGuard does the same
for numbers.

What is memoised.  A *unit*: a maximal run of letters and digits, or a maximal
run of other characters (:data:`UNIT`: ``[^\W_]+|[\W_]+``), inside a word
(a run of characters that are not ASCII whitespace, :data:`py_core.krr.WORD`)
outside the spans another mechanism already protected (RootGuard's values).
So "Lovelace", "Lovelace," and "(Lovelace)" all send the same draw of
"Lovelace" -- a memo of whole words would release its letters three times, and a
vote over the three would undo the noise.  Forms that differ in their letters
are still different releases, each counted in the ledger: "LOVELACE" and
"Lovelace", or a Korean name with different particles attached ("김민준씨는",
"김민준이"), which only a morphological analysis could cut apart.  **Every** unit
is memoised, common words included (see ``docs/methods/krr.md``, "Repeating
yourself: sanitize once"): exempting common words would keep a fresh draw of
"the" on every send, so the preview could never show the draw that is sent, and
the lifetime ledger would grow without bound for words that carry nothing
private.

What a draw depends on.  A memo entry is one *variant* of a word per
:class:`Setting`: the alphabet mode, whether the prompt's Latin mark slot was on
(it changes the mechanism of every Latin letter) and the ε requested per slot.
A word sent at another setting is a new release and is drawn afresh -- it is
counted in the lifetime ledger as such; the memo never mixes mechanisms.

What the memo reveals.  The same garbled word appearing in two prompts tells the
site that the same word was typed twice (linkability); it never tells more about
the word than one release does.  A reset (an explicit, logged choice of the
person) forgets the draws: the next send of each word is a new release.

This module is pure data and checks; the service worker keeps the entries in
``chrome.storage.local``.  :class:`WordMemo` is what
:func:`py_core.sanitize.sanitize_prompt` reads and extends: the variants it was
given (for the words of one prompt) and, in :attr:`WordMemo.added`, the new
releases the caller must store, and in :attr:`WordMemo.used`, the stored ones it
reused (so the caller can note which sites have now seen them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from py_core import alphabets, krr
from py_core.accounting import DEFAULT_DELTA, KRREvent, KrrPldAccountant
from py_core.errors import InvalidParameterError, StateError

__all__ = [
    "LEDGER_FORMAT",
    "TEXT_UNIT",
    "UNIT",
    "Setting",
    "WordMemo",
    "account_send",
    "ledger_add",
    "ledger_summary",
    "variant_key",
]

#: What is memoised, inside a word: a run of letters and digits, or a run of anything else
#: (the extension's worker looks units up with the same rule in JavaScript).
UNIT = re.compile(r"[^\W_]+|[\W_]+")
#: The units of a whole text in one pass: :data:`UNIT` inside :data:`py_core.krr.WORD`
#: (a run of non-letters stops at the six ASCII whitespace characters).
TEXT_UNIT = re.compile(r"[^\W_]+|(?:[^\w \t\n\r\x0b\x0c]|_)+")

#: The format tag of a lifetime ledger's counts (:func:`ledger_add`).
LEDGER_FORMAT = "veil.word_ledger"


@dataclass(frozen=True, slots=True)
class Setting:
    """What a word's draw depends on: alphabet mode, the Latin mark slot, ε per slot."""

    alphabets: str
    latin_marks: bool
    epsilon: float
    key: str = field(init=False, repr=False, compare=False)  # variant_key, computed once

    def __post_init__(self) -> None:
        alphabets.validate_mode(self.alphabets)
        if not isinstance(self.latin_marks, bool):
            raise InvalidParameterError(
                f"latin_marks must be true or false; got {self.latin_marks!r}"
            )
        object.__setattr__(self, "epsilon", krr.validate_epsilon(self.epsilon))
        object.__setattr__(self, "key", variant_key(self.alphabets, self.latin_marks, self.epsilon))


def variant_key(alphabets_mode: str, latin_marks: bool, epsilon: float) -> str:
    """The text key of one setting (ε written exactly: repr of the float)."""
    return f"{alphabets_mode}|{int(bool(latin_marks))}|{float(epsilon)!r}"


def _check_variant(word: str, raw: object) -> dict[str, Any]:
    """One stored variant, checked: a corrupted memo must never be sent from."""
    where = f"the word memo's entry for a {len(word)}-character word"
    if not isinstance(raw, Mapping):
        raise StateError(f"{where} is not an object; reset the word memo in Veil's options")
    try:
        setting = Setting(raw["alphabets"], raw["marks"], raw["epsilon"])
        sent, slots = raw["sent"], raw["slots"]
    except (KeyError, TypeError, InvalidParameterError) as exc:
        raise StateError(
            f"{where} is corrupted ({exc}); reset the word memo in Veil's options"
        ) from exc
    if not isinstance(sent, str) or len(sent) != len(word) or krr.WORD.fullmatch(sent) is None:
        raise StateError(
            f"{where} holds a form that is not a {len(word)}-character word; "
            "reset the word memo in Veil's options"
        )
    if not isinstance(slots, Mapping) or not all(
        name in alphabets.ALPHABETS and isinstance(n, int) and not isinstance(n, bool) and n > 0
        for name, n in slots.items()
    ):
        raise StateError(
            f"{where} has corrupted slot counts; reset the word memo in Veil's options"
        )
    return {
        **raw,
        "alphabets": setting.alphabets,
        "marks": setting.latin_marks,
        "epsilon": setting.epsilon,
    }


class WordMemo:
    """The released forms of some words, and what one sanitization added to them.

    ``variants`` maps a word to the list of its stored variants (JSON objects with
    ``alphabets``, ``marks``, ``epsilon``, ``sent``, ``slots``; other fields, such
    as the sites that saw it, are kept as they are).  Only the words of the
    prompt at hand need to be given; a word not given is drawn afresh, so the
    caller must give every stored variant of the prompt's words (the extension
    checks :attr:`added` against its store and retries with any it missed).
    """

    def __init__(self, variants: Mapping[str, Iterable[object]] | None = None) -> None:
        if variants is not None and not isinstance(variants, Mapping):
            raise InvalidParameterError(
                f"the word memo must map words to lists of variants; got {type(variants).__name__}"
            )
        self._by_key: dict[tuple[str, str], dict[str, Any]] = {}
        for word, items in (variants or {}).items():
            if not isinstance(word, str) or krr.WORD.fullmatch(word) is None:
                raise StateError(
                    f"the word memo holds a key that is not one word ({word!r:.40}); "
                    "reset the word memo in Veil's options"
                )
            if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
                raise StateError(
                    "the word memo's variants must be lists; reset it in Veil's options"
                )
            for raw in items:
                variant = _check_variant(word, raw)
                key = (
                    word,
                    variant_key(variant["alphabets"], variant["marks"], variant["epsilon"]),
                )
                if key in self._by_key and self._by_key[key]["sent"] != variant["sent"]:
                    raise StateError(
                        "the word memo holds two different draws of one word at one setting; "
                        "reset the word memo in Veil's options"
                    )
                self._by_key[key] = variant
        self._sent = {key: str(v["sent"]) for key, v in self._by_key.items()}
        self._settled: set[tuple[str, str]] = set()  # added here, or reported in used
        #: New releases made by the sanitization: ``{"word", "variant"}`` each.
        self.added: list[dict[str, Any]] = []
        #: Stored variants reused: ``{"word", "variant"}`` each (once per word and setting).
        self.used: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, word: str, setting: Setting) -> str | None:
        """The form ``word`` was released as at ``setting``, or None if never."""
        key = (word, setting.key)
        sent = self._sent.get(key)
        if sent is not None and key not in self._settled:
            self._settled.add(key)  # first use of a stored variant in this sanitization
            self.used.append({"word": word, "variant": _public(self._by_key[key])})
        return sent

    def add(self, word: str, setting: Setting, sent: str, slots: Mapping[str, int]) -> None:
        """Record the fresh release ``sent`` of ``word`` (its slot counts for the ledger)."""
        key = (word, setting.key)
        if key in self._by_key:
            raise StateError(
                f"a word was drawn twice at one setting ({setting.key}); this is a bug"
            )
        variant = {
            "alphabets": setting.alphabets,
            "marks": setting.latin_marks,
            "epsilon": setting.epsilon,
            "sent": sent,
            "slots": dict(slots),
        }
        self._by_key[key] = variant
        self._sent[key] = sent
        self._settled.add(key)
        self.added.append({"word": word, "variant": variant})


def _public(variant: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in variant.items() if not k.startswith("_")}


# ------------------------------------------------------------------ lifetime ledger


def _empty_ledger() -> dict[str, Any]:
    return {"format": LEDGER_FORMAT, "version": 1, "words": 0, "chars": 0, "releases": {}}


def _check_ledger(raw: object) -> dict[str, Any]:
    if raw is None:
        return _empty_ledger()
    try:
        assert isinstance(raw, Mapping) and raw["format"] == LEDGER_FORMAT and raw["version"] == 1
        words, chars, releases = raw["words"], raw["chars"], raw["releases"]
        assert all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (words, chars)
        )
        assert isinstance(releases, Mapping)
        for key, n in releases.items():
            slot, eps = key.split("|")
            assert slot in alphabets.ALPHABETS and math.isfinite(float(eps)) and float(eps) >= 0
            assert isinstance(n, int) and not isinstance(n, bool) and n >= 0
    except (AssertionError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StateError(
            f"the lifetime ledger is corrupted or from another version ({exc!r:.80}); "
            "it is never reset silently: restore it from an export"
        ) from exc
    return {**raw, "releases": dict(releases)}


def ledger_add(ledger: object, releases: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``ledger`` (or a new one) with the word releases ``{"word", "variant"}`` added."""
    out = _check_ledger(ledger)
    counts: dict[str, int] = out["releases"]
    for release in releases:
        word, variant = release["word"], _check_variant(release["word"], release["variant"])
        out["words"] += 1
        out["chars"] += len(word)
        for slot, n in variant["slots"].items():
            key = f"{slot}|{variant['epsilon']!r}"
            counts[key] = counts.get(key, 0) + n
    return out


def ledger_summary(ledger: object, delta: float = DEFAULT_DELTA) -> dict[str, Any]:
    """What a ledger's releases spent: words, characters, ε by basic and tight composition.

    Neighbouring relation: two histories that differ in any or all of the
    characters of these distinct words (each k-RR slot is ε-LDP for any change of
    its symbol).  The tight bound is :class:`py_core.accounting.KrrPldAccountant`
    over one k-RR event per (slot alphabet, ε).
    """
    checked = _check_ledger(ledger)
    accountant = KrrPldAccountant()
    basic = 0.0
    for key, n in checked["releases"].items():
        if not n:
            continue
        slot, eps = key.split("|")
        impl = alphabets.slot_implementations(float(eps))[slot]
        accountant.compose(KRREvent(impl.epsilon, n, impl.k))
        basic += n * impl.epsilon
    return {
        "words": checked["words"],
        "chars": checked["chars"],
        "slots": sum(checked["releases"].values()),
        "epsilon_basic": basic,
        "epsilon_composed": accountant.get_epsilon(delta),
        "delta": delta,
        "relation": "histories differing in any characters of these distinct words",
    }


def account_send(
    memo: WordMemo, site: str, total_ledger: object, site_ledger: object
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The ledgers after ``memo``'s prompt was sent to ``site``, and the releases it made.

    A variant counts in the total ledger when it is first sent to any site, and in
    a site's ledger when it is first sent to that site; stored variants carry the
    ``sites`` that have seen them (a draw only shown in a preview has none).
    Returns ``(total, site_ledger, seen)``: ``seen`` lists every variant of this
    prompt as ``{"word", "alphabets", "marks", "epsilon", "first"}`` (``first``: sent to
    no site before).
    """
    if not isinstance(site, str) or not site:
        raise InvalidParameterError(f"site must be a non-empty string; got {site!r}")
    to_total, to_site, seen = [], [], []
    for release in [*memo.added, *memo.used]:
        variant = release["variant"]
        sites = variant.get("sites") or []
        if not isinstance(sites, list):
            raise StateError("a word memo entry's sites must be a list; reset the word memo")
        first = not sites
        if first:
            to_total.append(release)
        if site not in sites:
            to_site.append(release)
        seen.append(
            {
                "word": release["word"],
                "alphabets": variant["alphabets"],
                "marks": variant["marks"],
                "epsilon": variant["epsilon"],
                "first": first,
            }
        )
    return ledger_add(total_ledger, to_total), ledger_add(site_ledger, to_site), seen
