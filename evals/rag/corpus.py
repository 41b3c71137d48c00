"""The benchmark's documents and questions, each question with its gold document.

* ``template``: a sentence of a news article picked at random (seeded), asked about
  by its four longest content words ("What does the report say about ...?").
* ``paraphrase``: hand-written questions about twenty articles of the Lee corpus
  that avoid the article's own words (the content-word overlap is measured).
* ``rare``: a consultation note's record number, e-mail address, phone number or
  surname in a question about the note ("Which medication was recommended to the
  patient with record number MRN-1234567?").
* ``offtopic``: questions about nothing in the store (the relevance threshold should
  let nothing through for them).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from evals.common import packaged_file
from evals.pad.corpus import Record, generate_records

LEE_FILE = "test/test_data/lee_background.cor"

# (article index in lee_background.cor, question): written to avoid the article's words.
PARAPHRASES: tuple[tuple[int, str], ...] = (
    (0, "Which settlement was menaced by a large wildfire driven by gusts, so residents fled?"),
    (1, "How many presumed insurgents did troops kill during an overnight gun battle?"),
    (2, "How many deaths on the highways over the festive season, compared with a year earlier?"),
    (3, "Why did the temporary leader of the South American country quit after seven days?"),
    (4, "Why were several birth attendants stood down for misusing laughing gas?"),
    (5, "When could refugees from Afghanistan who fled here be sent back?"),
    (
        6,
        "Which American pair won their opening match of the mixed tennis event in Western Australia?",
    ),
    (
        7,
        "Which multi-day paddling endurance contest on an inland waterway ended on the year's last night?",
    ),
    (10, "Why were many households left without electricity after the tempest?"),
    (
        11,
        "How many died when a stockpile of pyrotechnics ignited in a store in the Andean capital?",
    ),
    (18, "Which filmmaker behind the fantasy trilogy adaptation was honoured by his country?"),
    (22, "What will the new rules on what goes into vehicle tanks do to pollution?"),
    (23, "Why are American travellers more worried about flying after a weapon got on board?"),
    (24, "Who is bringing back two European visitors whose car got stuck in a dry riverbed?"),
    (31, "What are the odds of the oceans rising sharply because of climate change?"),
    (32, "Where was the tremor felt in the grain-growing region?"),
    (
        36,
        "Who said goodbye to the metropolis he governed and asked for a monument for the fallen towers?",
    ),
    (
        38,
        "What did the man who called for help say after his companions were carried away by the current?",
    ),
    (42, "Which low-cost airline started selling very cheap tickets to fend off a rival?"),
    (30, "How does the northern region's rate of heterosexually acquired virus infection compare?"),
)

OFFTOPIC: tuple[str, ...] = (
    "How long should sourdough bread be proofed before baking?",
    "What is the best way to learn the violin as an adult?",
    "Which programming language should I use for a microcontroller?",
    "How do I repot an orchid without damaging its roots?",
    "What are the rules of chess castling?",
    "How many moons does Jupiter have?",
    "What is a good stretching routine after running?",
    "How do I change a flat bicycle tyre?",
    "What does a mortgage broker charge?",
    "Which houseplants survive in low light?",
    "How do I remove red wine stains from a carpet?",
    "What temperature should a home aquarium be kept at?",
)

_RARE_TEMPLATES = {
    "mrn": "Which medication was recommended to the patient with record number {mrn}?",
    "email": "What condition was diagnosed for the patient who writes from {email}?",
    "phone": "What did the doctor prescribe for the patient reachable at {phone}?",
    "surname": "What did the doctor diagnose in the patient named {last}?",
    # the same identifiers written otherwise than in the note
    "phone-glued": "Who called from {phone_glued}?",
    "mrn-spaced": "Find the chart {mrn_spaced}.",
    "surname-only": "Find the note for {last_only}.",
}
_STOP = frozenset(
    [
        "the",
        "a",
        "an",
        "and",
        "or",
        "of",
        "to",
        "in",
        "on",
        "for",
        "with",
        "at",
        "by",
        "from",
        "that",
        "this",
        "was",
        "were",
        "is",
        "are",
        "be",
        "been",
        "has",
        "have",
        "had",
        "it",
        "its",
        "as",
        "but",
        "not",
        "they",
        "their",
        "there",
        "he",
        "she",
        "his",
        "her",
        "we",
        "our",
        "you",
        "your",
        "said",
        "says",
        "will",
        "would",
        "could",
        "should",
        "also",
        "after",
        "before",
        "over",
        "about",
        "into",
        "than",
        "then",
        "them",
        "who",
        "which",
    ]
)
_WORDS = re.compile(r"[A-Za-z][A-Za-z'-]+")


@dataclass(frozen=True, slots=True)
class Document:
    name: str
    text: str


@dataclass(frozen=True, slots=True)
class Question:
    kind: str  # template, paraphrase, rare, offtopic, small
    text: str
    gold: str | None  # the gold document's name (None: off-topic)
    detail: str = ""  # the identifier kind of a rare question


def lee_articles(n: int) -> list[str]:
    path = packaged_file("gensim", LEE_FILE, install="pip install gensim")
    lines = path.read_text(encoding="latin-1").splitlines()
    return [" ".join(line.split()) for line in lines[:n] if line.strip()]


def note_name(record: Record) -> str:
    return f"note-{record.id:04d}.txt"


def documents(lee: list[str], notes: list[Record]) -> list[Document]:
    docs = [Document(f"lee-{i:03d}.txt", text) for i, text in enumerate(lee)]
    docs += [Document(note_name(r), r.text) for r in notes]
    return docs


def content_words(text: str) -> set[str]:
    return {w.lower() for w in _WORDS.findall(text) if w.lower() not in _STOP and len(w) > 2}


def overlap(question: str, passage: str) -> float:
    """The share of the question's content words that the gold text contains."""
    words = content_words(question)
    return len(words & content_words(passage)) / len(words) if words else 0.0


