"""A seeded offline corpus of PII-bearing e-mails and clinical notes with gold spans.

Nothing is downloaded.  Three packages supply the raw material:

* ``presidio-evaluator`` (MIT): its 209 sentence templates (``{{person}}``,
  ``{{credit_card_number}}``, ...) and its 3,000 fake identities from
  FakeNameGenerator.com (names from many countries, addresses, phones, e-mails,
  birthdays, occupations, companies).  Both are read as files from the wheel; we
  fill the templates ourselves so that every filled value is a gold span and the
  whole corpus depends only on our own ``random.Random(seed)``.
* ``faker`` (MIT): dates, times, IDs, IBANs, URLs, hospital and company names.
* ``faker-healthcare-provider`` (MIT): diseases, symptoms, medications with doses,
  vitals and lab results for the clinical notes.

What counts as sensitive follows the i2b2/UTHealth 2014 de-identification
categories the paper evaluates on: PERSON, DATE, AGE, CONTACT (phone, e-mail, URL,
IP), ID (MRN, SSN, card, IBAN, licence, account), LOCATION (street, city, state,
ZIP, country, hospital, company) and PROFESSION.  Diagnoses, medications and
vital signs are health information but not identifiers, so -- as in i2b2 -- they
are *not* gold spans; titles (Mr., Dr.) are not either.

A *word* is a maximal run of non-whitespace characters (what k-RR leaves
delimited); a word is sensitive when it overlaps a gold span.
"""

from __future__ import annotations

import csv
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from py_core.errors import InvalidParameterError

__all__ = [
    "CATEGORIES",
    "Document",
    "Span",
    "Word",
    "generate_corpus",
    "words_of",
]

CATEGORIES = ("PERSON", "DATE", "AGE", "CONTACT", "ID", "LOCATION", "PROFESSION")


@dataclass(frozen=True, slots=True)
class Span:
    """A gold sensitive span ``text[start:end]`` of one category."""

    start: int
    end: int
    category: str

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise InvalidParameterError(
                f"unknown category {self.category!r}; use one of {CATEGORIES}"
            )
        if not 0 <= self.start < self.end:
            raise InvalidParameterError(f"span bounds must satisfy 0 <= start < end; got {self}")


@dataclass(frozen=True, slots=True)
class Word:
    """One whitespace-delimited word of a document and whether it is sensitive."""

    start: int
    end: int
    text: str
    category: str | None  # None: not sensitive

    @property
    def sensitive(self) -> bool:
        return self.category is not None


@dataclass(frozen=True, slots=True)
class Document:
    doc_id: str
    kind: str  # "email" or "clinical"
    text: str
    spans: tuple[Span, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "doc_id": self.doc_id,
            "kind": self.kind,
            "text": self.text,
            "spans": [[s.start, s.end, s.category] for s in self.spans],
        }


_WORD = re.compile(r"\S+")


def words_of(doc: Document) -> list[Word]:
    """The words of ``doc`` with the category of the first gold span each overlaps."""
    out = []
    for match in _WORD.finditer(doc.text):
        category = None
        for span in doc.spans:
            if span.start < match.end() and match.start() < span.end:
                category = span.category
                break
        out.append(Word(match.start(), match.end(), match.group(), category))
    return out


# --------------------------------------------------------------------------- builder


@dataclass
class _Builder:
    parts: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    length: int = 0

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.length += len(text)

    def pii(self, value: str, category: str) -> None:
        value = " ".join(str(value).split())
        if not value:
            return
        self.spans.append(Span(self.length, self.length + len(value), category))
        self.add(value)

    def build(self, doc_id: str, kind: str) -> Document:
        return Document(doc_id, kind, "".join(self.parts), tuple(self.spans))


# --------------------------------------------------------------------- raw material


def _presidio_data(name: str) -> Path:
    from evals.common import packaged_file

    return packaged_file("presidio_evaluator", f"data_generator/raw_data/{name}")


@lru_cache(maxsize=1)
def _identities() -> tuple[dict[str, str], ...]:
    path = _presidio_data("FakeNameGenerator.com_3000.csv")
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = [dict(row) for row in csv.DictReader(handle)]
    # Keep identities whose text survives as one word per field (k-RR is over ASCII;
    # non-ASCII letters are replaced wholesale, which would make them trivially hidden).
    return tuple(r for r in rows if all(v.isascii() for v in r.values()))


