"""Build ``py_core/wordfreq_ko.tsv.gz`` and ``wordfreq_fr.tsv.gz`` from the ``wordfreq`` package.

    python -m evals.scripts.build_wordfreq [--words 30000]

``wordfreq`` 3.1 (PyPI; code Apache-2.0, word lists CC BY-SA 4.0, Robyn Speer
et al.) ships frequency lists for 40+ languages.  Its Korean list is segmented
by MeCab, so it holds morphemes (stems, particles, endings) rather than
space-separated words; only entries made of Hangul syllables are kept.  The
French list keeps entries made of letters (accents included) and apostrophes.
Each line is a word and its Zipf frequency (log10 of occurrences per billion
words, two decimals), most frequent first; gzip without a timestamp, so the
output is byte-for-byte reproducible.  The tables, being derived from
``wordfreq``'s data, are under CC BY-SA 4.0 (``py_core/wordfreq_multi.LICENSE.txt``).
"""

from __future__ import annotations

import argparse
import gzip
import math
import re
from pathlib import Path

PY_CORE = Path(__file__).resolve().parents[2] / "py_core"
_KEEP = {
    "ko": re.compile(r"[\uac00-\ud7a3]+"),
    "fr": re.compile(r"[a-zàâäçéèêëîïôöûùüÿœæ']+"),
}


def frequencies(language: str) -> dict[str, float]:
    """``wordfreq``'s frequency list for ``language`` (word -> frequency), its "large" list if any."""
    try:
        import wordfreq
    except ImportError as exc:  # pragma: no cover - the eval extra installs it
        raise SystemExit("wordfreq is not installed: pip install -e '.[eval]'") from exc
    wordlist = "large" if language == "fr" else "small"
    return dict(wordfreq.get_frequency_dict(language, wordlist))


def build(language: str, n_words: int, target: Path | None = None) -> Path:
    keep = _KEEP[language]
    ranked = sorted(
        ((w, f) for w, f in frequencies(language).items() if keep.fullmatch(w) and f > 0),
        key=lambda item: (-item[1], item[0]),
    )[:n_words]
    lines = [f"{word}\t{math.log10(freq * 1e9):.2f}" for word, freq in ranked]
    header = f"# word\tzipf  (source: wordfreq 3.1 {language} list, CC BY-SA 4.0)\n"
    data = (header + "\n".join(lines) + "\n").encode("utf-8")
    path = target or PY_CORE / f"wordfreq_{language}.tsv.gz"
    path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=30_000)
    args = parser.parse_args()
    for language in _KEEP:
        path = build(language, args.words)
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
