"""The text the inversion evaluation inverts: news, Python source and random tokens."""

from __future__ import annotations

import inspect
import json.decoder
import random
import textwrap
from typing import Any

from evals.common import packaged_file
from evals.inversion.config import Config

LEE = "test/test_data/lee_background.cor"


def lee_text() -> str:
    """The Lee news corpus shipped in the gensim wheel (text the ranker never saw)."""
    path = packaged_file("gensim", LEE, install="pip install --no-deps 'gensim>=4.3'")
    return path.read_text(encoding="utf-8", errors="replace")


def code_text() -> str:
    return textwrap.dedent(inspect.getsource(json.decoder))


def windows_from(ids: list[int], count: int, length: int, rng: random.Random) -> list[list[int]]:
    """``count`` non-overlapping windows of ``length`` tokens at random offsets."""
    slots = len(ids) // length
    if slots < count:
        raise ValueError(f"only {slots} windows of {length} tokens available, {count} asked")
    picks = rng.sample(range(slots), count)
    return [ids[s * length : (s + 1) * length] for s in sorted(picks)]


def window_sets(target: Any, config: Config, rng: random.Random) -> dict[str, list[list[int]]]:
    """The named sets of token windows, drawn in a fixed order from ``rng``."""
    news_ids = target.encode(lee_text())
    sets: dict[str, list[list[int]]] = {
        "news-10": windows_from(news_ids, config.windows, config.window_length, rng)
    }
    sets[f"news-{config.long_length}"] = windows_from(
        news_ids, config.long_windows, config.long_length, random.Random(config.seed + 1)
    )
    sets["code-10"] = windows_from(target.encode(code_text()), config.code_windows, 10, rng)
    allowed = allowed_tokens(target)
    sets["random-10"] = [
        [rng.choice(allowed) for _ in range(10)] for _ in range(config.random_windows)
    ]
    return sets


def allowed_tokens(target: Any) -> list[int]:
    """Every token id but the special ones (as the auditor's setup draws random tokens)."""
    from companion.audit.corpus import allowed_tokens as allowed

    return [int(i) for i in allowed(target)]
