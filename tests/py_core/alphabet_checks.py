"""Checks of k-RR per script (py_core.alphabets) that need only the standard library.

They run under pytest in CPython (tests/py_core/test_alphabet_checks.py) and
inside Pyodide under Node (tests/pyodide/test_pyodide_core.py collects every
``*_checks.py``): exact distributions and epsilon bounds per alphabet, scripts
kept, receipts' per-word survival against simulation.
"""

from __future__ import annotations

import math
import random
from array import array

from py_core import alphabets, krr
from py_core.alphabets import ALPHABETS, SCRIPT_SLOTS, keep_or_change, other_shift
from py_core.errors import InvalidParameterError
from py_core.sanitize import sanitize_prompt

EPSILONS = (0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 11.0)
ALL_DRAWS = array("H", range(65536)).tobytes()  # every 16-bit draw once (little-endian)
ALL_BYTES = bytes(range(256))


def _raises(exc: type[BaseException], fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except exc:
        return
    raise AssertionError(f"{fn.__name__} did not raise {exc.__name__}")


def _within(observed: int, n: int, p: float, what: str) -> None:
    se = math.sqrt(p * (1 - p) / n)
    assert abs(observed / n - p) < 4 * se, (what, observed / n, p, se)


def check_alphabet_sizes_and_symbols() -> None:
    sizes = {name: a.k for name, a in ALPHABETS.items()}
    assert sizes == {
        "ascii": 94,
        "latin-mark": 17,
        "hangul-initial": 19,
        "hangul-vowel": 21,
        "hangul-final": 28,
        "hangul-jamo": 51,
        "cyrillic": 98,
        "greek": 69,
    }, sizes
    assert "".join(ALPHABETS["ascii"].symbols) == krr.ALPHABET
    for name in ("cyrillic", "greek", "hangul-jamo"):
        for char in ALPHABETS[name].symbols:
            assert alphabets.script_of(char) == name, (name, char)
    assert alphabets.script_of("é") == "latin" and alphabets.script_of("ß") == "latin"
    assert alphabets.script_of("한") == "hangul" and alphabets.script_of("中") == "other"
    assert alphabets.script_of("😀") == "other" and alphabets.script_of("\u3000") == "other"


# The 23 code points str.isspace() accepts besides the six ASCII whitespace characters,
# by class: k-RR perturbs every one of them (only krr.WHITESPACE passes unchanged).
UNICODE_SPACES = {
    "ascii separators": "\x1c\x1d\x1e\x1f",
    "next line": "\x85",
    "no-break spaces": "\xa0\u202f",
    "ogham space": "\u1680",
    "en/em and other typographic spaces": "".join(chr(c) for c in range(0x2000, 0x200B)),
    "line and paragraph separators": "\u2028\u2029",
    "mathematical space": "\u205f",
    "ideographic space": "\u3000",
}


def check_only_ascii_whitespace_is_the_space_class() -> None:
    bmp = "".join(chr(c) for c in range(65536) if not 0xD800 <= c < 0xE000)
    classes = alphabets.classify(bmp)
    classified = {c for c, code in zip(bmp, classes, strict=True) if code == alphabets.SPACE}
    assert classified == set(krr.WHITESPACE), classified ^ set(krr.WHITESPACE)
    others = {c for c in bmp if c.isspace()} - set(krr.WHITESPACE)
    assert others == set("".join(UNICODE_SPACES.values())), others


def check_every_other_unicode_space_is_perturbed() -> None:
    """Per class, in both alphabet modes: the character never arrives as itself."""
    rng = random.Random(13)
    for name, chars in UNICODE_SPACES.items():
        text = (chars + "a") * 50
        for mode in alphabets.ALPHABET_MODES:
            perturb = krr.perturb if mode == alphabets.ASCII_ONLY else alphabets.perturb
            out = perturb(text, 11.0, rng=rng)
            assert len(out) == len(text)
            for original, sent in zip(text, out, strict=True):
                if original in chars:
                    assert sent in krr.ALPHABET, (name, mode, repr(original), repr(sent))
        assert [m.group() for m in krr.WORD.finditer("x" + chars + "y z")] == [
            "x" + chars + "y",
            "z",
        ], name


def check_exact_keep_or_change_per_alphabet() -> None:
    """Every 16-bit draw once: exactly a keeps, (k-1) b changes, the rest rejected."""
    for eps in EPSILONS:
        for alphabet in ALPHABETS.values():
            impl = krr.implementation(eps, alphabet.k)
            out = keep_or_change(ALL_DRAWS, impl)
            assert out.count(0) == impl.keep_weight, (alphabet.name, eps)
            assert out.count(1) == (alphabet.k - 1) * impl.other_weight, (alphabet.name, eps)
            assert out.count(255) == 65536 - impl.total, (alphabet.name, eps)


def check_split_keep_or_change_equals_the_16_bit_lookup() -> None:
    """Low bytes drawn only where needed: the same decision for every one of the 65536 draws."""
    from py_core.alphabets import _keep_tables, keep_or_change_split

    hi, lo = ALL_DRAWS[1::2], ALL_DRAWS[0::2]
    for eps in EPSILONS:
        for alphabet in ALPHABETS.values():
            impl = krr.implementation(eps, alphabet.k)
            hi_table, _ = _keep_tables(impl.keep_weight, (alphabet.k - 1) * impl.other_weight)
            needed = bytes(lo[i] for i in range(65536) if hi_table[hi[i]] == 2)
            asked: list[int] = []

            def low(m: int, needed: bytes = needed, asked: list[int] = asked) -> bytes:
                asked.append(m)
                return needed[:m]

            split = keep_or_change_split(hi, low, impl)
            assert split == keep_or_change(ALL_DRAWS, impl), (alphabet.name, eps)
            assert sum(asked) == len(needed) <= 512, (alphabet.name, eps)


def check_exact_other_shift_per_alphabet() -> None:
    """Every byte once: each shift 1..k-1 equally often, the rest rejected."""
    for alphabet in ALPHABETS.values():
        k = alphabet.k
        out = other_shift(ALL_BYTES, k)
        each = 256 // (k - 1)
        for shift in range(1, k):
            assert out.count(shift) == each, (alphabet.name, shift)
        assert out.count(255) == 256 - each * (k - 1), alphabet.name
        assert out.count(0) == 0


def check_epsilon_bound_both_sides_per_alphabet() -> None:
    """a/b <= e^eps_impl <= e^request; eps_impl within 2e-3 of the request below the ceiling."""
    for alphabet in ALPHABETS.values():
        ceiling = krr.max_implemented_epsilon(alphabet.k)
        assert ceiling > 11.0, (alphabet.name, ceiling)
        for eps in EPSILONS:
            impl = krr.implementation(eps, alphabet.k)
            a, b = impl.keep_weight, impl.other_weight
            assert impl.total <= 65536 and a >= b >= 1
            assert a / b <= math.exp(impl.epsilon), (alphabet.name, eps)
            assert math.log(a / b) <= eps, (alphabet.name, eps)
            # Tight: one more keep weight would exceed the request or the grid.
            assert math.log((a + 1) / b) > eps or impl.total + 1 > 65536, (alphabet.name, eps)
            assert eps - impl.epsilon < 2e-3, (alphabet.name, eps, impl.epsilon)
            assert impl.keep_probability == a / impl.total


def check_hangul_decomposition_of_every_syllable() -> None:
    text = "".join(chr(c) for c in range(0xAC00, 0xD7A4))
    units = alphabets._units(text)
    initial, vowel, final = alphabets._hangul_slots(units[1::2], units[0::2])
    for s in range(11172):
        assert (initial[s], vowel[s], final[s]) == (s // 588, (s // 28) % 21, s % 28), s


def check_every_script_stays_in_its_script() -> None:
    rng = random.Random(5)
    text = (
        "안녕하세요 김민준 ㄱㅏㅎ Привет Ёжик Ελληνικά Άρης café Straße Łódź "
        "中文 😀 x\x00 \u3000\u00a0end"
    )
    for eps in (0.5, 3.0):
        out = alphabets.perturb(text, eps, rng=rng)
        assert len(out) == len(text)
        for original, sent in zip(text, out, strict=True):
            script = alphabets.script_of(original)
            if script == "space":
                assert sent == original
            elif script == "other" or script in ("ascii", "latin"):
                assert alphabets.script_of(sent) in ("ascii", "latin"), (original, sent)
            else:
                assert alphabets.script_of(sent) == script, (original, sent)


def check_output_is_always_a_valid_hangul_syllable() -> None:
    rng = random.Random(9)
    text = "".join(chr(c) for c in range(0xAC00, 0xD7A4, 7)) * 3
    out = alphabets.perturb(text, 0.5, rng=rng)
    assert all(0xAC00 <= ord(c) <= 0xD7A3 for c in out)
    assert sum(a != b for a, b in zip(text, out, strict=True)) > len(text) // 2


def check_slot_keep_rates_within_4_standard_errors() -> None:
    """Each Hangul slot, a Cyrillic and a Greek letter, the mark slot: keep rate = a/M."""
    rng = random.Random(20261201)
    eps, n = 2.0, 30_000
    impls = alphabets.slot_implementations(eps)
    out = alphabets.perturb("한" * n, eps, rng=rng)  # 한 = (ㅎ, ㅏ, ㄴ)
    s0 = 0xD55C - 0xAC00
    slots = [
        ((ord(c) - 0xAC00) // 588, ((ord(c) - 0xAC00) // 28) % 21, (ord(c) - 0xAC00) % 28)
        for c in out
    ]
    want = (s0 // 588, (s0 // 28) % 21, s0 % 28)
    for i, name in enumerate(SCRIPT_SLOTS["hangul"]):
        kept = sum(1 for s in slots if s[i] == want[i])
        _within(kept, n, impls[name].keep_probability, name)
    for char, name in (("ж", "cyrillic"), ("λ", "greek"), ("ㅂ", "hangul-jamo")):
        out = alphabets.perturb(char * n, eps, rng=rng)
        _within(out.count(char), n, impls[name].keep_probability, name)
    for name, impl in impls.items():  # the slot sampler itself, every alphabet
        index = bytes([impl.k // 2]) * n
        out_index = alphabets._perturb_index(index, rng, impl)
        _within(out_index.count(impl.k // 2), n, impl.keep_probability, name)
        assert max(out_index) < impl.k


def check_replacements_are_uniform_over_the_others() -> None:
    """Cyrillic: a changed letter is uniform over the other 97 (chi-square, 4 sd)."""
    rng = random.Random(3)
    n, eps = 60_000, 0.5
    out = alphabets.perturb("ж" * n, eps, rng=rng)
    others = [c for c in out if c != "ж"]
    counts = {c: 0 for c in ALPHABETS["cyrillic"].symbols if c != "ж"}
    for c in others:
        counts[c] += 1
    expected = len(others) / 97
    chi2 = sum((v - expected) ** 2 / expected for v in counts.values())
    assert abs(chi2 - 96) < 4 * math.sqrt(2 * 96), chi2


def check_word_survival_matches_simulation_per_script() -> None:
    """The receipt's Pr[T0] of a word = the simulated share of exact arrivals (4 sd)."""
    rng = random.Random(77)
    eps, n = 4.0, 4000
    for word in ("병원에서", "Ёжик", "Άρης", "ㄱㅏ", "café", "Straße", "hospital", "中文"):
        prompt = word + " x"
        receipt = sanitize_prompt(prompt, eps, header=None, rng=rng, secure=False).receipt
        p = receipt.words[0].survival_probability
        latin = receipt.latin_marks
        hits = sum(
            alphabets.perturb(prompt, eps, rng=rng, latin_marks=latin).split()[0] == word
            for _ in range(n)
        )
        if p == 0.0:
            assert hits == 0, word
        else:
            _within(hits, n, p, word)


def check_unaccented_letter_keep_with_marks_on() -> None:
    """With the mark slot on, 'e' survives when the base is kept and no composing mark lands."""
    rng = random.Random(8)
    eps, n = 2.0, 40_000
    out = alphabets.perturb("e" * n, eps, rng=rng, latin_marks=True)
    p = alphabets.char_keep_probability("e", eps, True)
    _within(out.count("e"), n, p, "e with marks on")
    assert any(c in "éèêë" for c in out)
    # Off (no accented letter in the prompt): exactly the ASCII mechanism.
    a = alphabets.perturb("plain text", 3.0, rng=random.Random(1))
    b = krr.perturb("plain text", 3.0, rng=random.Random(1))
    assert a == b


def check_ascii_mode_is_the_original_mechanism() -> None:
    text = "안녕 café Привет"
    sent = sanitize_prompt(
        text, 5.0, header=None, alphabets_mode="ascii", rng=random.Random(2), secure=False
    )
    b = krr.perturb(text, 5.0, rng=random.Random(2))
    assert sent.text == b and set(b) - {" "} <= set(krr.ALPHABET)
    receipt = sanitize_prompt(text, 5.0, header=None, alphabets_mode="ascii").receipt
    assert receipt.alphabets == "ascii" and receipt.unsupported_chars == 9
    assert [w.survival_probability for w in receipt.words] == [0.0, 0.0, 0.0]
    _raises(InvalidParameterError, sanitize_prompt, text, 1.0, alphabets_mode="latin")


def check_receipt_states_each_script_and_slot() -> None:
    receipt = sanitize_prompt("한국 Ёж 12", 5.0, header=None).receipt
    by_script = {s.script: s for s in receipt.scripts}
    assert set(by_script) == {"hangul", "cyrillic", "ascii"}
    impls = alphabets.slot_implementations(5.0)
    hangul_eps = sum(impls[s].epsilon for s in SCRIPT_SLOTS["hangul"])
    assert by_script["hangul"].epsilon_per_char == hangul_eps
    assert by_script["hangul"].chars == 2 and by_script["cyrillic"].chars == 2
    basic = 2 * hangul_eps + 2 * impls["cyrillic"].epsilon + 2 * impls["ascii"].epsilon
    assert math.isclose(receipt.epsilon_total_basic, basic, rel_tol=1e-12)
    counts = {s.alphabet: s.used for s in receipt.slots}
    assert counts == {
        "hangul-initial": 2,
        "hangul-vowel": 2,
        "hangul-final": 2,
        "cyrillic": 2,
        "ascii": 2,
    }
    assert receipt.epsilon_total_composed is not None
    assert receipt.epsilon_total_composed <= receipt.epsilon_total_basic + 1e-9
    assert not receipt.latin_marks and receipt.unsupported_chars == 0


def check_protected_spans_untouched_with_scripts() -> None:
    text = "체중 81 kg, Hélène"
    out = sanitize_prompt(text, 1.0, header=None, protected_spans=[(3, 5)]).perturbed
    assert out[3:5] == "81" and len(out) == len(text)


def check_korean_and_french_frequency_tables() -> None:
    from py_core.wordfreq import table, zipf_frequency

    ko, fr = table("ko"), table("fr")
    assert 20_000 <= len(ko) <= 40_000 and 20_000 <= len(fr) <= 40_000
    assert zipf_frequency("병원", "ko") is not None
    assert zipf_frequency("병원에서", "ko") == zipf_frequency("병원", "ko")  # stem + particle
    assert zipf_frequency("김민준", "ko") is None
    assert zipf_frequency("L'hôpital,", "fr") == zipf_frequency("hôpital", "fr") is not None
    surname = zipf_frequency("Lefèvre", "fr")
    assert surname is None or surname < 4.0


def check_forecast_per_language_uses_each_words_survival() -> None:
    from py_core.preview import language_model, preview
    from py_core.sanitize import word_survival

    for text, lang in (
        ("환자 김민준 씨는 병원에서 검사를 받았습니다", "ko"),
        ("Le patient Jérôme est à l'hôpital depuis mardi", "fr"),
    ):
        words = preview(text, 6.0)
        receipt = word_survival(text, 6.0)
        assert [w.survival_probability for w in words] == [w.survival_probability for w in receipt]
        assert {w.language for w in words} == {lang}
        assert all(w.calibrated == (language_model(lang) is not None) for w in words)
        assert all(w.probability >= w.survival_probability for w in words)
    # Into ASCII, a Korean word never survives and nothing forecasts it restored.
    for w in preview("병원에서 검사", 11.0, alphabets="ascii"):
        assert w.survival_probability == 0.0


def check_header_language_is_detected_or_fixed() -> None:
    from py_core import protect
    from py_core.language import HEADERS, detect

    samples = {
        "ko": "환자는 어제부터 두통이 있습니다",
        "fr": "Le patient est à l'hôpital et il a de la fièvre",
        "de": "Der Patient ist seit gestern müde und hat Fieber",
        "es": "El paciente está en el hospital y tiene fiebre",
        "ru": HEADERS["ru"],
        "el": HEADERS["el"],
        "en": "The patient has had a headache since yesterday",
    }
    for lang, text in samples.items():
        assert detect(text) == lang, (lang, detect(text))
    out = protect.protect(samples["fr"], protect.SiteSettings(epsilon=3), compose=False)
    assert out.text.startswith(HEADERS["fr"])
    fixed = protect.SiteSettings(epsilon=3, header_language="es")
    assert protect.protect(samples["fr"], fixed, compose=False).text.startswith(HEADERS["es"])
    _raises(InvalidParameterError, protect.SiteSettings, header_language="xx")
    _raises(InvalidParameterError, protect.SiteSettings, alphabets="latin")


def check_receipt_says_what_stays_visible() -> None:
    scripts = sanitize_prompt("환자 café 中文", 5.0, header_language="ko").receipt.visible
    assert "which script each character is in (ascii, hangul)" in scripts
    assert "accented Latin letters" in scripts and "language of the header" in scripts
    assert "2 characters without an alphabet" in scripts
    ascii_only = sanitize_prompt("환자 café", 5.0, header=None, alphabets_mode="ascii").receipt
    assert "script" not in ascii_only.visible
    assert "3 characters outside printable ASCII" in ascii_only.visible
    english = sanitize_prompt("plain words", 5.0, header=None).receipt.visible
    assert "(ascii)" in english and "accented" not in english