_TEMPLATE_FIELD = re.compile(r"\{\{\s*([A-Za-z_]+)\s*\}\}")


@lru_cache(maxsize=1)
def _templates() -> tuple[str, ...]:
    lines = _presidio_data("templates.txt").read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        line = line.strip()
        if not line or not line.isascii() or len(line) > 220:
            continue  # the long song-trivia templates are not e-mail prose
        fields = {f.lower() for f in _TEMPLATE_FIELD.findall(line)}
        if fields and fields <= set(_FIELD_CATEGORY):
            out.append(line)
    return tuple(out)


# template field -> category; the value comes from _Identity.value().
_FIELD_CATEGORY = {
    "person": "PERSON",
    "name": "PERSON",
    "name_female": "PERSON",
    "name_male": "PERSON",
    "first_name": "PERSON",
    "first_name_male": "PERSON",
    "first_name_female": "PERSON",
    "first_name_nonbinary": "PERSON",
    "last_name": "PERSON",
    "last_name_male": "PERSON",
    "last_name_female": "PERSON",
    "organization": "LOCATION",
    "city": "LOCATION",
    "country": "LOCATION",
    "address": "LOCATION",
    "street_name": "LOCATION",
    "building_number": "LOCATION",
    "secondary_address": "LOCATION",
    "postcode": "LOCATION",
    "zipcode": "LOCATION",
    "state_abbr": "LOCATION",
    "nationality": "LOCATION",
    "nation_woman": "LOCATION",
    "nation_plural": "LOCATION",
    "credit_card_number": "ID",
    "iban": "ID",
    "ssn": "ID",
    "us_driver_license": "ID",
    "phone_number": "CONTACT",
    "email": "CONTACT",
    "url": "CONTACT",
    "ip_address": "CONTACT",
    "age": "AGE",
    "year": "DATE",
    "date_time": "DATE",
    "date_of_birth": "DATE",
    "day_of_week": "DATE",
    "job": "PROFESSION",
    "prefix": "TITLE",
    "prefix_male": "TITLE",
    "prefix_female": "TITLE",
}


class _Identity:
    """One fake person from presidio-evaluator's table, completed with Faker."""

    def __init__(self, row: dict[str, str], faker: Any, rng: random.Random) -> None:
        self.row = row
        self.faker = faker
        self.rng = rng

    @property
    def first(self) -> str:
        return self.row["GivenName"]

    @property
    def last(self) -> str:
        return self.row["Surname"]

    @property
    def full(self) -> str:
        if self.rng.random() < 0.2:
            return f"{self.first} {self.row['MiddleInitial']}. {self.last}"
        return f"{self.first} {self.last}"

    @property
    def title(self) -> str:
        return self.row["Title"] or ("Mr." if self.row["Gender"] == "male" else "Ms.")

    def value(self, name: str) -> str:
        r, f = self.row, self.faker
        table: dict[str, Callable[[], str]] = {
            "person": lambda: self.full,
            "name": lambda: self.full,
            "name_female": lambda: self.full,
            "name_male": lambda: self.full,
            "first_name": lambda: self.first,
            "first_name_male": lambda: self.first,
            "first_name_female": lambda: self.first,
            "first_name_nonbinary": lambda: self.first,
            "last_name": lambda: self.last,
            "last_name_male": lambda: self.last,
            "last_name_female": lambda: self.last,
            "organization": lambda: r["Company"],
            "city": lambda: r["City"],
            "country": lambda: r["CountryFull"],
            "address": lambda: f"{r['StreetAddress']}, {r['City']}, {r['State']} {r['ZipCode']}",
            "street_name": lambda: r["StreetAddress"],
            "building_number": lambda: f.building_number(),
            "secondary_address": lambda: f.secondary_address(),
            "postcode": lambda: r["ZipCode"],
            "zipcode": lambda: r["ZipCode"],
            "state_abbr": lambda: r["State"],
            "nationality": lambda: r["CountryFull"],
            "nation_woman": lambda: r["CountryFull"],
            "nation_plural": lambda: r["CountryFull"],
            "credit_card_number": lambda: f.credit_card_number(),
            "iban": lambda: f.iban(),
            "ssn": lambda: f.ssn(),
            "us_driver_license": lambda: f.bothify("?#######").upper(),
            "phone_number": lambda: f.phone_number(),
            "email": lambda: r["EmailAddress"],
            "url": lambda: f.url(),
            "ip_address": lambda: f.ipv4(),
            "age": lambda: r["Age"],
            "year": lambda: str(self.rng.randint(1950, 2024)),
            "date_time": lambda: _date_text(self.rng, _random_date(self.rng)),
            "date_of_birth": lambda: r["Birthday"],
            "day_of_week": lambda: self.rng.choice(_WEEKDAYS),
            "job": lambda: r["Occupation"],
            "prefix": lambda: self.title,
            "prefix_male": lambda: self.title,
            "prefix_female": lambda: self.title,
        }
        return table[name]()


