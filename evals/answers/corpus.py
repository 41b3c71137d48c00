"""The documents and questions of ``veil eval answers``: real Debian records on this machine.

Two bodies of text nobody here wrote, read from the installed system:

* **changelogs** (``/usr/share/doc/PKG/changelog.Debian.gz``): one document per upload
  entry (the header ``PKG (VERSION) DIST; urgency=..``, the maintainers' notes, the
  ``-- NAME <EMAIL>  DATE`` trailer).  Questions: which version closed bug #N (only bugs
  named in exactly one entry of the store), who uploaded version V, on what date.
* **copyright files** (``/usr/share/doc/PKG/copyright`` in the machine-readable DEP-5
  format): one document per package (the header paragraph and the ``Files: *``
  paragraph, with the licence's first lines).  Questions: which licence, who holds the
  copyright, where the upstream source is.

Questions the documents do not answer are asked too: a bug number no entry names, a
version no entry has, a package whose records are not in the store; the right answer is
to decline.  Everything is chosen with a seeded RNG from what is installed, so the same
machine gives the same questions; the report lists the packages.
"""

from __future__ import annotations

import gzip
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evals.answers.config import Config

DOC_ROOT = Path("/usr/share/doc")
HEADER = re.compile(r"^(?P<pkg>[a-z0-9][a-z0-9+.-]+) \((?P<version>[^)\s]+)\) [^;]*;.*$")
TRAILER = re.compile(r"^ -- (?P<name>[^<]+?) <(?P<email>[^>]+)>\s+(?P<date>.+?)\s*$")
BUG = re.compile(r"#(\d{5,7})\b")
MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]


@dataclass(frozen=True, slots=True)
class Document:
    name: str  # the file name it is uploaded under (what a citation names)
    text: str
    body: str  # "changelog" | "copyright"
    package: str


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    gold: tuple[str, ...]  # accepted forms (lower case); empty: the documents do not say
    kind: str  # what it asks: bug-version, uploader, date, licence, holder, source, unanswerable-*
    body: str
    document: str | None  # the document that answers it (None: unanswerable)

    @property
    def answerable(self) -> bool:
        return bool(self.gold)


@dataclass
class Corpus:
    documents: list[Document] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    packages: dict[str, list[str]] = field(default_factory=dict)  # body -> packages used


@dataclass(frozen=True, slots=True)
class Entry:
    package: str
    version: str
    text: str
    name: str
    date: str


def read_changelog(path: Path, limit: int) -> list[Entry]:
    """The first ``limit`` complete entries of a Debian changelog (newest first)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
            lines = handle.read(200_000).splitlines()
    except (OSError, EOFError):
        return []
    entries: list[Entry] = []
    start: int | None = None
    for i, line in enumerate(lines):
        if start is None:
            if HEADER.match(line):
                start = i
            continue
        trailer = TRAILER.match(line)
        if trailer:
            head = HEADER.match(lines[start])
            assert head is not None
            text = "\n".join(lines[start : i + 1]).strip()
            if len(text) <= 1500:  # one short record; very long entries are skipped
                entries.append(
                    Entry(
                        head["pkg"],
                        head["version"],
                        text,
                        trailer["name"].strip(),
                        trailer["date"].strip(),
                    )
                )
            start = None
            if len(entries) >= limit:
                break
    return entries


def date_forms(date: str) -> tuple[str, ...]:
    """Accepted ways to write an RFC 2822 date ("Mon, 02 Jan 2023 13:06:21 +0100")."""
    m = re.search(r"(\d{1,2}) ([A-Z][a-z]{2}) (\d{4})", date)
    if not m:
        return (date.lower(),)
    day, mon, year = int(m[1]), m[2].lower(), m[3]
    month_index = next((i for i, full in enumerate(MONTHS) if full.startswith(mon)), None)
    if month_index is None:
        return (date.lower(),)
    full = MONTHS[month_index]
    num = month_index + 1
    return (
        f"{day} {mon} {year}",
        f"{day:02d} {mon} {year}",
        f"{day} {full} {year}",
        f"{day:02d} {full} {year}",
        f"{full} {day} {year}",
        f"{mon} {day} {year}",
        f"{year}-{num:02d}-{day:02d}",
        f"{day:02d}/{num:02d}/{year}",
        f"{num:02d}/{day:02d}/{year}",
        f"{day}.{num}.{year}",
    )


def name_forms(name: str) -> tuple[str, ...]:
    """A person's full name, and their family name when it is long enough to be telling."""
    parts = name.lower().split()
    forms = [name.lower()]
    if len(parts) > 1 and len(parts[-1]) >= 4:
        forms.append(parts[-1])
    return tuple(forms)


