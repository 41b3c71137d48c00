"""Checks of the "fold" alphabet mode (accents into ASCII, other scripts per script).

Standard library only: they run under pytest in CPython
(tests/py_core/test_fold_checks.py) and inside Pyodide under Node
(tests/pyodide/test_pyodide_core.py collects every ``*_checks.py``).  They pin what
py_core.accents promises: folding is one character for one, touches only Latin
letters, and the epsilon of the mode is exactly one ASCII slot per Latin letter --
from above (the channel's largest ratio a/b never exceeds the receipt's e^eps) and
from below (the receipt is not looser than the implemented ln(a/b), and the
simulated channel keeps and replaces at a/M and b/M).
"""

from __future__ import annotations

import math
import random
import unicodedata

from py_core import accents, alphabets, krr
from py_core.memo import WordMemo
from py_core.sanitize import sanitize_prompt, word_survival
from py_core.script_tables import _DECOMPOSE

EPSILONS = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 11.0)


def _within(observed: int, n: int, p: float, what: str) -> None:
    se = math.sqrt(p * (1 - p) / n)
    assert abs(observed / n - p) < 4.5 * se, (what, observed / n, p, se)


def _send(text: str, eps: float, seed: int = 1, **kw: object):  # type: ignore[no-untyped-def]
    return sanitize_prompt(
        text, eps, header=None, alphabets_mode="fold", rng=random.Random(seed), secure=False, **kw
    )


def check_fold_is_one_for_one_and_only_latin() -> None:
    """Every BMP code point folds to one code point; only Latin letters change, to ASCII."""
    bmp = "".join(chr(c) for c in range(65536) if not 0xD800 <= c < 0xE000)
    folded, count = accents.fold(bmp)
    assert len(folded) == len(bmp)
    changed = [(a, b) for a, b in zip(bmp, folded, strict=True) if a != b]
    assert count == len(changed) == len(accents.fold_table())
    for a, b in changed:
        assert b.isascii() and b.isalpha(), (a, b)
        assert "LATIN" in unicodedata.name(a, ""), a
    # Every accented letter of the mark slot folds to its own base letter.
    for char, (base, _) in _DECOMPOSE.items():
        assert accents.fold_char(char) == krr.ALPHABET[base], char
    for char in "한Ёйάΐ中😀\u00a0\u0131ﬁ":
        expect = "i" if char == "\u0131" else char
        assert accents.fold(char)[0] == expect, char
    assert accents.fold("Straße, Øre, Ễ, œuvre")[0] == "Strase, Ore, E, ouvre"


def check_fold_leaves_no_accented_latin_letter() -> None:
    text = "".join(_DECOMPOSE) + " Việt Nam"
    folded, _ = accents.fold(text)
    assert not alphabets.has_latin_marks(folded)
    receipt = _send(text, 4.0).receipt
    assert not receipt.latin_marks and receipt.unsupported_chars == 0
    assert receipt.accents_folded == len(_DECOMPOSE) + 1  # and ệ (two marks)
    assert {s.script for s in receipt.scripts} == {"ascii"}


def check_e_and_e_acute_are_one_input() -> None:
    """é and e give the same output for the same randomness: ratio 1, indistinguishable."""
    for eps in EPSILONS:
        a = _send("Hélène a écrit à l'école", eps, seed=7)
        b = _send("Helene a ecrit a l'ecole", eps, seed=7)
        assert a.perturbed == b.perturbed, eps
        ra, rb = a.receipt, b.receipt
        assert ra.epsilon_total_basic == rb.epsilon_total_basic
        assert [w.survival_probability for w in ra.words] == [
            w.survival_probability for w in rb.words
        ]