_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _random_date(rng: random.Random) -> date:
    return date(2023, 1, 1) + timedelta(days=rng.randrange(900))


def _date_text(rng: random.Random, d: date) -> str:
    style = rng.randrange(3)
    if style == 0:
        return f"{d.month}/{d.day}/{d.year}"
    if style == 1:
        return f"{d:%B} {d.day}, {d.year}"
    return f"{d:%Y-%m-%d}"


def _fill_template(b: _Builder, template: str, who: _Identity) -> None:
    pos = 0
    for match in _TEMPLATE_FIELD.finditer(template):
        b.add(template[pos : match.start()])
        name = match.group(1).lower()
        category = _FIELD_CATEGORY[name]
        value = who.value(name)
        if category == "TITLE":
            b.add(value)
        else:
            b.pii(value, category)
        pos = match.end()
    b.add(template[pos:])
    last = next((part for part in reversed(b.parts) if part), "")
    if last[-1:].isalnum():
        b.add(".")  # some templates end without a full stop


# ------------------------------------------------------------------------- e-mails

_EMAIL_SUBJECTS = (
    "Quick question",
    "Follow-up from yesterday",
    "Account update",
    "Meeting next week",
    "Invoice and payment",
    "Your request",
    "Change of address",
    "Travel plans",
    "Card problem",
    "Project status",
)

_EMAIL_GENERIC = (
    "I hope you had a good weekend.",
    "Thanks again for your help with this.",
    "Please let me know if you need anything else from me.",
    "I have attached the documents you asked for.",
    "Sorry for the late reply, it has been a busy week.",
    "We should have the final numbers by the end of the month.",
    "Could you take a look when you have a moment?",
    "The team agreed to move forward with the second option.",
    "I will be out of the office on Friday afternoon.",
    "Let me know what time works best for you.",
    "The report is almost finished, but a few sections still need work.",
    "We talked about the budget and the schedule for the next quarter.",
    "I think the new process will save us a lot of time.",
    "Please keep this between us for now.",
    "The meeting went well and everyone seemed happy with the plan.",
    "I am still waiting to hear back from the bank.",
)

_EMAIL_PII = (
    "Can we move our call to {date} at {time}?",
    "You can reach me on my cell at {phone} after five.",
    "My account number is {account}, in case you need it.",
    "Please send the contract to {email} instead of my work address.",
    "I will be staying at {street} in {city} until {date}.",
    "{first} from {company} will join us on {weekday}.",
    "The package should go to {street}, {city}, {state} {zip}.",
    "Our new contact at {company} is {person}, who works as a {job}.",
    "My date of birth is {dob} and my SSN is {ssn}, as the form requires.",
    "I spoke with {person} about the invoice on {date}.",
)

_SIGNOFFS = ("Best regards,", "Thanks,", "Kind regards,", "Cheers,", "All the best,", "Sincerely,")


