"""Checks of py_core.wordfreq and py_core.preview that need only the standard library.

They run under pytest in CPython (tests/py_core/test_preview.py) and inside
Pyodide under Node (tests/pyodide/test_pyodide_core.py collects every
``*_checks.py``), so the data files are read the way the extension reads them.
"""

from __future__ import annotations

from py_core import krr
from py_core.errors import InvalidParameterError, StateError
from py_core.preview import (
    LIKELY_HIDDEN,
    LIKELY_RESTORED,
    THRESHOLD,
    PreviewModel,
    default_model,
    preview,
)
from py_core.wordfreq import normalize, table, zipf_frequency


def _raises(exc: type[BaseException], fn, *args, **kwargs) -> BaseException:
    try:
        fn(*args, **kwargs)
    except exc as caught:
        return caught
    raise AssertionError(f"{fn.__name__}{args} did not raise {exc.__name__}")


def check_wordfreq_table_loads_and_is_ordered() -> None:
    freq = table()
    assert 40_000 <= len(freq) <= 60_000, len(freq)
    assert freq["the"] > 7.0 > freq["hospital"] > 3.0, (freq["the"], freq["hospital"])
    assert all(word == word.lower() and word.isascii() for word in list(freq)[:1000])


def check_wordfreq_normalizes_case_and_punctuation() -> None:
    assert normalize('"Patient,') == "patient"
    assert zipf_frequency("The,") == zipf_frequency("the")
    assert zipf_frequency("Xqzvwkj") is None
    assert zipf_frequency("...") is None
    assert zipf_frequency("555-0199") is None
    _raises(InvalidParameterError, zipf_frequency, 12)


def check_shipped_calibration_is_valid_and_monotone_in_epsilon() -> None:
    model = default_model()
    assert list(model.epsilons) == sorted(model.epsilons) and len(model.epsilons) >= 4
    for lower, higher in zip(model.rates, model.rates[1:], strict=False):
        for row_low, row_high in zip(lower, higher, strict=True):
            assert all(a <= b for a, b in zip(row_low, row_high, strict=True))


def check_preview_words_and_spans() -> None:
    text = "Please call  Dr. Xqzvwkj\nat 555-0199 tomorrow."
    words = preview(text, 6.0)
    assert [w.text for w in words] == text.split()
    for w in words:
        assert text[w.start : w.end] == w.text
        assert 0.0 <= w.survival_probability <= w.probability <= 1.0
        assert w.label == (LIKELY_RESTORED if w.probability >= THRESHOLD else LIKELY_HIDDEN)
    assert preview("", 6.0) == []


def check_preview_common_words_restored_rare_hidden() -> None:
    words = {w.text: w for w in preview("the patient Xqzvwkj 4417-2291-7720", 6.0)}
    assert words["the"].label == LIKELY_RESTORED, words["the"]
    assert words["patient"].label == LIKELY_RESTORED, words["patient"]
    assert words["Xqzvwkj"].label == LIKELY_HIDDEN, words["Xqzvwkj"]
    assert words["4417-2291-7720"].label == LIKELY_HIDDEN
    # A rare word's forecast is its survival probability p^L, up to the fitted margin.
    rare = words["Xqzvwkj"]
    assert rare.probability < rare.survival_probability + 0.15, rare


def check_preview_survival_probability_matches_krr() -> None:
    for eps in (2.0, 4.5, 6.0, 9.0):
        (word,) = preview("hospital", eps)
        expected = krr.implementation(eps).keep_probability ** len("hospital")
        assert abs(word.survival_probability - expected) < 1e-12


def check_preview_monotone_in_epsilon() -> None:
    text = "We discussed the plan with Marie Gladu at 12 Rue Nationale on 4/3/2024."
    previous = [0.0] * len(text.split())
    for eps in (1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 5.5, 6.0, 7.0, 8.0, 10.0):
        current = [w.probability for w in preview(text, eps)]
        assert all(b >= a - 1e-12 for a, b in zip(previous, current, strict=True)), (
            eps,
            previous,
            current,
        )
        previous = current


def check_preview_rejects_bad_input() -> None:
    _raises(InvalidParameterError, preview, "text", -1.0)
    _raises(InvalidParameterError, preview, "text", float("nan"))
    _raises(InvalidParameterError, preview, b"bytes", 6.0)


def check_calibration_validation() -> None:
    good = default_model().to_dict()
    assert PreviewModel.from_dict(good) == default_model()
    broken = dict(good, rates=good["rates"][:-1])
    _raises(StateError, PreviewModel.from_dict, broken)
    _raises(StateError, PreviewModel.from_dict, {"epsilons": [1.0]})
    out_of_range = dict(good)
    out_of_range["rates"] = [[[1.5] * good["max_length"] for _ in t] for t in good["rates"]]
    _raises(StateError, PreviewModel.from_dict, out_of_range)
    unsorted = dict(good, epsilons=list(reversed(good["epsilons"])))
    _raises(StateError, PreviewModel.from_dict, unsorted)