def check_fold_epsilon_from_both_sides() -> None:
    """Receipt per Latin letter = the ASCII slot's implemented epsilon, exactly bounding a/b."""
    for eps in EPSILONS:
        impl = krr.implementation(eps)
        a, b = impl.keep_weight, impl.other_weight
        receipt = _send("café crème", eps).receipt
        # From above: the largest output ratio of one letter is a/b <= e^receipt <= e^request.
        assert math.log(a / b) <= receipt.epsilon_per_char <= eps + 1e-12, eps
        # From below: one slot, not two (the mark slot is never on), and not looser than ln(a/b).
        assert receipt.epsilon_per_char - math.log(a / b) < 1e-12, eps
        assert receipt.epsilon_per_char == impl.epsilon
        assert math.isclose(receipt.epsilon_total_basic, 9 * impl.epsilon, rel_tol=1e-12)
        assert receipt.keep_probability == impl.keep_probability
        slots = {s.alphabet: s.used for s in receipt.slots}
        assert slots == {"ascii": 9}, slots
        for word in receipt.words:
            assert word.epsilon == word.length * impl.epsilon
        composed = receipt.epsilon_total_composed
        assert composed is not None and composed <= receipt.epsilon_total_basic + 1e-9


def check_fold_channel_simulated() -> None:
    """é is kept as e with a/M and becomes each other ASCII character with b/M (4.5 sd)."""
    eps, n = 3.0, 30_000
    impl = krr.implementation(eps)
    rng = random.Random(11)
    out = [
        sanitize_prompt(
            "é", eps, header=None, alphabets_mode="fold", rng=rng, secure=False, compose=False
        ).perturbed
        for _ in range(n)
    ]
    _within(out.count("e"), n, impl.keep_probability, "é kept as e")
    assert out.count("é") == 0
    _within(out.count("f"), n, impl.replace_probability, "é replaced by f")
    assert set(out) <= set(krr.ALPHABET)


def check_word_survival_is_the_folded_words() -> None:
    """Pr[T0] of an accented word is that of its folded form, simulated."""
    eps, n = 4.0, 4000
    p = krr.implementation(eps).keep_probability
    words = word_survival("café Straße", eps, "fold")
    assert [w.length for w in words] == [4, 6]
    assert math.isclose(words[0].survival_probability, p**4, rel_tol=1e-12)
    assert math.isclose(words[1].survival_probability, p**6, rel_tol=1e-12)
    rng = random.Random(5)
    hits = sum(
        sanitize_prompt(
            "café x", eps, header=None, alphabets_mode="fold", rng=rng, secure=False, compose=False
        ).perturbed.split()[0]
        == "cafe"
        for _ in range(n)
    )
    _within(hits, n, p**4, "cafe arrives intact")


def check_other_scripts_as_in_scripts_mode() -> None:
    """Without accented Latin letters, fold is exactly the scripts mechanism (same draws)."""
    for text in ("병원에서 검사를 받았다 12", "Привет, Άρης", "plain text only"):
        for eps in (2.0, 6.0):
            a = _send(text, eps, seed=3)
            b = sanitize_prompt(text, eps, header=None, rng=random.Random(3), secure=False)
            assert a.perturbed == b.perturbed, (text, eps)
            assert a.receipt.epsilon_total_basic == b.receipt.epsilon_total_basic
            assert a.receipt.scripts == b.receipt.scripts
            assert a.receipt.accents_folded == 0
    # With an accented letter, scripts mode turns the mark slot on for all ASCII; fold does not.
    mixed = "환자 café"
    folded = _send(mixed, 5.0).receipt
    scripts = sanitize_prompt(mixed, 5.0, header=None).receipt
    assert scripts.latin_marks and not folded.latin_marks
    assert folded.epsilon_total_basic < scripts.epsilon_total_basic


def check_protected_spans_are_sent_as_typed() -> None:
    text = "poids 81 kg, Hélène"
    sent = _send(text, 1.0, protected_spans=[(6, 8), (13, 19)])
    assert sent.perturbed[6:8] == "81" and sent.perturbed[13:19] == "Hélène"
    assert sent.receipt.accents_folded == 0 and sent.receipt.chars_protected == 8


def check_memo_keeps_the_persons_word() -> None:
    """The memo's key is the word as typed (the reply shows école); the draw is of ecole."""
    memo = WordMemo({})
    sent = _send("école école", 6.0, memo=memo)
    first, second = sent.perturbed.split(" ")
    assert first == second and first.isascii()
    assert [entry["word"] for entry in memo.added] == ["école"]
    variant = memo.added[0]["variant"]
    assert variant["alphabets"] == "fold" and variant["sent"] == first
    assert variant["slots"] == {"ascii": 5}
    again = _send("école", 6.0, seed=99, memo=WordMemo({"école": [variant]}))
    assert again.perturbed == first and again.receipt.words_reused == 1
