"""The CSPRNG Gaussian has the normal's whole tail: Box-Muller's radius is not capped at 8.57."""

from __future__ import annotations

import math
import os
import struct

import numpy as np
import pytest
import torch

from companion.decoding import noise
from companion.decoding.noise import SecureNoise

CAP = math.sqrt(2 * 53 * math.log(2))  # 8.5717: the largest radius of 53-bit Box-Muller


def _words(*values: int):
    """An ``os.urandom`` that returns the 64-bit words ``values`` (53-bit ``u`` = value << 11)."""
    stream = b"".join(struct.pack("<Q", v << 11) for v in values)
    taken = [0]

    def urandom(n: int) -> bytes:
        start = taken[0]
        taken[0] += n
        assert taken[0] <= len(stream), "the test's words ran out"
        return stream[start : start + n]

    return urandom


TOP = (1 << 53) - 1  # U in the top cell [1 - 2^-53, 1)
HALF = 1 << 52  # U = 0.5: an exponential of ln 2


def test_a_draw_in_the_top_cell_goes_past_the_former_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Top cell, then U = 0.5, then angle 0: z = sqrt(2 (53 ln 2 + ln 2)) > 8.5717."""
    monkeypatch.setattr(os, "urandom", _words(TOP, HALF, 0))
    z = float(SecureNoise().normal((1,), torch.zeros(1, dtype=torch.float64))[0])
    assert z == pytest.approx(math.sqrt(2 * 54 * math.log(2)), rel=1e-12)
    assert z > CAP + 0.08


def test_the_top_cell_continues_at_every_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    """A top cell adds 53 ln 2 and draws again, as often as it is hit; other cells as before."""
    # first three draws: U = 0.5, top, top; the two redraws: top, U = 0.5; then U = 0
    monkeypatch.setattr(os, "urandom", _words(HALF, TOP, TOP, TOP, HALF, 0))
    e = noise._exponentials(3)
    assert e[0] == pytest.approx(math.log(2), rel=1e-15)
    assert e[1] == pytest.approx(106 * math.log(2), rel=1e-15)  # top, top, then U = 0
    assert e[2] == pytest.approx(54 * math.log(2), rel=1e-15)  # top, then U = 0.5


def test_exponentials_have_the_right_distribution() -> None:
    """Mean 1, variance 1 and the tails e^-t of Exp(1): within 4 standard errors on 400k."""
    e = noise._exponentials(400_000)
    n = e.size
    assert abs(float(e.mean()) - 1.0) < 4 / math.sqrt(n)
    assert abs(float(e.var()) - 1.0) < 4 * math.sqrt(8 / n)  # Var of (E-1)^2 is 8
    for t in (0.5, 2.0, 6.0):
        p = math.exp(-t)
        share = float(np.mean(e > t))
        assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / n), (t, share)
