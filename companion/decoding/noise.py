"""Where the defenses' randomness comes from: the operating system's CSPRNG.

:class:`SecureNoise` turns bytes from ``os.urandom`` into standard normal noise
(Box-Muller in float64 on 53-bit uniforms, with no cap on the radius) and into
the uniform draws that
sampling at a temperature needs.  A general-purpose generator, even one
seeded from ``secrets``, is predictable from its outputs (Mersenne Twister, or
Philox with a known state), so it never protects anyone here.
:class:`SeededNoise` wraps a seeded ``torch.Generator`` for tests and
experiments; the API only hands it out when the companion runs with
``allow_seed`` (the explicit insecure setting).

The floating-point representation of the noise and what it means for the
guarantee (Mironov 2012) is discussed in docs/methods/decoding.md: Veil releases
only a token index chosen from the noisy scores, never a noisy value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import torch

from py_core.errors import InvalidParameterError

_TWO_PI = 2.0 * math.pi
_SCALE_53 = 1.0 / float(1 << 53)
_TOP_53 = np.uint64((1 << 53) - 1)
_LN_2_53 = 53.0 * math.log(2.0)


class NoiseSource:
    """Standard normal noise and uniform draws for one answer."""

    secure: bool = False

    def normal(self, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        """N(0, 1) noise of ``shape`` on ``like``'s device and dtype."""
        raise NotImplementedError

    def uniform(self) -> float:
        """One draw from U[0, 1)."""
        raise NotImplementedError


def _uniforms(n: int) -> np.ndarray:
    """``n`` float64 uniforms on [0, 1) with 53 random bits each, from os.urandom."""
    raw = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
    return (raw >> np.uint64(11)).astype(np.float64) * _SCALE_53


def _exponentials(n: int) -> np.ndarray:
    """``n`` standard exponentials ``-ln(1 - U)``, ``U`` uniform on [0, 1), with no cap.

    ``U``'s 53-bit cell ``[j, j + 1) 2^-53`` gives ``-ln(1 - j 2^-53)``, the cell's smallest
    value.  The top cell alone would cap the draw at ``53 ln 2`` (a radius of 8.57 in
    Box-Muller): there, given the cell, ``(1 - U) 2^53`` is again uniform on (0, 1], so the
    draw is ``53 ln 2`` plus a fresh exponential drawn the same way (memorylessness).  The
    tail is the exponential's at every depth, where it used to be cut off.
    """
    raw = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)
    out = -np.log1p(-(raw.astype(np.float64) * _SCALE_53))  # 1 - u in (0, 1]: finite
    top = np.flatnonzero(raw == _TOP_53)
    if top.size:  # probability 2^-53 each
        out[top] = _LN_2_53 + _exponentials(top.size)
    return out


class SecureNoise(NoiseSource):
    """Noise from the OS CSPRNG (``os.urandom``), turned into Gaussians by Box-Muller."""

    secure = True

    def normal(self, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        n = math.prod(shape)
        pairs = (n + 1) // 2
        radius = np.sqrt(2.0 * _exponentials(pairs))
        angle = _TWO_PI * _uniforms(pairs)
        z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:n]
        noise = torch.from_numpy(z.reshape(tuple(shape)))
        return noise.to(device=like.device, dtype=like.dtype)

    def uniform(self) -> float:
        return float(_uniforms(1)[0])


class SeededNoise(NoiseSource):
    """A seeded ``torch.Generator``: reproducible, for tests and experiments only."""

    def __init__(self, seed: int, device: str = "cpu") -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidParameterError(f"seed must be an integer; got {seed!r}")
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def normal(self, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(tuple(shape), generator=self.generator, device=self.generator.device)
        return noise.to(device=like.device, dtype=like.dtype)

    def uniform(self) -> float:
        draw = torch.rand((), generator=self.generator, device=self.generator.device)
        return float(draw)


def secure_generator(device: str = "cpu", seed: int | None = None) -> NoiseSource:
    """The defenses' noise: the OS CSPRNG, or a seeded one when ``seed`` is given (tests only)."""
    return SecureNoise() if seed is None else SeededNoise(int(seed), device)


def check_source(source: object) -> NoiseSource:
    if not isinstance(source, NoiseSource):
        raise InvalidParameterError(
            f"generator must be a NoiseSource (companion.decoding.noise); "
            f"got {type(source).__name__}"
        )
    return source
