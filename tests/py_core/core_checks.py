"""Checks of py_core that need nothing but the standard library.

They run twice: under pytest in CPython (tests/py_core/test_core_checks.py) and
inside Pyodide under Node (tests/pyodide/run_checks.mjs, via checklib.run_all), so the browser
extension's Python is tested on the interpreter it really runs on.  Every
function named ``check_*`` is collected by both runners.
"""

from __future__ import annotations

import math
import random
from array import array

from py_core import krr
from py_core.accounting import (
    gaussian_rdp_epsilon,
    krr_composed_delta,
    krr_composed_epsilon,
)
from py_core.errors import InsecureRandomnessError, InvalidParameterError
from py_core.sanitize import sanitize_prompt


def check_alphabet() -> None:
    assert "".join(chr(c) for c in range(33, 127)) == krr.ALPHABET
    assert krr.K == 94 == len(set(krr.ALPHABET))


def check_keep_rate_within_4_standard_errors() -> None:
    rng = random.Random(20261130)
    n, eps = 60_000, 3.0
    out = krr.perturb("a" * n, eps, rng=rng)
    p = krr.implementation(eps).keep_probability
    kept = out.count("a")
    se = math.sqrt(p * (1 - p) / n)
    assert abs(kept / n - p) < 4 * se, (kept / n, p, se)


def check_length_and_whitespace_preserved() -> None:
    rng = random.Random(7)
    text = "Dr. Kim\tsaw\n\npatient é 한 😀 at 10:30\r\n  x\x00\x7f\xa0\u3000\x1c\x85"
    out = krr.perturb(text, 2.0, rng=rng)
    assert len(out) == len(text)
    for original, sent in zip(text, out, strict=True):
        if original in krr.WHITESPACE:
            assert sent == original
        else:
            assert sent in krr.ALPHABET, repr(sent)


def check_out_of_alphabet_never_passes_through() -> None:
    rng = random.Random(11)
    out = krr.perturb("é한😀\x00" * 500, 11.0, rng=rng)
    assert set(out) <= set(krr.ALPHABET)
    # Uniform over 94 characters: at 2,000 draws each appears ~21 times.
    assert len(set(out)) > 80


def check_exact_implemented_distribution() -> None:
    """Feeding every 16-bit draw once reproduces the claimed weights exactly."""
    impl = krr.implementation(4.0)

    class Enumerating:
        def __init__(self) -> None:
            self.first = array("H", range(65536)).tobytes()
            self.rest = random.Random(3)

        def randbytes(self, n: int) -> bytes:
            if self.first:
                chunk, self.first = self.first[:n], self.first[n:]
                return chunk
            return self.rest.randbytes(n)

    out = krr.perturb("a" * 65536, 4.0, rng=Enumerating())
    counts: dict[str, int] = {}
    for value, char in enumerate(out):
        if value < impl.total:  # accepted draws; the rest were redrawn at random
            counts[char] = counts.get(char, 0) + 1
    assert counts["a"] == impl.keep_weight
    others = {c: v for c, v in counts.items() if c != "a"}
    assert len(others) == 93 and set(others.values()) == {impl.other_weight}


def check_epsilon_bound_both_sides() -> None:
    for eps in (0.0, 0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 11.0):
        impl = krr.implementation(eps)
        ratio = impl.keep_weight / impl.other_weight
        assert ratio <= math.exp(impl.epsilon)  # satisfies the reported epsilon
        assert impl.epsilon <= eps + 1e-12  # never less private than requested
        if eps > 0:
            assert ratio > math.exp(impl.epsilon - 1e-9)  # and not a smaller one
            assert eps - impl.epsilon < 2e-3  # quantisation costs almost nothing


def check_invalid_epsilon_rejected() -> None:
    for bad in (-1.0, float("nan"), float("inf"), "1", None, True):
        try:
            krr.perturb("x", bad)  # type: ignore[arg-type]
        except InvalidParameterError as exc:
            assert isinstance(exc, ValueError) and repr(bad) in str(exc)
        else:
            raise AssertionError(f"epsilon {bad!r} accepted")


def check_sanitize_secure_mode_and_spans() -> None:
    try:
        sanitize_prompt("hello", 2.0, rng=random.Random(1))
    except InsecureRandomnessError:
        pass
    else:
        raise AssertionError("seeded RNG accepted in secure mode")
    text = "I am 52 years old"
    result = sanitize_prompt(text, 0.0, protected_spans=[(5, 7)], header=None)
    assert result.text[5:7] == "52" and len(result.text) == len(text)
    assert result.receipt.chars_perturbed == 11
    assert result.receipt.chars_protected == 2


def check_accounting_hand_values() -> None:
    # One k-RR step: delta(0) = p - q exactly; delta(eps) = 0.
    eps = 2.0
    p = krr.keep_probability(eps)
    q = (1 - p) / 93
    assert abs(krr_composed_delta(1, eps, 0.0) - (p - q)) < 1e-12
    assert krr_composed_delta(1, eps, eps) < 1e-12  # exactly 0 up to the float tail
    composed = krr_composed_epsilon(200, 1.0, 1e-6, k=95)
    assert 17.8 < composed < 18.0, composed  # dp-accounting PLD: ~17.9
    # Gaussian, sigma = 1, 100-fold, delta 1e-5: dp-accounting's RDP accountant gives 96.1163.
    assert abs(gaussian_rdp_epsilon([1.0] * 100, 1.0, 1e-5)[0] - 96.1163) < 1e-3
