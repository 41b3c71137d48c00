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

import hashlib
import math
import os
from collections.abc import Callable, Sequence

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


RandomBytes = Callable[[int], bytes]  # n -> n bytes from a cryptographic source


def _uniforms(n: int, source: RandomBytes | None = None) -> np.ndarray:
    """``n`` float64 uniforms on [0, 1) with 53 random bits each, from ``source``
    (default: ``os.urandom``, looked up at each call)."""
    raw = np.frombuffer((source or os.urandom)(8 * n), dtype=np.uint64)
    return (raw >> np.uint64(11)).astype(np.float64) * _SCALE_53


def _exponentials(n: int, source: RandomBytes | None = None) -> np.ndarray:
    """``n`` standard exponentials ``-ln(1 - U)``, ``U`` uniform on [0, 1), with no cap.

    ``U``'s 53-bit cell ``[j, j + 1) 2^-53`` gives ``-ln(1 - j 2^-53)``, the cell's smallest
    value.  The top cell alone would cap the draw at ``53 ln 2`` (a radius of 8.57 in
    Box-Muller): there, given the cell, ``(1 - U) 2^53`` is again uniform on (0, 1], so the
    draw is ``53 ln 2`` plus a fresh exponential drawn the same way (memorylessness).  The
    tail is the exponential's at every depth, where it used to be cut off.
    """
    raw = np.frombuffer((source or os.urandom)(8 * n), dtype=np.uint64) >> np.uint64(11)
    out = -np.log1p(-(raw.astype(np.float64) * _SCALE_53))  # 1 - u in (0, 1]: finite
    top = np.flatnonzero(raw == _TOP_53)
    if top.size:  # probability 2^-53 each
        out[top] = _LN_2_53 + _exponentials(top.size, source)
    return out


class SecureNoise(NoiseSource):
    """Noise from the OS CSPRNG (``os.urandom``), turned into Gaussians by Box-Muller."""

    secure = True

    def _bytes(self, n: int) -> bytes:
        return os.urandom(n)

    def normal(self, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        n = math.prod(shape)
        pairs = (n + 1) // 2
        radius = np.sqrt(2.0 * _exponentials(pairs, self._bytes))
        angle = _TWO_PI * _uniforms(pairs, self._bytes)
        z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:n]
        noise = torch.from_numpy(z.reshape(tuple(shape)))
        return noise.to(device=like.device, dtype=like.dtype)

    def uniform(self) -> float:
        return float(_uniforms(1, self._bytes)[0])


class KeyedNoise(SecureNoise):
    """The same noise from a keyed stream: SHAKE-256 of a secret 32-byte key and a counter.

    For an engine whose workers must draw identical noise for one request (vLLM's
    tensor-parallel ranks each run the sampler on the same logits): the companion draws
    the key from ``os.urandom`` per answer and sends it with the request, so every rank
    reads the same stream, and without the key the stream is unpredictable (SHAKE-256 as a
    keyed extendable-output function).  Each read takes the next block of the stream,
    never reusing one, so two instances with the same key give the same draws in the same
    order (tests/companion/test_noise.py).
    """

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) < 32:
            raise InvalidParameterError("a noise key must be at least 32 random bytes")
        self._key = key
        self._counter = 0

    def _bytes(self, n: int) -> bytes:
        block = self._counter.to_bytes(8, "big")
        self._counter += 1
        return hashlib.shake_256(b"veil-noise\0" + self._key + block).digest(n)


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