def template_questions(lee: list[str], n: int, rng: random.Random) -> list[Question]:
    used = {i for i, _q in PARAPHRASES}
    pool = [i for i in range(len(lee)) if i not in used]
    out = []
    for i in rng.sample(pool, min(n, len(pool))):
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", lee[i]) if len(s.split()) >= 8]
        if not sentences:
            continue
        sentence = rng.choice(sentences)
        words = sorted(content_words(sentence), key=lambda w: (-len(w), w))[:4]
        out.append(
            Question(
                "template", f"What does the report say about {' '.join(words)}?", f"lee-{i:03d}.txt"
            )
        )
    return out


def paraphrase_questions(lee: list[str]) -> list[Question]:
    return [Question("paraphrase", q, f"lee-{i:03d}.txt") for i, q in PARAPHRASES if i < len(lee)]


def rare_question(record: Record, kind: str) -> Question:
    last = record.pii["name"].split()[-1]
    digits = "".join(c for c in record.pii["mrn"] if c.isdigit())
    text = _RARE_TEMPLATES[kind].format(
        **record.pii,
        last=last,
        # every other note's surname typed in lower case (names match whatever the case)
        last_only=last if record.id % 2 else last.lower(),
        phone_glued="".join(c for c in record.pii["phone"] if c.isdigit()),
        mrn_spaced=f"{digits[:3]} {digits[3:]}",
    )
    return Question("rare", text, note_name(record), kind)


def rare_questions(notes: list[Record], per_kind: int, rng: random.Random) -> list[Question]:
    surnames: dict[str, int] = {}
    for r in notes:
        last = r.pii["name"].split()[-1]
        surnames[last] = surnames.get(last, 0) + 1
    out = []
    for kind in _RARE_TEMPLATES:
        pool = list(notes)
        if kind.startswith("surname"):  # a surname two notes share has no single gold note
            pool = [r for r in notes if surnames[r.pii["name"].split()[-1]] == 1]
        for record in rng.sample(pool, min(per_kind, len(pool))):
            out.append(rare_question(record, kind))
    return out


def offtopic_questions() -> list[Question]:
    return [Question("offtopic", q, None) for q in OFFTOPIC]


def small_store(n: int, seed: int) -> tuple[list[Document], list[Question]]:
    """The issue's case: ``n`` notes alone, and a question per note and identifier kind."""
    notes = generate_records(n, seed=seed)
    docs = [Document(note_name(r), r.text) for r in notes]
    surnames: dict[str, int] = {}
    for r in notes:
        last = r.pii["name"].split()[-1]
        surnames[last] = surnames.get(last, 0) + 1
    questions = []
    for r in notes:
        for kind in ("mrn", "email", "surname"):
            if kind == "surname" and surnames[r.pii["name"].split()[-1]] > 1:
                continue
            q = rare_question(r, kind)
            questions.append(Question("small", q.text, q.gold, kind))
    return docs, questions


