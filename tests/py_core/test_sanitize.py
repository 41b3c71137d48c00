"""sanitize_prompt: header, protected spans, secure mode and the receipt."""

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from py_core import alphabets, krr
from py_core.accounting import krr_composed_epsilon
from py_core.errors import InsecureRandomnessError, InvalidParameterError
from py_core.sanitize import DEFAULT_HEADER, check_secure_rng, sanitize_prompt


def test_default_header_is_prepended() -> None:
    """The text to send starts with the restoration instruction."""
    result = sanitize_prompt("hello there", 3.0)
    assert result.text.startswith(DEFAULT_HEADER)
    assert result.text[len(DEFAULT_HEADER) :] == result.perturbed
    assert result.receipt.header_included


@pytest.mark.parametrize("header", [None, "", "Fix typos, then answer:\n"])
def test_header_is_configurable(header: str | None) -> None:
    """header=None or '' sends only the perturbed text; a custom header is used verbatim."""
    result = sanitize_prompt("hello there", 3.0, header=header)
    assert result.text == (header or "") + result.perturbed


@pytest.mark.parametrize(
    "rng",
    [
        random.Random(1),
        random.Random(),
        type("Fake", (), {"randbytes": lambda self, n: b"\0" * n})(),
    ],
)
def test_secure_mode_refuses_reproducible_rngs(rng: object) -> None:
    """Secure mode (the default) refuses anything but a CSPRNG."""
    with pytest.raises(InsecureRandomnessError, match="CSPRNG"):
        sanitize_prompt("secret", 2.0, rng=rng)  # type: ignore[arg-type]


def test_secure_mode_accepts_system_random_and_declared_secure_sources() -> None:
    """SystemRandom and objects declaring veil_secure = True pass."""
    check_secure_rng(None)
    check_secure_rng(random.SystemRandom())

    class Crypto:
        veil_secure = True

        def randbytes(self, n: int) -> bytes:
            return random.SystemRandom().randbytes(n)

    sanitize_prompt("secret", 2.0, rng=Crypto())


def test_insecure_mode_allows_seeds_for_experiments() -> None:
    """secure=False allows a seeded RNG and is reproducible."""
    a = sanitize_prompt("reproduce me", 2.0, rng=random.Random(4), secure=False)
    b = sanitize_prompt("reproduce me", 2.0, rng=random.Random(4), secure=False)
    assert a.text == b.text


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_protected_spans_are_untouched(data: st.DataObject) -> None:
    """Characters inside protected spans arrive exactly; the rest keeps its length."""
    text = data.draw(st.text(min_size=1, max_size=120))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    spans = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]
    result = sanitize_prompt(
        text, 0.0, protected_spans=spans, header=None, rng=random.Random(0), secure=False
    )
    assert len(result.perturbed) == len(text)
    for start, end in spans:
        assert result.perturbed[start:end] == text[start:end]
    inside = {i for start, end in spans for i in range(start, end)}
    expected = sum(1 for i, c in enumerate(text) if i not in inside and c not in krr.WHITESPACE)
    assert result.receipt.chars_perturbed == expected


@pytest.mark.parametrize(
    ("spans", "message"),
    [
        ([(3, 2)], "outside"),
        ([(0, 99)], "outside"),
        ([(0, 3), (2, 5)], "overlap"),
        ([(1,)], "pair"),
        ([("a", 2)], "pair"),
    ],
)
def test_bad_spans_are_refused(spans: list, message: str) -> None:  # type: ignore[type-arg]
    """Inverted, out-of-range, overlapping or malformed spans raise a clear error."""
    with pytest.raises(InvalidParameterError, match=message):
        sanitize_prompt("hello world", 1.0, protected_spans=spans)


def test_receipt_figures() -> None:
    """The receipt's totals follow from n and the implemented epsilon; it serialises to JSON."""
    text = "Patient Jane Roe, born 1970, lives at 12 Elm St."
    receipt = sanitize_prompt(text, 4.0).receipt
    n = sum(c not in krr.WHITESPACE for c in text)
    eps = krr.implemented_epsilon(4.0)
    assert receipt.chars_perturbed == n
    assert receipt.epsilon_per_char == eps <= 4.0
    assert receipt.epsilon_total_basic == pytest.approx(n * eps)
    assert receipt.epsilon_total_composed == pytest.approx(krr_composed_epsilon(n, eps, 1e-6))
    assert receipt.epsilon_total_composed < receipt.epsilon_total_basic
    words = receipt.words
    assert [text[w.start : w.end] for w in words] == text.split()
    for w in words:
        assert w.survival_probability == pytest.approx(receipt.keep_probability**w.length)
        assert w.epsilon == pytest.approx(w.length * eps)
    json.dumps(receipt.to_dict())


def test_marks_on_receipt_states_what_an_ascii_character_costs() -> None:
    """With the Latin mark slot on, every ASCII character costs its two slots (~10 at 5)."""
    receipt = sanitize_prompt("Le café est prêt, merci", 5.0, header=None).receipt
    assert receipt.latin_marks
    impls = alphabets.slot_implementations(5.0)
    both = impls["ascii"].epsilon + impls["latin-mark"].epsilon
    assert both > 9.99
    assert receipt.epsilon_per_char == both
    (ascii_row,) = [s for s in receipt.scripts if s.script == "ascii"]
    assert ascii_row.epsilon_per_char == receipt.epsilon_per_char
    assert (
        receipt.keep_probability
        == ascii_row.keep_probability
        == pytest.approx(impls["ascii"].keep_probability * impls["latin-mark"].keep_probability)
    )
    # Without an accented letter the mark slot is off: one slot, as before.
    plain = sanitize_prompt("Le cafe est pret, merci", 5.0, header=None).receipt
    assert not plain.latin_marks and plain.epsilon_per_char == krr.implemented_epsilon(5.0)


def test_compose_false_skips_the_tight_bound() -> None:
    """compose=False leaves the composed bound out (None) but keeps the basic one."""
    receipt = sanitize_prompt("abc def", 1.0, compose=False).receipt
    assert receipt.epsilon_total_composed is None and receipt.epsilon_total_basic > 0


def test_non_string_input_is_refused() -> None:
    """A non-str prompt raises a ValueError subclass."""
    with pytest.raises(InvalidParameterError, match="str"):
        sanitize_prompt(b"bytes", 1.0)  # type: ignore[arg-type]
