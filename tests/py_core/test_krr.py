"""k-RR: probabilities, statistics of the output, invariants and validation."""

import math
import random
from decimal import Decimal, localcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from py_core import krr
from py_core.errors import InvalidParameterError, VeilError


@pytest.mark.parametrize(
    ("epsilon", "k", "expected"),
    [
        (0.0, 94, 1 / 94),
        (math.log(93), 94, 0.5),
        (math.log(9), 4, 0.75),
        (1.0, 2, math.e / (math.e + 1)),
    ],
)
def test_keep_probability_formula(epsilon: float, k: int, expected: float) -> None:
    """keep_probability is e^eps / (e^eps + k - 1)."""
    assert krr.keep_probability(epsilon, k) == pytest.approx(expected, rel=1e-12)


def test_keep_probability_large_epsilon_does_not_overflow() -> None:
    """A huge epsilon gives p -> 1 without OverflowError."""
    assert krr.keep_probability(1e6) == 1.0


def test_word_survival_is_p_to_the_length() -> None:
    """Pr[T0] = p^L."""
    p = krr.keep_probability(4.0)
    assert krr.word_survival_probability(6, 4.0) == pytest.approx(p**6)
    assert krr.word_survival_probability(0, 4.0) == 1.0
    with pytest.raises(InvalidParameterError, match="-1"):
        krr.word_survival_probability(-1, 4.0)


@pytest.mark.parametrize(
    "bad", [-0.5, float("nan"), float("inf"), -float("inf"), "2", None, True, [1]]
)
def test_invalid_epsilon_is_a_value_error_naming_the_value(bad: object) -> None:
    """Anything but a finite number >= 0 raises a ValueError subclass naming it."""
    with pytest.raises(ValueError, match="epsilon") as info:
        krr.perturb("abc", bad)  # type: ignore[arg-type]
    assert isinstance(info.value, VeilError)
    assert repr(bad) in str(info.value)


def test_epsilon_for_keep_probability_inverts() -> None:
    """epsilon_for_keep_probability is the inverse of keep_probability."""
    for eps in (0.0, 0.3, 2.0, 7.5):
        assert krr.epsilon_for_keep_probability(krr.keep_probability(eps)) == pytest.approx(
            eps, abs=1e-9
        )
    with pytest.raises(InvalidParameterError):
        krr.epsilon_for_keep_probability(1.0)


