"""Checks of how numbers are written (py_core/rootguard/written.py) and of the context helpers
of text.py the MCP proxy reads them with; stdlib only, so they also run inside Pyodide."""

from __future__ import annotations

from py_core.rootguard import api
from py_core.rootguard.profile import load_profile
from py_core.rootguard.text import alias_hits, dates_and_times, names_before, unit_after
from py_core.rootguard.written import convert_any, number_runs, parse_single, unit_spans


def _values(text: str) -> list[list[list[float]]]:
    return [[[w.value for w in r] for r in readings] for _s, _e, readings in number_runs(text)]


def check_every_reading_of_a_run() -> None:
    assert _values("93,7") == [[[93.7], [93.0, 7.0]]]
    assert _values("263,000") == [[[263000.0], [263.0], [263.0, 0.0]]]
    assert _values("263.000") == [[[263.0], [263000.0]]]
    assert _values("263 000 and 263'000")[0][0] == [263000.0]
    assert _values("47,38,117") == [[[47.0, 38.0, 117.0]]]
    assert _values("93.7,181.3") == [[[93.7, 181.3]]]
    assert _values("9.37e1 and 9.37E+01") == [[[93.7]], [[93.7]]]
    assert _values("93.7-95") == [[[93.7]], [[95.0]]]
    assert _values("P-004217, A1C, weight%3D93.7") == [[[4217.0]], [[93.7]]]


def check_a_value_is_written_back_the_same_way() -> None:
    for text, value, expected in [
        ("93,7", 97.24, "97,2"),
        ("263,000", 270000.0, "270,000"),
        ("263 000", 270000.0, "270 000"),
        ("9.37e1", 97.2, "9.72e1"),
        ("9.37E+01", 97.2, "9.72E+01"),
        ("1.234,5", 2345.67, "2.345,7"),
        ("47", 52.4, "52"),
    ]:
        first = number_runs(text)[0][2][0][0]
        assert first.write(value) == expected, (text, first.write(value))


def check_one_number_with_a_unit() -> None:
    readings, unit = parse_single("93,7 kg") or ([], "")
    assert [r.value for r in readings] == [93.7] and unit == "kg"
    readings, unit = parse_single("263 x10^9/L") or ([], "")
    assert [r.value for r in readings] == [263.0] and unit == "x10^9/L"
    assert parse_single("93.7-95 kg") is None and parse_single("about 93") is None


def check_more_units() -> None:
    assert convert_any(93.7, "mass", "kg", "g") == 93700.0
    assert convert_any(564.0, "age", "months", "years") == 47.0
    assert abs((convert_any(263.0, "platelets", "10^9/L", "/uL") or 0) - 263000.0) < 1e-6
    assert convert_any(1.0, "mass", "kg", "months") is None


def check_context_across_ranges_and_lists() -> None:
    profile = load_profile(dict(api.DEFAULT_PROFILE))
    for text in ("weight 93.7-95 kg", "weight between 93.7 and 95 kg", "weight 92\u201393.7 kg"):
        hits = alias_hits(text, profile)
        for start, end, _readings in number_runs(text):
            assert names_before(text, start, hits) == {"weight_kg"}, text
            assert (unit_after(text, end) or ("", 0))[0] == "kg", text
    text = "weight 93.7; age 47"
    start = text.index("47")
    assert names_before(text, start, alias_hits(text, profile)) == {"age"}
    assert (unit_after("263,000/uL", 7) or ("", 0))[0] == "/uL"
    assert (unit_after("93700 g", 5) or ("", 0))[0] == "g"


def check_what_is_not_a_value() -> None:
    text = "on 2026-11-03 at 10:47, 117/38/29 and 03/11/2026"
    assert [text[a:b] for a, b in dates_and_times(text)] == ["2026-11-03", "10:47", "03/11/2026"]
    text = "263 x10^9/L, 88 mL/min/1.73m2"
    assert [text[a:b] for a, b in unit_spans(text)] == ["x10^9/L", "/1.73m2"]


def check_a_long_gap_of_digits_is_read_in_linear_time() -> None:
    # The list gap once backtracked exponentially on digits it could split many ways.
    profile = load_profile(dict(api.DEFAULT_PROFILE))
    text = "weight " + "1 " * 60 + "x 93.7"
    assert names_before(text, text.index("93.7"), alias_hits(text, profile)) == set()
    text = "weight " + "1," * 30 + " 93.7 kg"
    assert names_before(text, text.index("93.7"), alias_hits(text, profile)) == {"weight_kg"}