# Real records nobody here wrote: Debian changelog entries installed on this machine.
_CHANGELOG_TEMPLATES = {
    "surname": "Find the entry for {surname}.",
    "email": "Which upload did {email} sign?",
    "bug": "Which change closed bug {bug}?",
    "bug-grouped": "Which change closed bug {bug_grouped}?",
}
_NAME_WORD = re.compile(r"^[A-Z][a-z]{3,}$")
# a person credited in an entry: "(Bastian Germann)", "Thanks to Helmut Grohne"
_CREDITED = re.compile(
    r"(?:\(|[Tt]hanks to |[Pp]atch by |[Rr]eported by )([A-Z][a-z]+ [A-Z][a-z]{3,})"
)


def _grouped(number: str) -> str:
    """A number with its thousands apart, as many write it: ``1024598`` -> ``1 024 598``."""
    head = len(number) % 3 or 3
    return " ".join([number[:head]] + [number[i : i + 3] for i in range(head, len(number), 3)])


def changelog_store(
    packages: int, entries: int, per_kind: int, seed: int
) -> tuple[list[Document], list[Question]]:
    """Debian changelog entries of ``packages`` installed packages (``entries`` each), and
    questions naming one rare identifier of exactly one entry: a surname of the person who
    signed it, their e-mail address, a bug number it closed (as written, and with its
    thousands apart).  Empty where no changelogs are installed."""
    from evals.answers.corpus import BUG, DOC_ROOT, TRAILER, read_changelog

    rng = random.Random(seed)
    paths = sorted(DOC_ROOT.glob("*/changelog.Debian.gz")) if DOC_ROOT.is_dir() else []
    rng.shuffle(paths)
    docs: list[Document] = []
    signers: list[tuple[str, str]] = []  # (name, e-mail) of each document
    for path in paths:
        if len({d.name.split("_")[0] for d in docs}) >= packages:
            break
        found = read_changelog(path, entries)
        if len(found) < 2:
            continue
        for e in found:
            name = re.sub(r"[^A-Za-z0-9.+-]", "_", f"{e.package}_{e.version}") + ".txt"
            if any(d.name == name for d in docs):
                continue
            trailer = next(
                (TRAILER.match(line) for line in e.text.splitlines() if TRAILER.match(line)),
                None,
            )
            docs.append(Document(name, e.text + "\n"))
            signers.append((e.name, trailer["email"].strip() if trailer else ""))
    words: dict[str, int] = {}
    for d in docs:
        for w in {w.lower() for w in re.findall(r"\w+", d.text)}:
            words[w] = words.get(w, 0) + 1
    bugs: dict[str, int] = {}
    for d in docs:
        for b in set(BUG.findall(d.text)):
            bugs[b] = bugs.get(b, 0) + 1
    emails: dict[str, int] = {}
    for d in docs:
        for m in set(re.findall(r"<([^>\s]+@[^>\s]+)>", d.text)):
            emails[m.lower()] = emails.get(m.lower(), 0) + 1
    pools: dict[str, list[Question]] = {k: [] for k in _CHANGELOG_TEMPLATES}
    for d, (name, email) in zip(docs, signers, strict=True):
        people = {name} | set(_CREDITED.findall(d.text))
        for person in sorted(people):
            surname = person.split()[-1] if person.split() else ""
            if _NAME_WORD.match(surname) and words.get(surname.lower()) == 1:
                asked = surname if len(pools["surname"]) % 2 else surname.lower()
                pools["surname"].append(
                    Question(
                        "changelog",
                        _CHANGELOG_TEMPLATES["surname"].format(surname=asked),
                        d.name,
                        "surname",
                    )
                )
        if email and emails.get(email.lower()) == 1:
            pools["email"].append(
                Question(
                    "changelog", _CHANGELOG_TEMPLATES["email"].format(email=email), d.name, "email"
                )
            )
        for bug in sorted(set(BUG.findall(d.text))):
            if bugs[bug] == 1 and len(bug) >= 6:
                pools["bug"].append(
                    Question(
                        "changelog", _CHANGELOG_TEMPLATES["bug"].format(bug=bug), d.name, "bug"
                    )
                )
                pools["bug-grouped"].append(
                    Question(
                        "changelog",
                        _CHANGELOG_TEMPLATES["bug-grouped"].format(bug_grouped=_grouped(bug)),
                        d.name,
                        "bug-grouped",
                    )
                )
    questions: list[Question] = []
    for pool in pools.values():
        questions += rng.sample(pool, min(per_kind, len(pool)))
    return docs, questions