def read_copyright(path: Path) -> tuple[str, str, str, str] | None:
    """(document text, licence, copyright holder, upstream source host) of a DEP-5 file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not text.startswith("Format:") or "copyright-format" not in text.splitlines()[0]:
        return None
    paragraphs = re.split(r"\n\s*\n", text)
    header = paragraphs[0]
    files = next(
        (p for p in paragraphs[1:] if re.match(r"Files:\s*\*\s*$", p.splitlines()[0])), None
    )
    if files is None:
        return None
    fields = _fields(files)
    licence = fields.get("license", "").splitlines()[0].strip() if fields.get("license") else ""
    holder = _holder(fields.get("copyright", ""))
    source = _fields(header).get("source", "")
    url = re.search(r"(?:https?|ftp)://([^/\s]+)", source)
    if not licence or not holder or not url or len(licence) > 40:
        return None
    # The document: the header and the Files: * paragraph, the licence text cut to 3 lines.
    kept: list[str] = []
    in_licence = 0
    for line in files.splitlines():
        if line.startswith("License:"):
            in_licence = 1
        elif in_licence and line.startswith((" ", "\t")):
            in_licence += 1
            if in_licence > 4:
                continue
        else:
            in_licence = 0
        kept.append(line)
    document = (header.strip() + "\n\n" + "\n".join(kept)).strip()
    if len(document) > 2500:
        return None
    return document, licence, holder, url[1].lower()


def _fields(paragraph: str) -> dict[str, str]:
    out: dict[str, str] = {}
    key = None
    for line in paragraph.splitlines():
        if line[:1] in (" ", "\t") and key is not None:
            out[key] += "\n" + line.strip()
            continue
        m = re.match(r"([A-Za-z-]+):\s*(.*)$", line)
        if m:
            key = m[1].lower()
            out[key] = m[2].strip()
    return out


def _holder(copyright: str) -> str:
    """The first holder of a Copyright field, without years and "(C)"."""
    for line in copyright.splitlines():
        line = re.sub(r"(?i)copyright|\(c\)|©", " ", line)
        line = re.sub("^[\\s\\d,\\-\u2013/]+", "", line).strip()
        line = re.split(r"\s*<|\s*\(|,\s*(?:inc|ltd)|\s+and\s+", line, maxsplit=1)[0].strip(" ,.")
        if len(line) >= 4 and re.search(r"[A-Za-z]{3}", line):
            return line
    return ""


def licence_forms(licence: str) -> tuple[str, ...]:
    """A licence's short name as DEP-5 writes it ("GPL-2+"), and GPLv2-style spellings."""
    low = licence.lower()
    forms = {low}
    m = re.match(r"^([a-z]+)-(\d[\d.]*)", low)
    if m:
        for number in dict.fromkeys([m[2], re.sub(r"\.0$", "", m[2])]):
            forms.update({f"{m[1]}-{number}", f"{m[1]}v{number}", f"{m[1]} {number}"})
    return tuple(sorted(forms))


def holder_forms(holder: str) -> tuple[str, ...]:
    words = holder.lower().split()
    return tuple(dict.fromkeys([holder.lower(), " ".join(words[:2])]))


def _installed(kind: str) -> list[Path]:
    if not DOC_ROOT.is_dir():
        return []
    name = "changelog.Debian.gz" if kind == "changelog" else "copyright"
    return sorted(p for p in DOC_ROOT.glob(f"*/{name}") if p.is_file())


