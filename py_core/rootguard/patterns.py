"""What RootGuard's finder reads in free text, as patterns: unit words, number shapes, dates,
times and the other numbers that are not values, and the words around a value.

:mod:`py_core.rootguard.text` finds and replaces the values with them; the patterns
the MCP proxy's readers use through ranges and lists (``_SCAN_DATES``, ``_LIST_GAP``,
``_CONNECTOR``, ``_NEXT_NUMBER``) are here too.
"""

from __future__ import annotations

import re

# Surface unit -> canonical unit id (shared across quantities: mg/dL fits glucose,
# triglycerides, cholesterol and creatinine alike).
_UNIT_WORDS: tuple[tuple[str, str], ...] = (
    (r"kg\s*/\s*m(?:2|\u00b2|\^2)", "kg/m2"),
    (r"kilograms?|kilos?|kgs?", "kg"),
    (r"pounds?|lbs?", "lb"),
    (r"centimet(?:er|re)s?|cm", "cm"),
    (r"millimet(?:er|re)s?|mm(?!\s*hg|\s*/)", "mm"),
    (r"met(?:er|re)s?|m(?![a-z/])", "m"),
    (r"inch(?:es)?|in(?![a-z])", "in"),
    (r"feet|foot|ft", "ft"),
    (r"mm\s*hg", "mmHg"),
    (r"mg\s*/\s*dl", "mg/dL"),
    (r"mmol\s*/\s*l", "mmol/L"),
    (r"[u\u00b5\u03bc]mol\s*/\s*l", "umol/L"),
    (r"[u\u00b5\u03bc]i?u\s*/\s*ml|mi?u\s*/\s*l", "uU/mL"),
    (r"pmol\s*/\s*l", "pmol/L"),
    (r"i?u\s*/\s*l", "U/L"),
    (
        r"(?:[x\u00d7*]\s*)?10\s*(?:\^|\*\*)?\s*(?:9|\u2079)\s*/\s*l|(?:[x\u00d7*]\s*)?10\s*(?:\^|\*\*)?\s*(?:3|\u00b3)"
        r"\s*/\s*[u\u00b5\u03bc]l|k\s*/\s*[u\u00b5\u03bc]l|/\s*nl",
        "10^9/L",
    ),
    (r"ml\s*/\s*min(?:\s*/\s*1\.73\s*m(?:2|\u00b2|\^2))?", "mL/min/1.73m2"),
    (r"years?\s+old|years?|yrs?|y\s*/\s*o|yo", "years"),
    (r"%", "%"),
)
_UNIT_RE = re.compile(
    r"\s?(?:"
    + "|".join(f"(?P<u{i}>{pattern})" for i, (pattern, _) in enumerate(_UNIT_WORDS))
    + r")"
    r"(?![a-z0-9])",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"(?<![\w.,/\-'\u2032])(\d+(?:\.\d+)?)(?!\.\d|,\d|\d|[/\-]\d)")