def _email(doc_id: str, rng: random.Random, faker: Any) -> Document:
    ids = _identities()
    sender = _Identity(rng.choice(ids), faker, rng)
    recipient = _Identity(rng.choice(ids), faker, rng)
    b = _Builder()
    b.add(f"Subject: {rng.choice(_EMAIL_SUBJECTS)}\n\n")
    b.add(rng.choice(("Hi ", "Dear ", "Hello ")))
    b.pii(recipient.first, "PERSON")
    b.add(",\n\n")
    sentences: list[Callable[[], None]] = []
    templates = _templates()
    for _ in range(rng.randint(1, 2)):
        template = rng.choice(templates)
        sentences.append(partial(_fill_template, b, template, sender))
    for _ in range(rng.randint(1, 2)):
        pattern = rng.choice(_EMAIL_PII)
        sentences.append(partial(_fill_pattern, b, pattern, sender, rng, faker))
    for sentence in rng.sample(_EMAIL_GENERIC, rng.randint(2, 3)):
        sentences.append(partial(b.add, sentence))
    rng.shuffle(sentences)
    for i, write in enumerate(sentences):
        if i:
            b.add(" ")
        write()
    b.add(f"\n\n{rng.choice(_SIGNOFFS)}\n")
    b.pii(sender.full, "PERSON")
    b.add("\n")
    b.pii(sender.row["Occupation"], "PROFESSION")
    b.add(", ")
    b.pii(sender.row["Company"], "LOCATION")
    b.add("\n")
    b.pii(faker.phone_number(), "CONTACT")
    return b.build(doc_id, "email")


_PATTERN_FIELD = re.compile(r"\{([a-z]+)\}")


def _fill_pattern(
    b: _Builder, pattern: str, who: _Identity, rng: random.Random, faker: Any
) -> None:
    f = faker
    values: dict[str, tuple[Callable[[], str], str]] = {
        "date": (lambda: _date_text(rng, _random_date(rng)), "DATE"),
        "dob": (lambda: who.row["Birthday"], "DATE"),
        "time": (lambda: f"{rng.randint(1, 12)}:{rng.choice(('00', '15', '30', '45'))}", "DATE"),
        "weekday": (lambda: rng.choice(_WEEKDAYS), "DATE"),
        "phone": (lambda: f.phone_number(), "CONTACT"),
        "email": (lambda: who.row["EmailAddress"], "CONTACT"),
        "account": (lambda: f.bothify("##########"), "ID"),
        "ssn": (lambda: f.ssn(), "ID"),
        "street": (lambda: who.row["StreetAddress"], "LOCATION"),
        "city": (lambda: who.row["City"], "LOCATION"),
        "state": (lambda: who.row["State"], "LOCATION"),
        "zip": (lambda: who.row["ZipCode"], "LOCATION"),
        "company": (lambda: who.row["Company"], "LOCATION"),
        "first": (lambda: who.first, "PERSON"),
        "person": (lambda: who.full, "PERSON"),
        "job": (lambda: who.row["Occupation"], "PROFESSION"),
    }
    pos = 0
    for match in _PATTERN_FIELD.finditer(pattern):
        b.add(pattern[pos : match.start()])
        make, category = values[match.group(1)]
        b.pii(make(), category)
        pos = match.end()
    b.add(pattern[pos:])


# ------------------------------------------------------------------- clinical notes

_PRESENTATIONS = (
    "presented to the {department} with {symptoms}.",
    "was seen in the {department} for {symptoms}.",
    "came in complaining of {symptoms} for the past {days} days.",
    "reports {symptoms} that started about {days} days ago.",
)
_ASSESSMENTS = (
    "Findings are consistent with {disease}.",
    "Assessment: likely {disease}, stable at this time.",
    "The most likely diagnosis is {disease}.",
    "Symptoms improved after treatment; working diagnosis {disease}.",
)
_PLANS = (
    "Continue current medications and recheck labs in two weeks.",
    "Patient was advised to rest, drink fluids and return if symptoms get worse.",
    "We discussed the risks and benefits of treatment and the patient agreed to the plan.",
    "Referral placed for further evaluation and imaging.",
    "No changes to the treatment plan today.",
    "The patient understands the instructions and has no further questions.",
)