def build_corpus(
    *,
    changelog_packages: int,
    entries_per_package: int,
    copyright_packages: int,
    questions: dict[str, int],
    seed: int,
) -> Corpus:
    """Documents and questions (``questions``: how many of each kind, at most)."""
    rng = random.Random(seed)
    corpus = Corpus()
    entries: list[Entry] = []
    used: list[str] = []
    paths = _installed("changelog")
    rng.shuffle(paths)
    for path in paths:
        if len(used) >= changelog_packages:
            break
        found = read_changelog(path, entries_per_package)
        if len(found) < 2 or found[0].package in used:
            continue
        used.append(found[0].package)
        entries.extend(found)
    corpus.packages["changelog"] = sorted(used)
    names: dict[tuple[str, str], str] = {}
    for entry in entries:
        name = (
            re.sub(r"[^A-Za-z0-9.+-]", "_", f"{entry.package}_{entry.version}") + ".changelog.txt"
        )
        names[(entry.package, entry.version)] = name
        corpus.documents.append(Document(name, entry.text + "\n", "changelog", entry.package))
    # Bugs named by exactly one entry of the store: "which version closed it" has one answer.
    bug_count: Counter[str] = Counter()
    for entry in entries:
        bug_count.update(set(BUG.findall(entry.text)))
    versions = Counter((e.package, e.version) for e in entries)
    pool: dict[str, list[Question]] = {k: [] for k in questions}
    for entry in entries:
        doc = names[(entry.package, entry.version)]
        if versions[(entry.package, entry.version)] != 1:
            continue
        for bug in sorted(set(BUG.findall(entry.text))):
            if bug_count[bug] == 1:
                pool.setdefault("bug-version", []).append(
                    Question(
                        f"Which version of the Debian package {entry.package} closed bug #{bug}?",
                        (entry.version.lower(),),
                        "bug-version",
                        "changelog",
                        doc,
                    )
                )
        pool.setdefault("uploader", []).append(
            Question(
                f"Who made the upload of {entry.package} version {entry.version}?",
                name_forms(entry.name),
                "uploader",
                "changelog",
                doc,
            )
        )
        pool.setdefault("date", []).append(
            Question(
                f"On what date was {entry.package} version {entry.version} uploaded?",
                date_forms(entry.date),
                "date",
                "changelog",
                doc,
            )
        )
    known_bugs = set(bug_count)
    for package in used:
        bug = str(rng.randrange(100_000, 1_100_000))
        while bug in known_bugs:
            bug = str(rng.randrange(100_000, 1_100_000))
        pool.setdefault("unanswerable-bug", []).append(
            Question(
                f"Which version of the Debian package {package} closed bug #{bug}?",
                (),
                "unanswerable-bug",
                "changelog",
                None,
            )
        )
        mine = [e for e in entries if e.package == package]
        fake = _missing_version(mine[0].version, {e.version for e in mine}, rng)
        pool.setdefault("unanswerable-version", []).append(
            Question(
                f"Who made the upload of {package} version {fake}?",
                (),
                "unanswerable-version",
                "changelog",
                None,
            )
        )
    # Copyright files, of packages other than the changelogs' (a different body of text).
    copyrights = [p for p in _installed("copyright") if p.parent.name not in used]
    rng.shuffle(copyrights)
    taken: list[str] = []
    left_out: list[str] = []
    for path in copyrights:
        package = path.parent.name
        if len(taken) >= copyright_packages:
            if len(left_out) < copyright_packages and read_copyright(path) is not None:
                left_out.append(package)  # installed, readable, but not in the store
            if len(left_out) >= copyright_packages:
                break
            continue
        parsed = read_copyright(path)
        if parsed is None:
            continue
        text, licence, holder, host = parsed
        taken.append(package)
        doc = re.sub(r"[^A-Za-z0-9.+-]", "_", package) + ".copyright.txt"
        corpus.documents.append(Document(doc, text + "\n", "copyright", package))
        pool.setdefault("licence", []).append(
            Question(
                f"Under which licence are the files of the Debian package {package} distributed?",
                licence_forms(licence),
                "licence",
                "copyright",
                doc,
            )
        )
        pool.setdefault("holder", []).append(
            Question(
                f"Who holds the copyright of the Debian package {package}'s files?",
                holder_forms(holder),
                "holder",
                "copyright",
                doc,
            )
        )
        pool.setdefault("source", []).append(
            Question(
                f"From which host can the upstream source of {package} be downloaded?",
                (host,),
                "source",
                "copyright",
                doc,
            )
        )
    corpus.packages["copyright"] = sorted(taken)
    for package in left_out:
        pool.setdefault("unanswerable-package", []).append(
            Question(
                f"Under which licence are the files of the Debian package {package} distributed?",
                (),
                "unanswerable-package",
                "copyright",
                None,
            )
        )
    for kind, count in questions.items():
        chosen = pool.get(kind, [])
        rng.shuffle(chosen)
        corpus.questions.extend(chosen[:count])
    order = {k: i for i, k in enumerate(questions)}
    corpus.questions.sort(key=lambda q: order[q.kind])
    # Interleave so that a run cut short still covers every kind.
    corpus.questions = _interleave(corpus.questions)
    return corpus