@pytest.mark.parametrize("epsilon", [0.0, 1.0, 3.0, 6.0])
def test_replacements_are_uniform_over_the_other_93(epsilon: float) -> None:
    """Replacements of 'e' are uniform over the other 93 characters (chi-square, p > 1e-6)."""
    rng = random.Random(int(epsilon * 10) + 5)
    out = krr.perturb("e" * 120_000, epsilon, rng=rng)
    counts = {c: 0 for c in krr.ALPHABET if c != "e"}
    for ch in out:
        if ch != "e":
            counts[ch] += 1
    total = sum(counts.values())
    expected = total / 93
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    # 92 degrees of freedom: the 1e-6 upper quantile is about 160.
    assert chi2 < 160, chi2


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 5.0, 8.0])
def test_keep_rate_matches_implemented_probability(epsilon: float) -> None:
    """The share of kept characters is within 4 standard errors of the implemented p."""
    rng = random.Random(99)
    n = 100_000
    text = (krr.ALPHABET * (n // krr.K + 1))[:n]
    out = krr.perturb(text, epsilon, rng=rng)
    kept = sum(a == b for a, b in zip(text, out, strict=True))
    p = krr.implementation(epsilon).keep_probability
    assert abs(kept / n - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_out_of_alphabet_characters_become_uniform() -> None:
    """é, 한, emoji and controls are replaced uniformly over all 94 characters."""
    rng = random.Random(5)
    out = krr.perturb("é한😀\x07" * 25_000, 8.0, rng=rng)
    counts = {c: 0 for c in krr.ALPHABET}
    for ch in out:
        counts[ch] += 1  # KeyError if anything outside the alphabet came out
    expected = len(out) / 94
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 162, chi2  # 93 degrees of freedom, 1e-6 quantile


def test_default_rng_is_system_random(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an rng, perturb draws from random.SystemRandom (a CSPRNG)."""
    calls = []
    original = random.SystemRandom.randbytes

    def spy(self: random.SystemRandom, n: int) -> bytes:
        calls.append(n)
        return original(self, n)

    monkeypatch.setattr(random.SystemRandom, "randbytes", spy)
    krr.perturb("hello", 1.0)
    assert calls


def test_seeded_rng_is_reproducible() -> None:
    """The same seed gives the same output (experiments only)."""
    text = "Reproducible experiments need seeds."
    assert krr.perturb(text, 2.0, rng=random.Random(1)) == krr.perturb(
        text, 2.0, rng=random.Random(1)
    )


def test_requests_above_the_ceiling_report_the_implemented_epsilon() -> None:
    """Above ~11.09 the mechanism runs at its ceiling and says so."""
    assert krr.implemented_epsilon(40.0) == krr.MAX_IMPLEMENTED_EPSILON < 11.1
    assert krr.implemented_epsilon(3.0) <= 3.0


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(max_size=300),
    epsilon=st.floats(min_value=0, max_value=12),
    seed=st.integers(0, 2**32),
)
def test_invariants(text: str, epsilon: float, seed: int) -> None:
    """Same length, ASCII whitespace kept in place, everything else inside the alphabet."""
    out = krr.perturb(text, epsilon, rng=random.Random(seed))
    assert len(out) == len(text)
    for original, sent in zip(text, out, strict=True):
        if original in krr.WHITESPACE:
            assert sent == original
        else:
            assert sent in krr.ALPHABET


@settings(max_examples=100, deadline=None)
@given(epsilon=st.floats(min_value=0, max_value=30))
def test_implemented_epsilon_never_exceeds_request(epsilon: float) -> None:
    """Quantisation only ever adds privacy: ln(a/b) <= requested, and the report covers ln(a/b).

    ln(a/b) exactly (50 digits): ``math.log(a / b)`` itself can be above it (by 8e-17 at 0.0625).
    """
    impl = krr.implementation(epsilon)
    assert _exact_log_ratio(impl.keep_weight, impl.other_weight) <= Decimal(impl.epsilon)
    assert impl.epsilon <= max(epsilon, 0.0) + 1e-12
    assert impl.total <= 65536 and impl.keep_weight >= impl.other_weight >= 1


# Implemented weights where the former ``_round_up(log(a / b))`` (two ulps up) fell below
# the exact ln(a/b) -- the division's rounding is an absolute error on the logarithm: by
# 9.0e-17 at k = 94 (a request of 0.033), 1.07e-16 (hangul-initial, 0.003), 9.6e-17
# (hangul-final, 0.019), 1.0e-16 (k = 2, 0.022); 311 of 44,800 (request, k) pairs.
_ROUNDED_BELOW = [(719, 696, 94), (3458, 3448, 19), (2382, 2338, 28), (33127, 32407, 2)]


def _exact_log_ratio(a: int, b: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 50
        return (Decimal(a) / Decimal(b)).ln()


@pytest.mark.parametrize("k", [2, 17, 19, 21, 28, 51, 69, 94, 98])
def test_reported_epsilon_is_never_below_the_exact_log_ratio(k: int) -> None:
    """Every implemented epsilon (a grid of requests) covers the exact ln(a/b), by <= 8 ulps."""
    for i in range(0, 11_200, 7):
        impl = krr.implementation(i / 1000, k)
        exact = _exact_log_ratio(impl.keep_weight, impl.other_weight)
        reported = Decimal(impl.epsilon)
        assert reported >= exact, (i / 1000, k, impl)
        assert reported - exact <= 8 * Decimal(math.ulp(impl.epsilon)), (i / 1000, k, impl)
    ceiling = krr.max_implemented_epsilon(k)
    assert Decimal(ceiling) >= _exact_log_ratio(65536 - (k - 1), 1)


@pytest.mark.parametrize(("a", "b", "k"), _ROUNDED_BELOW)
def test_former_rounding_fell_below_on_these_pairs(a: int, b: int, k: int) -> None:
    """The regression pairs: two ulps above log(a / b) was below ln(a/b); the report is not."""
    impl = krr.Implementation(requested=0.0, keep_weight=a, other_weight=b, k=k)
    former = math.nextafter(math.nextafter(math.log(a / b), math.inf), math.inf)
    exact = _exact_log_ratio(a, b)
    assert Decimal(former) < exact
    assert Decimal(impl.epsilon) >= exact
