"""Build ``py_core/wordfreq_en.tsv.gz`` from symspellpy's bundled dictionary (MIT).

    python -m evals.krr.build_wordfreq [--words 50000]

The table holds the most frequent ASCII words of symspellpy's
``frequency_dictionary_en_82_765.txt`` (Google Books counts; SymSpell, MIT
licence, (c) Wolf Garbe and mmb L) with their Zipf frequency, log10 of
occurrences per billion words, rounded to two decimals, most frequent first.
The output is byte-for-byte reproducible (gzip without a timestamp).
"""

from __future__ import annotations

import argparse
import gzip
import math
from pathlib import Path

from evals.krr.restorers import load_unigrams

TARGET = Path(__file__).resolve().parents[2] / "py_core" / "wordfreq_en.tsv.gz"


def build(n_words: int, target: Path = TARGET) -> Path:
    counts = load_unigrams()
    total = float(sum(counts.values()))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n_words]
    lines = [f"{word}\t{math.log10(count / total * 1e9):.2f}" for word, count in ranked]
    header = "# word\tzipf  (source: symspellpy frequency_dictionary_en_82_765.txt, MIT)\n"
    data = (header + "\n".join(lines) + "\n").encode("ascii")
    target.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=50_000)
    args = parser.parse_args()
    path = build(args.words)
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