_FEET_INCHES = re.compile(
    r"(?<![\w.])(?P<ft>[3-8])\s*(?:'|\u2032|ft\.?|feet|foot)\s*(?P<in>\d{1,2}(?:\.\d)?)\s*"
    r"(?:\"|\u2033|''|in(?:ch(?:es)?)?\b\.?)?",
    re.IGNORECASE,
)
_BLOOD_PRESSURE = re.compile(
    r"(?<![\w./])(?P<sys>\d{2,3})\s*/\s*(?P<dia>\d{2,3})(?![\w./]|/\d)(?P<unit>\s*mm\s*hg)?",
    re.IGNORECASE,
)
# A slash-separated pair of numbers ("40/35"), as written after a pair of labels.
_PAIR = re.compile(r"(?<![\w./])(?P<a>\d+(?:\.\d+)?)\s*/\s*(?P<b>\d+(?:\.\d+)?)(?![\w.]|/\d)")
_PAIR_JOIN = re.compile(r"^\s*/\s*$")
# Clinical age-sex shorthand: "52M", "52 F" (capital letter only: "52m" is metres).
_AGE_SEX = re.compile(r"(?<![\w.,/\-'$\u00a3\u20ac])(?P<age>\d{1,3})\s?[MF](?![\w'])")
_BP_WORDS = re.compile(r"(?:\bbp\b|blood\s+pressure)[^.;!?\n\d]{0,20}$", re.IGNORECASE)
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_DATES_AND_TIMES = (
    r"\b\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}\b",  # dates 2024-05-12, 12/05/2024
    rf"\b{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b",  # May 12, 2024
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b(?:\.?,?\s+\d{{4}})?",  # 12 May
    r"\b\d{1,2}:\d{2}(?::\d{2})?\b",  # times
)
_DATE_TIME = re.compile("|".join(_DATES_AND_TIMES), re.IGNORECASE)
_PROTECTED = re.compile(
    "|".join(
        (
            *_DATES_AND_TIMES,
            # phone numbers
            r"(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)\s?|\b\d{2,4}[\s.-])\d{2,4}[\s.-]\d{2,4}\b",
            r"\b\d{6,}\b",  # identifiers, long numbers
            r"\b\d+(?:\.\d+)?\s*(?:-|\u2013|\u2014|to)\s*\d+(?:\.\d+)?\b",  # ranges 70-80, 70 to 80
            r"\bbetween\s+\d+(?:\.\d+)?\s+and\s+\d+(?:\.\d+)?\b",
            r"\b[a-z]+-?\d+[a-z]*\b",  # codes glued to letters: A1C, B12, COVID-19
            r"\bhttps?://\S+|\b[\w.+-]+@[\w-]+\.[\w.]+",  # URLs and e-mails
        )
    ),
    re.IGNORECASE,
)
_AGE_BEFORE = re.compile(
    r"(?:\bi'?m|\bi\s+am|\bi\u2019m|\baged?|\bage\s+(?:is|of)|\bturned|\bturning)\s*:?\s*$",
    re.IGNORECASE,
)
_AGE_AFTER = re.compile(
    r"^(?:\s*-?\s*years?\s*-?\s*old|\s*-year-old|\s*(?:yrs?|y\s*/\s*o|yo)\b)", re.IGNORECASE
)
_FILLER = re.compile(
    r"^(?:\s|:|=|\bis\b|\bwas\b|\bwere\b|\bof\b|\bare\b|\bnow\b|\babout\b|\baround\b|\bcurrently\b|"
    r"\btoday\b|\bmeasured\b|\bat\b|\bjust\b|\bvalue\b|\blevel\b|\blevels\b|\breading\b|"
    r"\bfasting\b|\bapprox\.?|~|\(|\)|,)*$",
    re.IGNORECASE,
)


_SCAN_DATES = re.compile(
    "|".join(
        (
            r"\b(?P<y1>\d{4})[-/.](?P<m1>\d{1,2})[-/.](?P<d1>\d{1,2})\b",
            r"\b(?P<a2>\d{1,2})[-/.](?P<b2>\d{1,2})[-/.](?:\d{4}|\d{2})\b",
            *_DATES_AND_TIMES[1:],
        )
    ),
    re.IGNORECASE,
)


_GAP_UNITS = "|".join(f"(?:{pattern})" for pattern, _ in _UNIT_WORDS)
# Between an alias and a number of its range or list: filler words, other numbers of the
# list, their units and the connectors ("weight 92, 93.7 and 95 kg", "ALT between 30 and 38").
_LIST_GAP = re.compile(
    r"^(?:\s|[:=,;/&()~+\-\u2013\u2014\u00b1]|\.(?!\d)|"
    r"\b(?:is|was|were|of|are|now|about|around|currently|today|measured|at|just|value|values|"
    r"level|levels|reading|readings|fasting|approx|between|from|to|and|or|range|ranging|"
    r"ranges|went|up|down|then|vs|versus)\b|"
    # atomic: a run of digits is one number here (no exponential backtracking on "1 1 1 ... x")
    r"(?>\d+(?:[.,'\u2019 ]\d+)*(?:[eE][-+]?\d{1,3})?)|"
    rf"(?<![a-z])(?:{_GAP_UNITS})(?![a-z0-9]))*$",
    re.IGNORECASE,
)
_CONNECTOR = re.compile(
    r"\s*(?:-|\u2013|\u2014|\.\.|to|and|or|,|/|&|\u00b1|\+/-)\s*"
    r"(?=\d)",
    re.IGNORECASE,
)
_NEXT_NUMBER = re.compile(r"\d+(?:[.,'\u2019]\d+)*(?:[eE][-+]?\d{1,3})?")
