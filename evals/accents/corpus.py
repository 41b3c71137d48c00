"""Real sentences in each Latin-script language, with planted personal data.

The sentences are human translations installed on this machine: the gettext
catalogs (``/usr/share/locale/LANG/LC_MESSAGES/*.mo``) of Debian's programs
(coreutils, apt, dpkg, git, GTK, PostgreSQL, ...), read with :mod:`gettext`.  Only
messages of six or more words made of letters (an apostrophe or hyphen inside a
word, one punctuation mark after it) are kept -- no format strings, no code --
and the ISO code-list catalogs (country and language names) are left out.  The
prose is technical (software messages), not clinical notes or e-mails.

Personal data comes from Faker's locale providers (fr_FR, de_DE, es_ES, pt_PT,
it_IT): a first and last name, a street name, a city, a phone number, an e-mail
address or a date in that country's format; every token of such a value is a
sensitive word with its category.  Everything is seeded, so one machine gives the
same corpus every time (another machine's catalogs may differ: the results record
which catalogs and how many sentences).
"""

from __future__ import annotations

import gettext
import hashlib
import random
import re
from dataclasses import dataclass
from pathlib import Path

from evals.scripts.corpus import Document, Word

__all__ = ["LOCALES", "Corpus", "build", "sentences"]

LOCALE_DIR = Path("/usr/share/locale")
LOCALES = {"fr": "fr_FR", "de": "de_DE", "es": "es_ES", "pt": "pt_PT", "it": "it_IT"}
_TOKEN = re.compile(r"[^\W\d_]+(?:['\u2019-][^\W\d_]+)*[,.;:!?]?")
_PII = ("name", "street", "city", "phone", "email", "date")


@dataclass(frozen=True, slots=True)
class Corpus:
    language: str
    documents: tuple[Document, ...]
    catalogs: tuple[str, ...]
    sentences_available: int
    sha256: str  # of the sentences used, in order


def sentences(language: str, root: Path = LOCALE_DIR) -> tuple[list[str], list[str]]:
    """The usable translated messages of ``language`` (sorted) and the catalogs read."""
    found: set[str] = set()
    catalogs = []
    for path in sorted((root / language / "LC_MESSAGES").glob("*.mo")):
        if path.name.startswith("iso_"):
            continue
        try:
            with path.open("rb") as handle:
                catalog = gettext.GNUTranslations(handle)
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        catalogs.append(path.stem)
        messages: dict[object, object] = getattr(catalog, "_catalog", {})  # the parsed messages
        for value in messages.values():
            if not isinstance(value, str):
                continue
            text = " ".join(value.replace("\u2019", "'").split())
            tokens = text.split(" ")
            if len(tokens) >= 6 and all(_TOKEN.fullmatch(t) for t in tokens):
                found.add(text)
    return sorted(found), catalogs


def _pii(fake: object, rng: random.Random) -> tuple[str, str]:
    kind = rng.choice(_PII)
    f: object = fake
    value = {
        "name": lambda: f"{f.first_name()} {f.last_name()}",  # type: ignore[attr-defined]
        "street": lambda: f.street_name(),  # type: ignore[attr-defined]
        "city": lambda: f.city(),  # type: ignore[attr-defined]
        "phone": lambda: f.phone_number(),  # type: ignore[attr-defined]
        "email": lambda: f.email(),  # type: ignore[attr-defined]
        "date": lambda: f.date(),  # type: ignore[attr-defined]
    }[kind]()
    return kind, " ".join(str(value).split())


def build(
    language: str,
    common_words: int,
    *,
    seed: int = 0,
    document_words: int = 45,
    pii_per_document: int = 3,
    root: Path = LOCALE_DIR,
    smoke_fallback: bool = False,
) -> Corpus:
    """Documents of real sentences (``common_words`` words in all) with planted PII."""
    from faker import Faker

    pool, catalogs = sentences(language, root)
    fake = Faker(LOCALES[language])
    fake.seed_instance(f"{seed}/{language}")
    if not pool:
        if not smoke_fallback:
            raise FileNotFoundError(
                f"no gettext catalogs with {language} sentences under {root} "
                "(install the language's translations, or run --smoke)"
            )
        # A machine without translations (a trimmed image): Faker's word lists in
        # sentences, said so in the results ("faker-lorem"); never for the full report.
        pool = sorted({" ".join(fake.sentence(nb_words=9).split()) for _ in range(400)})
        catalogs = ["faker-lorem"]
    rng = random.Random(f"{seed}/accents/{language}")
    order = rng.sample(pool, len(pool))
    docs: list[Document] = []
    used: list[str] = []
    total = 0
    while total < common_words and order:
        words: list[Word] = []
        chunk: list[list[Word]] = []
        while order and sum(len(c) for c in chunk) < document_words:
            sentence = order.pop()
            used.append(sentence)
            chunk.append([Word(t, False, None) for t in sentence.split(" ")])
        total += sum(len(c) for c in chunk)
        for _ in range(pii_per_document):
            kind, value = _pii(fake, rng)
            chunk.insert(
                rng.randrange(len(chunk) + 1), [Word(t, True, kind) for t in value.split()]
            )
        for piece in chunk:
            words += piece
        docs.append(Document(language, "messages", " ".join(w.text for w in words), tuple(words)))
    digest = hashlib.sha256("\n".join(used).encode("utf-8")).hexdigest()
    return Corpus(language, tuple(docs), tuple(catalogs), len(pool), digest)