def corpus_for(config: Config) -> Corpus:
    """The corpus of an answers configuration (``evals.answers.config.Config``)."""
    return build_corpus(
        changelog_packages=config.changelog_packages,
        entries_per_package=config.entries_per_package,
        copyright_packages=config.copyright_packages,
        questions=dict(config.questions),
        seed=config.seed,
    )


def _missing_version(latest: str, have: set[str], rng: random.Random) -> str:
    m = re.match(r"^(.*?)(\d+)([^\d]*)$", latest)
    candidate = latest + "+veil1"
    if m:
        for bump in range(7, 40):
            candidate = f"{m[1]}{int(m[2]) + bump}{m[3]}"
            if candidate not in have:
                break
    return candidate


def _interleave(questions: list[Question]) -> list[Question]:
    by_kind: dict[str, list[Question]] = {}
    for q in questions:
        by_kind.setdefault(q.kind, []).append(q)
    out: list[Question] = []
    while any(by_kind.values()):
        for kind in list(by_kind):
            if by_kind[kind]:
                out.append(by_kind[kind].pop(0))
    return out


# -- scoring -------------------------------------------------------------------------

DECLINE = re.compile(
    r"(?ix)\b("
    r"not\s+(?:\w+\s+){0,3}(?:mention|mentioned|state|stated|say|says|said|contain|contains|"
    r"provide|provided|found|available|specified|specify|listed|given|included|known|clear)"
    r"|no\s+(?:information|mention|record|details?|data|such|bug|version|entry)"
    r"|(?:don't|do\s+not|doesn't|does\s+not|cannot|can't|could\s+not|couldn't)\s+"
    r"(?:know|say|find|answer|determine|tell|see|contain|mention|provide|specify|state)"
    r"|unable\s+to|unknown|i'?m\s+not\s+sure|there\s+is\s+no|isn't\s+(?:mentioned|stated)"
    r")\b"
)


def first_line(text: str) -> str:
    return next((line.strip() for line in text.strip().splitlines() if line.strip()), "")


def _norm(text: str) -> str:
    text = text.lower().replace(",", " ").replace("\u2019", "'")
    text = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text)
    return re.sub(r"\s+", " ", text)


def declines(answer: str) -> bool:
    return bool(DECLINE.search(first_line(answer)))


# A licence's full name as answers write it -> the short name DEP-5 files use (longest
# first: "lesser general public" before "general public").  "version 3" then reads "3".
_LICENCE_NAMES = (
    (r"gnu (?:lesser|library) general public licen[cs]e(?: \(lgpl\))?", "lgpl"),
    (r"gnu affero general public licen[cs]e(?: \(agpl\))?", "agpl"),
    (r"gnu free documentation licen[cs]e(?: \(gfdl\))?", "gfdl"),
    (r"gnu general public licen[cs]e(?: \(gpl\))?", "gpl"),
    (r"apache (?:software )?licen[cs]e", "apache"),
    (r"mozilla public licen[cs]e(?: \(mpl\))?", "mpl"),
)


def licence_norm(line: str) -> str:
    """A normalised first line with licences under their short names ("GNU General Public
    License (GPL) version 3" -> "gpl 3"), so that a full name counts like the short one."""
    for pattern, short in _LICENCE_NAMES:
        line = re.sub(pattern, short, line)
    return re.sub(r"\b(a?gpl|lgpl|gfdl|apache|mpl),? (?:version|v\.?) ?(?=\d)", r"\1 ", line)


def is_right(question: Question, answer: str) -> bool:
    """Answerable: the first line holds a gold form and does not decline; unanswerable:
    the first line declines."""
    line = _norm(first_line(answer))
    if not question.answerable:
        return declines(answer)
    if declines(answer):
        return False
    if question.kind == "bug-version":  # a version must stand alone, not inside a longer one
        pattern = r"(?<![\w.~+-])" + re.escape(question.gold[0]) + r"(?![\w~+]|\.\d)"
        return bool(re.search(pattern, line))
    if question.kind == "licence":  # a whole name: "gpl 2" is not inside "lgpl 2.1"
        line = licence_norm(line)
        return any(
            re.search(r"(?<![\w.-])" + re.escape(_norm(form)) + r"(?![\w]|\.\d)", line)
            for form in question.gold
        )
    return any(_norm(form) in line for form in question.gold)


def repeats(answer: str, n: int = 4, times: int = 3) -> bool:
    """Whether some ``n`` words come back ``times`` times: a repetition loop."""
    words = answer.lower().split()
    grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return bool(grams) and max(grams.values()) >= times