def _clinical(doc_id: str, rng: random.Random, faker: Any) -> Document:
    f = faker
    ids = _identities()
    patient = _Identity(rng.choice(ids), f, rng)
    doctor = _Identity(rng.choice(ids), f, rng)
    scenario = f.patient_scenario()
    disease = scenario["disease"]
    symptoms = [s.lower() for s in scenario["symptoms"][: rng.randint(1, 3)]]
    visit = _random_date(rng)
    b = _Builder()
    b.add("Patient: ")
    b.pii(patient.full, "PERSON")
    b.add("   MRN: ")
    b.pii(f.bothify("########"), "ID")
    b.add("   DOB: ")
    b.pii(patient.row["Birthday"], "DATE")
    b.add("\nDate of visit: ")
    b.pii(_date_text(rng, visit), "DATE")
    b.add("   Attending: Dr. ")
    b.pii(doctor.last, "PERSON")
    b.add("\n\n")
    b.pii(patient.row["Age"], "AGE")
    sex = "woman" if patient.row["Gender"] == "female" else "man"
    b.add(f"-year-old {sex} from ")
    b.pii(patient.row["City"], "LOCATION")
    b.add(" ")
    presentation = rng.choice(_PRESENTATIONS)
    department = f.hospital_department().lower()
    if len(symptoms) > 1:
        symptom_text = ", ".join(symptoms[:-1]) + " and " + symptoms[-1]
    else:
        symptom_text = symptoms[0]
    b.add(
        presentation.format(department=department, symptoms=symptom_text, days=rng.randint(2, 14))
    )
    b.add(" Seen at ")
    b.pii(
        f.last_name() + rng.choice((" Memorial Hospital", " Medical Center", " Clinic")), "LOCATION"
    )
    b.add(" on ")
    b.pii(_date_text(rng, visit - timedelta(days=rng.randint(1, 30))), "DATE")
    b.add(f". History of {f.disease().lower()}.")
    order = f.medication_order()
    b.add(
        f" Current medications: {order['medication']} {order['dose']} {order['unit']} "
        f"{order['frequency'].lower()}."
    )
    bp = f.blood_pressure()
    b.add(
        f" Vitals: blood pressure {bp['systolic']}/{bp['diastolic']}, heart rate {rng.randint(55, 110)}."
    )
    lab = f.lab_result()
    b.add(f" {lab['analyte']} was {lab['value']} {lab['unit']} ({lab['flag'].lower()}).")
    b.add(" " + rng.choice(_ASSESSMENTS).format(disease=disease.lower()))
    b.add(" " + rng.choice(_PLANS))
    if rng.random() < 0.6:
        b.add(" The patient lives with ")
        relative = _Identity(rng.choice(ids), f, rng)
        b.pii(relative.first, "PERSON")
        b.add(f", a {rng.choice(('daughter', 'son', 'wife', 'husband', 'friend'))}, at ")
        b.pii(patient.row["StreetAddress"], "LOCATION")
        b.add(".")
    if rng.random() < 0.5:
        b.add(" Works as a ")
        b.pii(patient.row["Occupation"].lower(), "PROFESSION")
        b.add(".")
    b.add(" Follow up with Dr. ")
    b.pii(doctor.last, "PERSON")
    b.add(f" in {rng.randint(1, 6)} weeks; call ")
    b.pii(f.phone_number(), "CONTACT")
    b.add(" with any questions.")
    return b.build(doc_id, "clinical")


# ---------------------------------------------------------------------------- entry


def generate_corpus(n_documents: int, *, seed: int = 0) -> list[Document]:
    """``n_documents`` documents, alternating e-mail and clinical note, fully determined by ``seed``."""
    if isinstance(n_documents, bool) or not isinstance(n_documents, int) or n_documents < 1:
        raise InvalidParameterError(f"n_documents must be a positive integer; got {n_documents!r}")
    from faker import Faker
    from faker_healthcare.provider import HealthcareProvider

    rng = random.Random(seed)
    faker = Faker("en_US")
    faker.add_provider(HealthcareProvider)
    faker.seed_instance(seed)
    return list(_generate(n_documents, rng, faker))


def _generate(n: int, rng: random.Random, faker: Any) -> Iterator[Document]:
    for i in range(n):
        if i % 2 == 0:
            yield _email(f"email-{i // 2:04d}", rng, faker)
        else:
            yield _clinical(f"clinical-{i // 2:04d}", rng, faker)
