"""A seeded corpus of Korean and French notes and e-mails with planted PII.

Each document is built from hand-written templates of ordinary sentences (the
common words) with slots for personal data in that language's formats:

* Korean: names (family + given name: 김민준), resident registration numbers
  (850314-1234567), mobile numbers (010-2345-6789), road-name addresses
  (서울특별시 강남구 테헤란로 152), patient numbers, e-mail addresses, dates.
* French: names (Hélène Lefèvre), NIR numbers (1 85 05 78 006 084 36), phone
  numbers (06 12 34 56 78), addresses (12 rue des Écoles, 75005 Paris), patient
  numbers, e-mail addresses, dates (14/03/1970).

Words are whitespace-separated tokens (what k-RR's word boundaries are); every
token of a PII value is marked sensitive with its category.  The generator uses
only :class:`random.Random` seeded from a string, so the corpus is identical on
every machine.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

__all__ = ["Document", "Word", "generate", "words_of"]

LANGUAGES = ("ko", "fr")


@dataclass(frozen=True, slots=True)
class Word:
    text: str
    sensitive: bool
    category: str | None  # name, id, phone, address, email, date, number


@dataclass(frozen=True, slots=True)
class Document:
    language: str
    kind: str
    text: str
    words: tuple[Word, ...]


# ------------------------------------------------------------------ Korean

_KO_FAMILY = [
    "김",
    "이",
    "박",
    "최",
    "정",
    "강",
    "조",
    "윤",
    "장",
    "임",
    "한",
    "오",
    "서",
    "신",
    "권",
    "황",
    "안",
    "송",
    "류",
    "홍",
    "전",
    "고",
    "문",
    "양",
    "손",
    "배",
    "백",
    "허",
    "남",
    "심",
]
_KO_GIVEN = [
    "민준",
    "서연",
    "지우",
    "하준",
    "도윤",
    "서윤",
    "예준",
    "지호",
    "수아",
    "지민",
    "현우",
    "은서",
    "건우",
    "채원",
    "유진",
    "시우",
    "하은",
    "준서",
    "지유",
    "민서",
    "주원",
    "윤서",
    "승현",
    "다은",
    "태윤",
    "예린",
    "정훈",
    "혜진",
    "성민",
    "보람",
    "영수",
    "미경",
]
_KO_CITY = [
    ("서울특별시", ["강남구", "마포구", "송파구", "종로구", "서초구", "관악구"]),
    ("부산광역시", ["해운대구", "수영구", "동래구", "사하구"]),
    ("대구광역시", ["수성구", "달서구", "중구"]),
    ("인천광역시", ["연수구", "남동구", "부평구"]),
    ("경기도", ["수원시", "성남시", "고양시", "용인시"]),
]
_KO_ROAD = [
    "테헤란로",
    "월드컵로",
    "올림픽로",
    "세종대로",
    "반포대로",
    "센텀중앙로",
    "해운대로",
    "달구벌대로",
    "컨벤시아대로",
    "광교중앙로",
    "판교역로",
    "중앙로",
    "한강대로",
    "동일로",
    "봉은사로",
]
_KO_SYMPTOM = [
    "두통",
    "기침",
    "복통",
    "어지럼증",
    "발열",
    "요통",
    "가슴",
    "통증",
    "호흡곤란",
    "불면증",
    "피로",
]
_KO_DAY = ["월요일", "화요일", "수요일", "목요일", "금요일", "토요일"]

_KO_NOTE = [
    "환자 {name} 씨는 {day}부터 {symptom}이 있다고 말했습니다.",
    "주민등록번호는 {rrn}이고 연락처는 {phone}입니다.",
    "주소는 {address}입니다.",
    "환자 번호 {mrn}로 등록되었습니다.",
    "오늘 검사 결과는 대체로 좋았지만 혈압이 조금 높았습니다.",
    "의사는 충분히 쉬고 물을 많이 마시라고 했습니다.",
    "다음 주에 다시 병원에 와서 검사를 받기로 했습니다.",
    "가족 중에 비슷한 병을 앓은 사람은 없다고 합니다.",
    "약을 먹은 뒤에 증상이 많이 좋아졌습니다.",
    "생년월일은 {date}입니다.",
    "보호자 {name2} 씨에게 결과를 설명했습니다.",
    "환자는 담배를 피우지 않고 술도 거의 마시지 않습니다.",
]
_KO_MAIL = [
    "안녕하세요 {name2} 님,",
    "지난번 회의에서 말씀드린 내용을 정리해서 보내 드립니다.",
    "혹시 궁금한 점이 있으시면 {phone}으로 연락 주세요.",
    "이메일 주소는 {email}입니다.",
    "다음 회의는 {day} 오후 세 시에 시작합니다.",
    "자료는 {address} 사무실로 보내 주시면 됩니다.",
    "이번 프로젝트는 생각보다 시간이 많이 걸릴 것 같습니다.",
    "모든 분들의 의견을 듣고 다시 연락드리겠습니다.",
    "좋은 하루 보내세요.",
    "감사합니다.",
    "{name} 드림",
]


def _ko_name(rng: random.Random) -> str:
    return rng.choice(_KO_FAMILY) + rng.choice(_KO_GIVEN)


def _ko_values(rng: random.Random) -> dict[str, list[tuple[str, str]]]:
    city, districts = rng.choice(_KO_CITY)
    yy, mm, dd = rng.randint(40, 99), rng.randint(1, 12), rng.randint(1, 28)
    roman = rng.choice(["minjun", "seoyeon", "jiwoo", "hajun", "doyun", "yujin", "sumin"])
    return {
        "name": [(_ko_name(rng), "name")],
        "name2": [(_ko_name(rng), "name")],
        "rrn": [
            (f"{yy:02d}{mm:02d}{dd:02d}-{rng.randint(1, 2)}{rng.randint(0, 999999):06d}", "id")
        ],
        "phone": [(f"010-{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}", "phone")],
        "address": [
            (city, "address"),
            (rng.choice(districts), "address"),
            (rng.choice(_KO_ROAD), "address"),
            (str(rng.randint(1, 400)), "address"),
        ],
        "mrn": [(f"{rng.randint(10_000_000, 99_999_999)}", "id")],
        "email": [
            (
                f"{roman}.{rng.choice(['kim', 'lee', 'park'])}{rng.randint(1, 99)}@example.co.kr",
                "email",
            )
        ],
        "date": [(f"19{yy:02d}년", "date"), (f"{mm}월", "date"), (f"{dd}일", "date")],
        "day": [(rng.choice(_KO_DAY), None)],  # type: ignore[list-item]
        "symptom": [(rng.choice(_KO_SYMPTOM), None)],  # type: ignore[list-item]
    }


# ------------------------------------------------------------------ French

_FR_FIRST = [
    "Hélène",
    "François",
    "Amélie",
    "Jérôme",
    "Céline",
    "Théo",
    "Chloé",
    "Léa",
    "Maël",
    "Noémie",
    "Inès",
    "Loïc",
    "Zoé",
    "Élodie",
    "Gaëlle",
    "André",
    "Mathilde",
    "Julien",
    "Camille",
    "Lucas",
    "Manon",
    "Hugo",
    "Louise",
    "Thomas",
]
_FR_LAST = [
    "Dubois",
    "Lefèvre",
    "Moreau",
    "Girard",
    "Bézier",
    "Mercier",
    "Lemaître",
    "Fournier",
    "Rousseau",
    "Gauthier",
    "Chevalier",
    "Lévêque",
    "Bonnet",
    "Faure",
    "Brûlé",
    "Dupré",
    "Garnier",
    "Mégret",
    "Thébault",
    "Perrot",
]
_FR_STREET = [
    "rue des Écoles",
    "avenue Jean Jaurès",
    "boulevard Saint-Michel",
    "rue de la République",
    "place du Marché",
    "rue Émile Zola",
    "chemin des Prés",
    "allée des Tilleuls",
]
_FR_CITY = [
    ("75005", "Paris"),
    ("69003", "Lyon"),
    ("13006", "Marseille"),
    ("31000", "Toulouse"),
    ("44000", "Nantes"),
    ("67000", "Strasbourg"),
    ("59800", "Lille"),
    ("06000", "Nice"),
]
_FR_SYMPTOM = [
    "fièvre",
    "toux",
    "fatigue",
    "douleur",
    "vertiges",
    "nausées",
    "insomnie",
    "essoufflement",
]
_FR_DAY = ["lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi"]

_FR_NOTE = [
    "Le patient {name} se plaint de {symptom} depuis {day} dernier.",
    "Son numéro de sécurité sociale est le {nir}.",
    "On peut le joindre au {phone}.",
    "Il habite au {address}.",
    "Numéro de dossier : {mrn}.",
    "Né le {date}.",
    "L'examen clinique est rassurant mais la tension reste un peu élevée.",
    "Le médecin lui a conseillé de se reposer et de boire beaucoup d'eau.",
    "Une prise de sang sera faite la semaine prochaine à l'hôpital.",
    "Il ne fume pas et ne boit presque jamais d'alcool.",
    "Les résultats ont été expliqués à sa fille {name2}.",
    "Après le traitement, les symptômes se sont nettement améliorés.",
]
_FR_MAIL = [
    "Bonjour {name2},",
    "Je vous envoie le résumé de notre réunion de la semaine dernière.",
    "Si vous avez des questions, vous pouvez m'appeler au {phone}.",
    "Mon adresse électronique est {email}.",
    "La prochaine réunion aura lieu {day} à quinze heures.",
    "Merci d'envoyer les documents au {address}.",
    "Ce projet prendra sans doute plus de temps que prévu.",
    "Je reviendrai vers vous après avoir écouté l'avis de toute l'équipe.",
    "Très bonne journée à vous.",
    "Bien cordialement,",
    "{name}",
]


def _fr_values(rng: random.Random) -> dict[str, list[tuple[str, str]]]:
    first, last = rng.choice(_FR_FIRST), rng.choice(_FR_LAST)
    first2, last2 = rng.choice(_FR_FIRST), rng.choice(_FR_LAST)
    postcode, city = rng.choice(_FR_CITY)
    street = rng.choice(_FR_STREET).split()
    sex, yy, mm = rng.randint(1, 2), rng.randint(40, 99), rng.randint(1, 12)
    nir = f"{sex} {yy:02d} {mm:02d} {rng.randint(1, 95):02d} {rng.randint(1, 999):03d} {rng.randint(1, 999):03d} {rng.randint(1, 97):02d}"
    phone = f"0{rng.choice([1, 6, 7])} " + " ".join(f"{rng.randint(0, 99):02d}" for _ in range(4))
    ascii_first = first.lower().translate(str.maketrans("éèêëàâçîïôûùüœ", "eeeeaaciiouuuo"))
    ascii_last = last.lower().translate(str.maketrans("éèêëàâçîïôûùüœ", "eeeeaaciiouuuo"))
    return {
        "name": [(first, "name"), (last, "name")],
        "name2": [(first2, "name"), (last2, "name")],
        "nir": [(part, "id") for part in nir.split()],
        "phone": [(part, "phone") for part in phone.split()],
        "address": [(str(rng.randint(1, 120)), "address")]
        + [(w, "address") for w in street]
        + [(postcode, "address"), (city, "address")],
        "mrn": [(f"{rng.randint(10_000_000, 99_999_999)}", "id")],
        "email": [(f"{ascii_first}.{ascii_last}@exemple.fr", "email")],
        "date": [(f"{rng.randint(1, 28):02d}/{mm:02d}/19{yy:02d}", "date")],
        "day": [(rng.choice(_FR_DAY), None)],  # type: ignore[list-item]
        "symptom": [(rng.choice(_FR_SYMPTOM), None)],  # type: ignore[list-item]
    }


_SLOT = re.compile(r"\{(\w+)\}")


def _fill(template: str, values: dict[str, list[tuple[str, str]]]) -> list[Word]:
    """The words of one sentence; a slot's tokens carry its category, attached text too."""
    words: list[Word] = []
    for token in template.split():
        match = _SLOT.search(token)
        if not match:
            words.append(Word(token, False, None))
            continue
        before, after = token[: match.start()], token[match.end() :]
        parts = values[match.group(1)]
        pieces = [text for text, _ in parts]
        pieces[0] = before + pieces[0]
        pieces[-1] = pieces[-1] + after
        for text, (_, category) in zip(pieces, parts, strict=True):
            words.append(Word(text, category is not None, category))
    return words


def generate(language: str, n_documents: int, seed: int) -> list[Document]:
    """``n_documents`` seeded documents in ``language`` ("ko" or "fr"), half notes, half e-mails."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}; got {language!r}")
    out = []
    for index in range(n_documents):
        rng = random.Random(f"scripts-corpus/{seed}/{language}/{index}")
        kind = "note" if index % 2 == 0 else "email"
        if language == "ko":
            values, templates = _ko_values(rng), _KO_NOTE if kind == "note" else _KO_MAIL
        else:
            values, templates = _fr_values(rng), _FR_NOTE if kind == "note" else _FR_MAIL
        chosen = list(templates)
        if kind == "note":
            rng.shuffle(chosen)
            chosen = chosen[: rng.randint(7, len(chosen))]
        words: list[Word] = []
        for template in chosen:
            words.extend(_fill(template, values))
        out.append(Document(language, kind, " ".join(w.text for w in words), tuple(words)))
    return out


def words_of(document: Document) -> tuple[Word, ...]:
    return document.words
